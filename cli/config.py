"""``streamdi config``: inspect the configuration."""

from __future__ import annotations

import argparse

from cli.commands import EXIT_OK, Commands, write_json
from streamdi.settings import StreamdiSettings, masked_settings


def _show(args: argparse.Namespace, settings: StreamdiSettings) -> int:
    data = masked_settings(settings)
    if args.json:
        write_json(data, "-")
        return EXIT_OK
    for section, values in data.items():
        for name, value in values.items():
            print(f"{section}__{name}".upper() + f"={'' if value is None else value}")
    return EXIT_OK


def register(commands: Commands) -> None:
    config = commands.add_parser("config", help="inspect the configuration")
    sub = config.add_subparsers(dest="config_command", metavar="SUBCOMMAND")
    show = sub.add_parser("show", help="print the effective configuration (secrets masked)")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(handler=_show)

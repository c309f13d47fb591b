"""Helpers shared by the modules that add ``streamdi`` subcommands."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeAlias

from streamdi.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE
from streamdi.settings import StreamdiSettings

__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "Commands",
    "Handler",
    "write_json",
]

Handler: TypeAlias = Callable[[argparse.Namespace, StreamdiSettings], int]
#: What ``register`` receives: the ``add_subparsers()`` result of the parent parser (argparse
#: names its type only privately).
Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"  # noqa: SLF001


def write_json(data: Any, path: str) -> None:
    """Write ``data`` as indented JSON to ``path``, or to stdout when ``path`` is ``-``."""
    text = json.dumps(data, indent=2, sort_keys=True, default=str)
    if path == "-":
        print(text)
    else:
        Path(path).write_text(text + "\n", encoding="utf-8")

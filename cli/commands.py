"""Helpers shared by the modules that add ``streamdi`` subcommands."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeAlias

from streamdi.settings import StreamdiSettings

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
#: A service or resource the command needs does not answer (``streamdi status|pause|resume``).
EXIT_UNAVAILABLE = 3

Handler: TypeAlias = Callable[[argparse.Namespace, StreamdiSettings], int]
#: What ``register`` receives: the ``add_subparsers()`` result of the parent parser.
Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def write_json(data: Any, path: str) -> None:
    """Write ``data`` as indented JSON to ``path``, or to stdout when ``path`` is ``-``."""
    text = json.dumps(data, indent=2, sort_keys=True, default=str)
    if path == "-":
        print(text)
    else:
        Path(path).write_text(text + "\n", encoding="utf-8")

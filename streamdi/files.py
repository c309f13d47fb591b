"""Durable files: what staging's segments and checkpoints and a warehouse file's swap share."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_path(path: Path) -> None:
    """fsync a file or a folder (its entries: a rename or a removal in it) by path."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

"""The campaign's full disk (``disk_full``): filling it never fails the campaign itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.faults.processes import StagingDisk


def test_filling_a_disk_that_serve_fills_too_stops_without_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The ledger fault campaign (seed 1, 1,000 offers), fault 83 (``disk_full``): serve wrote to
    staging while the ballast was written, a write met a full disk, the buffered bytes were
    written again when the ballast was closed, and that ENOSPC ended the campaign. ``/dev/full``
    is a disk that always says it is full."""
    disk = StagingDisk(Path("/tmp"), 1)
    disk.ballast = Path("/dev/full")
    free = iter([1000, 1000, 1000, 0])
    monkeypatch.setattr(disk, "free_bytes", lambda: next(free, 0))
    assert disk.fill() == 0

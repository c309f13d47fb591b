"""Giving memory back (issue 22): glibc's malloc arenas can be limited, and a TPC-DI run limits
them first thing, before its threads start (TPCDI__MALLOC_ARENAS)."""

from __future__ import annotations

import ctypes.util

import pytest

import tpcdi.run.job as job
from streamdi.memory import limit_malloc_arenas
from streamdi.settings import load_settings


def test_the_arena_limit_is_set_on_glibc_and_zero_leaves_the_default() -> None:
    glibc = ctypes.util.find_library("c") is not None
    assert limit_malloc_arenas(8) is glibc
    assert limit_malloc_arenas(0) is False


class Limited(Exception):
    pass


def test_a_tpcdi_run_limits_the_arenas_before_anything_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[int] = []

    def limit(arenas: int) -> bool:
        asked.append(arenas)
        raise Limited

    monkeypatch.setattr(job, "limit_malloc_arenas", limit)
    settings = load_settings(tpcdi={"malloc_arenas": 3})
    with pytest.raises(Limited):
        job.run_tpcdi(job.RunOptions(sf=0.01), settings)
    assert asked == [3]

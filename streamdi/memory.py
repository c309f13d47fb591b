"""Giving back to the system the memory a finished phase freed."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable

import pyarrow as pa


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none (musl, macOS)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    trim = getattr(ctypes.CDLL(name), "malloc_trim", None)
    if trim is None:
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim  # type: ignore[no-any-return]


#: glibc's ``mallopt`` parameter of the number of malloc arenas.
_M_ARENA_MAX = -8


@functools.cache
def _mallopt() -> Callable[[int, int], int] | None:
    """glibc's ``mallopt``, or None where the C library has none."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    mallopt = getattr(ctypes.CDLL(name), "mallopt", None)
    if mallopt is None:
        return None
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return mallopt  # type: ignore[no-any-return]


def limit_malloc_arenas(arenas: int) -> bool:
    """Let glibc's malloc use at most ``arenas`` arenas (``MALLOC_ARENA_MAX``) from now on; 0
    leaves glibc's default (eight per core). Each thread that allocates may get an arena of its
    own, and an arena keeps the memory freed in it for that thread's later use: a run's threads
    (pipeline, committer, migration, DuckDB's and Arrow's callers) each held on to their share.
    At TPC-DI SF 10 two arenas took the driver from 1,796 to 1,040 MB after the historical load
    and from 2,107 to 1,832 MB after the first update. Call it before the threads start (arenas
    made earlier stay). Returns whether the limit was set (False without glibc, or for 0)."""
    if arenas <= 0:
        return False
    mallopt = _mallopt()
    return mallopt is not None and mallopt(_M_ARENA_MAX, arenas) == 1


def release_free_memory() -> None:
    """Return to the operating system the free memory the allocators keep for reuse: Arrow's
    pool (mimalloc or jemalloc) holds on to the pages of freed buffers, and the allocations of the
    next phase, made by other threads or in other sizes, need not reuse them; glibc's malloc
    keeps freed heap too. Call it at the end of a phase that moved a lot of data through this
    process: after TPC-DI's historical transform at SF 3 the process held 697 MB with nothing of
    Arrow's allocated any more, 381 MB after this. Cheap (milliseconds); safe at any time."""
    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)

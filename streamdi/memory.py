"""Giving back to the system the memory a finished phase freed."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable
from typing import Any

import pyarrow as pa


@functools.cache
def _libc(name: str, *argtypes: Any) -> Callable[..., int] | None:
    """The C library's function ``name`` taking ``argtypes`` and returning an int, or None where
    the C library has none (glibc's ``malloc_trim`` and ``mallopt``: not on musl or macOS)."""
    library = ctypes.util.find_library("c")
    if library is None:
        return None
    function = getattr(ctypes.CDLL(library), name, None)
    if function is None:
        return None
    function.argtypes = list(argtypes)
    function.restype = ctypes.c_int
    return function  # type: ignore[no-any-return]


#: glibc's ``mallopt`` parameter of the number of malloc arenas.
_M_ARENA_MAX = -8


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
    mallopt = _libc("mallopt", ctypes.c_int, ctypes.c_int)
    return mallopt is not None and mallopt(_M_ARENA_MAX, arenas) == 1


def release_free_memory() -> None:
    """Return to the operating system the free memory the allocators keep for reuse: Arrow's
    pool (mimalloc or jemalloc) holds on to the pages of freed buffers, and the allocations of the
    next phase, made by other threads or in other sizes, need not reuse them; glibc's malloc
    keeps freed heap too. Call it at the end of a phase that moved a lot of data through this
    process: after TPC-DI's historical transform at SF 3 the process held 697 MB with nothing of
    Arrow's allocated any more, 381 MB after this. Cheap (milliseconds); safe at any time."""
    pa.default_memory_pool().release_unused()
    trim = _libc("malloc_trim", ctypes.c_size_t)
    if trim is not None:
        trim(0)

"""Compiling generated kernels once, and caching them on disk across processes.

A generated module is written to the kernel cache directory under a name derived from its source
(``ENGINE__KERNEL_CACHE``, default ``~/.cache/streamdi/kernels``) and imported from there, so
numba's own cache (``cache=True``) keeps the machine code next to it: the second process to run a
dataflow skips compilation.
 Within a process, modules are memoized by source.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numba
import numpy as np

from etl_dataflows.executors.local.atomics import atomic_load
from streamdi.settings import load_settings

_LOADED: dict[str, ModuleType] = {}
_LOCK = threading.Lock()
_SPIN: list[float] = []


def cache_dir() -> Path:
    """Where generated kernel modules live: ``ENGINE__KERNEL_CACHE``. Read from the settings
    tree here, when a kernel is first written, rather than passed in: Spark's Python workers
    compile kernels too, and they inherit the environment, not the driver's arguments."""
    configured = load_settings().engine.kernel_cache
    base = configured or Path.home() / ".cache" / "streamdi" / "kernels"
    try:
        base.mkdir(parents=True, exist_ok=True)
        probe = base / ".write-test"
        probe.write_text("ok", encoding="utf-8")
        return base
    except OSError:
        fallback = Path(tempfile.gettempdir()) / "streamdi-kernels"
        fallback.mkdir(parents=True, exist_ok=True)
        return fallback


def _support_version() -> str:
    """A digest of the compiled code generated modules call into: numba's cache only checks a
    module's own file, so a change there must change the generated modules' names."""
    if not _SUPPORT:
        here = Path(__file__).resolve().parent
        text = "".join((here / name).read_text(encoding="utf-8") for name in _SUPPORT_FILES)
        _SUPPORT.append(hashlib.sha1(text.encode("utf-8")).hexdigest()[:12])
    return _SUPPORT[0]


_SUPPORT: list[str] = []
_SUPPORT_FILES = ("kernels.py", "atomics.py")


def load_module(source: str) -> ModuleType:
    """Import (writing it first if needed) the generated module with this source."""
    source = f"# support {_support_version()}\\n{source}"
    digest = hashlib.sha1(source.encode("utf-8")).hexdigest()[:20]
    with _LOCK:
        module = _LOADED.get(digest)
        if module is not None:
            return module
        name = f"streamdi_kernel_{digest}"
        path = cache_dir() / f"{name}.py"
        if not path.exists() or path.read_text(encoding="utf-8") != source:
            temporary = path.with_suffix(f".{os.getpid()}.tmp")
            temporary.write_text(source, encoding="utf-8")
            temporary.replace(path)
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        _LOADED[digest] = module
        return module


@numba.njit(nogil=True, cache=True)
def spin_loop(iterations: int, sink: np.ndarray) -> None:
    """Busy work for ``iterations`` rounds (the compiled side of ``cost()``). Every round reads
    ``sink`` atomically, so the compiler can neither fold nor vectorize the loop wherever it is
    inlined: the calibration holds inside the kernels too."""
    x = np.int64(1)
    for _ in range(iterations):
        step: Any = atomic_load(sink, 0)  # type: ignore[call-arg]
        x = (x * np.int64(6364136223846793005) + step) & np.int64(0xFFFFFFFF)
    sink[0] += x


def spin_iterations_per_ns() -> float:
    """Iterations of the busy loop per nanosecond on this machine (measured once)."""
    if not _SPIN:
        sink = np.zeros(1, dtype=np.int64)
        spin_loop(10, sink)
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter_ns()
            spin_loop(2_000_000, sink)
            best = min(best, time.perf_counter_ns() - start)
        _SPIN.append(2_000_000 / max(best, 1))
    return _SPIN[0]


# Overflow tests for the generated kernels. They decide *before* computing (LLVM treats signed
# overflow as undefined and may fold a test written on the wrapped result away).
_MAX = np.int64(2**63 - 1)
_MIN = np.int64(-(2**63))
_U_MAX = np.uint64(2**63 - 1)
_U_MIN_MAGNITUDE = np.uint64(2**63)


@numba.njit(cache=True, inline="always")
def add_overflows(a: np.int64, b: np.int64) -> Any:
    return (b > 0 and a > _MAX - b) or (b < 0 and a < _MIN - b)


@numba.njit(cache=True, inline="always")
def sub_overflows(a: np.int64, b: np.int64) -> Any:
    return (b < 0 and a > _MAX + b) or (b > 0 and a < _MIN + b)


@numba.njit(cache=True)
def _magnitude(a: np.int64) -> np.uint64:
    if a >= 0:
        return np.uint64(a)
    return np.uint64(-(a + np.int64(1))) + np.uint64(1)


@numba.njit(cache=True)
def mul_overflows(a: np.int64, b: np.int64) -> Any:
    if a == 0 or b == 0:
        return False
    ua, ub = _magnitude(a), _magnitude(b)
    limit = _U_MAX if (a > 0) == (b > 0) else _U_MIN_MAGNITUDE
    return ua > limit // ub

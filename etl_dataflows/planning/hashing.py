"""The 64-bit mixing function the key indexes hash with (compiled, inlined into their loops)."""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True, inline="always")
def fmix64(x: np.uint64) -> np.uint64:
    """murmur3's 64-bit finalizer: every bit of ``x`` moves every bit of the result."""
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xFF51AFD7ED558CCD)
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xC4CEB9FE1A85EC53)
    x ^= x >> np.uint64(33)
    return x

"""Python's cyclic garbage collector held off while an executor loads its state.

Loading a state image makes millions of objects that form no reference cycles (one dict per
row or window entry, their values): each of the collector's passes during the load finds
nothing and traverses every object made so far, again and again (TPC-DI at SF 100: eleven full
collections, ~1.2 s of a ~25 s resume). Reference counting still frees whatever the load drops;
the collector runs again once the last load in the process ends, if it ran before the first.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_holds = 0
_was_enabled = False


@contextmanager
def collection_held() -> Iterator[None]:
    """Cyclic collection off for the block. Blocks may nest and run in several threads at once:
    the collector is back on when the last of them ends, if it was on when the first began
    (a collector the caller turned off stays off)."""
    global _holds, _was_enabled
    with _lock:
        if _holds == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _holds += 1
    try:
        yield
    finally:
        with _lock:
            _holds -= 1
            if _holds == 0 and _was_enabled:
                gc.enable()

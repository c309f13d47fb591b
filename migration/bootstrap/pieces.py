"""Rows in bounded pieces, read ahead on a thread of their own while the previous piece loads.

A bootstrap reads its relations (staging's DuckDB, a peer's ``COPY`` or Arrow stream) and
bulk-loads them into the target (``COPY``, Arrow). :class:`Prefetch` runs the reading side on a
thread, joining record batches into pieces of about ``piece_bytes`` and handing them over a queue
at most ``depth`` pieces deep: the target loads one piece while the next is read (DuckDB, Arrow's
CSV writer and reader and libpq leave the GIL while they work), and memory stays at a few pieces
whatever the size of the relation. :func:`relation_pieces` reads the relations one after the
other into one stream of pieces, so the read runs ahead across relations too: the next relation is
read while the target loads and commits the one before (most relations fit in one piece, and a
read that waited for each relation's commit would not overlap anything).
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa

#: Bytes of Arrow data per piece a bootstrap loads in one bulk statement.
PIECE_BYTES = 64 << 20


def pieces(batches: Iterable[pa.RecordBatch], piece_bytes: int = PIECE_BYTES) -> Iterator[pa.Table]:
    """``batches`` joined into tables of about ``piece_bytes`` (the last one smaller; none when
    there are no rows)."""
    held: list[pa.RecordBatch] = []
    size = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        held.append(batch)
        size += batch.nbytes
        if size >= piece_bytes:
            yield pa.Table.from_batches(held)
            held, size = [], 0
    if held:
        yield pa.Table.from_batches(held)


def relation_pieces(
    relations: Iterable[tuple[str, Callable[[], Iterable[pa.RecordBatch]]]],
    piece_bytes: int = PIECE_BYTES,
) -> Iterator[tuple[str, pa.Table | None]]:
    """The pieces of each relation in turn, as ``(name, piece)``, and ``(name, None)`` after a
    relation's last piece (also for a relation without rows). ``relations`` pairs a name with a
    function that opens its record batches: it is called when the read reaches the relation (on
    the reading thread, when iterated under :class:`Prefetch`), so only one relation's statement
    is open on a source connection at a time. Closing the iterator closes the open batches."""
    for name, open_batches in relations:
        batches = iter(open_batches())
        try:
            for piece in pieces(batches, piece_bytes):
                yield name, piece
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()
        yield name, None


_END = object()


class Prefetch:
    """Iterate ``source`` on a thread, ``depth`` items ahead; see the module docstring. Use it as a
    context manager: leaving early stops the thread (and closes ``source`` on it). An exception of
    the source is raised where the item would have been."""

    def __init__(self, source: Iterator[Any], depth: int = 2, name: str = "bootstrap-read") -> None:
        self._source = source
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def __enter__(self) -> Prefetch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            for item in self._source:
                if not self._put(item):
                    break
            else:
                self._put(_END)
        except BaseException as exc:  # handed to the consumer
            self._put(exc)
        finally:
            close = getattr(self._source, "close", None)
            if close is not None:
                close()

    def __iter__(self) -> Iterator[Any]:
        while True:
            item = self._queue.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def close(self) -> None:
        """Stop reading ahead and wait for the thread."""
        self._stop.set()
        while self._thread.is_alive():
            with contextlib.suppress(queue.Empty):
                self._queue.get(timeout=0.05)
        self._thread.join()

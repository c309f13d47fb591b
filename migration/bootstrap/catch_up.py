"""How both bootstrap paths end: relations copied at older watermarks brought to staging's.

A relation the rows path copied at ``S_t`` (an earlier run's, or a peer's at ``P``), and every
relation of a peer's file copied at ``P`` (:mod:`migration.bootstrap.file_copy`), holds the rows of
batches up to that watermark. :func:`catch_up` brings them to staging's snapshot ``S`` in the
bootstrap's last transaction, exactly: staging still holds every batch above them (its release
waits for the target), a state table's newest delta of a row id wins and a sink's rows append
(:meth:`~migration.targets.base.BaseTarget.merge_table`), and the sink rows retracted by batches up
to ``S`` go (:mod:`staging.retractions`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

import pyarrow as pa

from migration.bootstrap.pieces import PIECE_BYTES, Prefetch, pieces
from migration.targets.base import BaseTarget
from staging.snapshot import StagingSnapshot


def catch_up(
    target: BaseTarget,
    snap: StagingSnapshot,
    since: Mapping[str, int],
    piece_bytes: int = PIECE_BYTES,
    check: Callable[[], None] | None = None,
) -> int:
    """In the open transaction, in order:

    1. for each relation of ``since`` copied through a batch below ``S`` (``snap``'s watermark),
       staging's changes of ``(since[name], S]`` (a state table's upserts and deletes, a sink's
       rows) into its delta table, in pieces read ahead while the one before loads;
    2. every delta table holding rows (those of step 1, and deltas a copied peer had not merged)
       merged into its full table, then emptied;
    3. the sink rows retracted by batches up to ``S`` deleted.

    The rows step 1 loaded. ``check()`` runs before each relation of step 1 (a bootstrap asked
    to stop raises there)."""
    layout = target.layout
    top = snap.watermark
    loaded = 0
    # 1.
    for name, through in since.items():
        if check is not None:
            check()
        if through >= top:
            continue
        changes: Iterator[pa.RecordBatch]
        if layout.tables[name].kind == "state":
            changes = snap.change_batches(name, after=through, upto=top)
        else:
            changes = snap.output_batches(name, after=through, upto=top)
        with Prefetch(pieces(changes, piece_bytes)) as read:
            for piece in read:
                target.bulk_insert(layout.delta_name(name), piece)
                loaded += piece.num_rows
    # 2.
    for name in target.filled_deltas():
        target.merge_table(name)
        target.execute(f"DELETE FROM {layout.delta_name(name)}")
    # 3.
    target.retract(snap.retractions(upto=top))
    return loaded

"""Where a bootstrap's rows come from: staging's snapshot, and a peer target for the sinks.

* **State tables** are whole in staging: ``state.<table>`` read in one staging read transaction
  (:func:`staging.snapshot.open_snapshot`, which also pins the segment files) at its watermark
  ``S`` — unless staging was *seeded* (:meth:`staging.store.StagingStore.seed`): then it holds
  only the engine's working set (TPC-DI's historical load seeds the current versions, the open
  trades, the active watches; the warehouses hold every version, every trade), and the state
  tables come from a peer too, at ``P`` (its full rows overlaid with its unmerged deltas), brought
  to ``S`` with staging's changes of ``(P, S]``.
* **Sinks** are append-only facts, and staging released the rows of batches up to
  ``released_through`` ``R``. A *peer* is another configured target that holds them: read at its
  own watermark ``P`` in one snapshot transaction (:class:`PeerSnapshot`: its full rows plus its
  unmerged deltas are exactly the rows of batches ``<= P``), and staging supplies ``(P, S]``.
  Staging still holds those: it releases nothing past the lowest acknowledgement of the configured
  targets, and ``P >= R`` (a peer acknowledges only what its ledger holds). The peer's snapshot is
  opened *before* staging's, so ``P <= S``.

Each source is read through a *twin* of its target (:func:`twin`): another target object on the
same warehouse with a connection of its own (a DuckDB file joins the instance the process holds),
so a bootstrap running beside the migrator's rounds never shares a connection with them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa

from migration.bootstrap.record import read_record
from migration.reader import column_types
from migration.schema import WarehouseLayout
from migration.targets.base import BaseTarget
from staging.layout import q
from warehouse.exceptions import WarehouseError

logger = logging.getLogger(__name__)


def twin(target: BaseTarget) -> BaseTarget:
    """A new, unopened target on the same warehouse as ``target`` (a connection of its own)."""
    return target.twin()


def relation_schema(layout: WarehouseLayout, name: str) -> pa.Schema:
    """The Arrow schema of ``name``'s full table in the warehouse."""
    types = column_types(layout, name)
    return pa.schema([(c, types[c]) for c in layout.tables[name].columns])


@dataclass
class PeerSnapshot:
    """A peer target read at its watermark ``watermark`` (one snapshot transaction on a twin).
    ``sinks_from``: the first batch whose sink rows it holds (1, unless it was itself bootstrapped
    without a peer)."""

    name: str
    target: BaseTarget
    watermark: int
    sinks_from: int

    def table_batches(self, name: str) -> Iterator[pa.RecordBatch]:
        """Every current row of state table ``name`` the peer holds (its full rows overlaid with
        its unmerged deltas: the table as of its watermark), in bounded pieces."""
        layout = self.target.layout
        cols = ", ".join(q(c) for c in layout.tables[name].columns)
        sql = f"SELECT {cols} FROM ({layout.current_sql(name)}) c"
        return self.target.driver.export(sql, relation_schema(layout, name))

    def sink_batches(self, sink: str) -> Iterator[pa.RecordBatch]:
        """Every row of ``sink`` the peer holds (full and unmerged delta rows, the columns of the
        full table), in bounded pieces."""
        layout = self.target.layout
        cols = ", ".join(q(c) for c in layout.tables[sink].columns)
        sql = (
            f"SELECT {cols} FROM {layout.full_name(sink)} UNION ALL "
            f"SELECT {cols} FROM {layout.delta_name(sink)}"
        )
        return self.target.driver.export(sql, relation_schema(layout, sink))

    def close(self) -> None:
        self.target.driver.rollback()
        self.target.close()


def open_peer(candidates: Mapping[str, BaseTarget], released: int) -> PeerSnapshot | None:
    """The best peer among ``candidates`` (other configured targets), its snapshot open: one that
    can be reached, is not being bootstrapped itself and holds every batch staging released
    (watermark ``>= released``); among those the one with complete sinks (lowest ``sinks_from``),
    then the highest watermark (fewest rows left to read from staging). None when there is none."""
    best: PeerSnapshot | None = None
    for name, target in candidates.items():
        copy = twin(target)
        try:
            copy.open()
            copy.driver.begin_snapshot()
            record = read_record(copy)
            watermark = copy.watermark()
        except WarehouseError as exc:
            logger.info("bootstrap peer unavailable peer=%s: %s", name, exc)
            copy.driver.rollback()
            copy.close()
            continue
        usable = watermark >= released and (record is None or record.state != "copying")
        peer = PeerSnapshot(name, copy, watermark, 1 if record is None else record.sinks_from)
        if not usable:
            peer.close()
            continue
        if best is None or (peer.sinks_from, -peer.watermark) < (best.sinks_from, -best.watermark):
            if best is not None:
                best.close()
            best = peer
        else:
            peer.close()
    return best

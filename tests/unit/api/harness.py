"""A staged shop with its ground truth at every batch, and a query service over it.

:class:`ShopStage` commits the shop dataflow (a history table with SCD type 2 closings, a table
with deletes, a window whose entries expire, a sink) batch by batch through the serial executor
and records, after each commit, what every logical table holds at that watermark: the truth a
union answer at that watermark must equal, row for row.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa

from api.models import QueryBody
from api.service import QueryService
from etl_dataflows import create_executor
from etl_dataflows.batch import BatchResult
from migration.migrator import Migrator, build_targets
from migration.schema import WarehouseLayout
from runtime.committer import StagingCommitter
from staging.batch_commit import BatchCommit, StreamProgress
from staging.handoff import StagedDeltas
from staging.layout import DEAD_LETTER_INPUT_SCHEMA, output_columns
from staging.store import StagingStore
from streamdi.settings import StreamdiSettings, load_settings
from tests.migration_shop import shop_batch, shop_dataflow

Rows = Counter[tuple[Any, ...]]


def rows_of(table: pa.Table) -> Rows:
    columns = [table.column(i).to_pylist() for i in range(table.num_columns)]
    return Counter(zip(*columns, strict=True))


class ShopStage:
    """See the module docstring. ``truth[w][table]`` is a multiset of rows (all columns in the
    logical table's order)."""

    def __init__(self, path: Path, *, events: int = 120, seed: int = 7) -> None:
        self.flow = shop_dataflow().build()
        self.store = StagingStore(path, self.flow)
        self.events = events
        self.seed = seed
        self._executor = create_executor("serial", self.flow, self.store.load_state())
        self._outputs: dict[str, Rows] = {s: Counter() for s in self.flow.sinks}
        empty = {name: Counter() for name in [*self.flow.tables, *self.flow.sinks]}
        self.truth: dict[int, dict[str, Rows]] = {0: empty}
        self.lock = threading.Lock()

    def batch_commit(self, batch_id: int, dead_letters: pa.Table | None = None) -> BatchCommit:
        """Run batch ``batch_id`` through the engine: what its staging commit writes."""
        result = self._executor.run_batch(shop_batch(batch_id, self.events, self.seed))
        return BatchCommit(
            batch_id=batch_id,
            result=result,
            dead_letters=dead_letters
            if dead_letters is not None
            else DEAD_LETTER_INPUT_SCHEMA.empty_table(),
            offsets={("shop.events", 0): batch_id},
            streams={"events": StreamProgress(batch_id, batch_id, batch_id * self.events, -1)},
            events=self.events,
            records=1,
            arrived_at=time.time(),
            executed_ms=1.0,
        )

    def stage(
        self,
        batch_id: int,
        *,
        committer: StagingCommitter | None = None,
        dead_letters: pa.Table | None = None,
    ) -> None:
        """Commit batch ``batch_id`` to staging, directly or through ``committer`` (the
        pipeline's, with its observers: then this returns once it is committed)."""
        commit = self.batch_commit(batch_id, dead_letters)
        if committer is None:
            self.store.commit([commit])
        else:
            done = committer.committed_batches + 1
            committer.submit(commit)
            deadline = time.monotonic() + 30
            while committer.committed_batches < done and committer.error is None:
                assert time.monotonic() < deadline, f"batch {batch_id} not committed in 30 s"
                time.sleep(0.002)
            if committer.error is not None:
                raise committer.error
        self._record(batch_id, commit.result)

    def _record(self, batch_id: int, result: BatchResult) -> None:
        truth: dict[str, Rows] = {}
        for name, table in self.store.load_state().tables.items():
            truth[name] = rows_of(table)
        for sink in self.flow.sinks:
            # from the batch result, not staging: a migration may release the rows at once
            out = result.outputs.get(sink)
            n = 0 if out is None else out.num_rows
            columns = [[batch_id] * n]
            for name in output_columns(self.flow, sink):
                present = out is not None and name in out.column_names
                columns.append(out.column(name).to_pylist() if present else [None] * n)
            self._outputs[sink] = self._outputs[sink] + Counter(zip(*columns, strict=True))
            truth[sink] = Counter(self._outputs[sink])
        with self.lock:
            self.truth[batch_id] = truth

    def stage_range(self, first: int, last: int) -> None:
        for batch_id in range(first, last + 1):
            self.stage(batch_id)


def shop_settings(tmp: Path, targets: str = "duckdb", **api: Any) -> StreamdiSettings:
    return load_settings(
        streamdi={"state_dir": str(tmp)},
        migration={"targets": targets, "max_batches_per_load": 4},
        api=api,
    )


def shop_service(stage: ShopStage, settings: StreamdiSettings) -> tuple[QueryService, Migrator]:
    layout = WarehouseLayout(stage.flow, settings.migration.schema_name)
    migrator = Migrator(
        StagedDeltas(stage.store), build_targets(settings, layout), settings.migration
    )
    return QueryService(stage.store, settings, migrator=migrator), migrator


def answer_rows(service: QueryService, page: dict[str, Any]) -> Rows:
    """Every row of an answer (all pages), as the service typed them (Arrow, not JSON)."""
    answer = service.answers.get(page["answer_id"])
    return rows_of(answer.result.table)


def ask(service: QueryService, table: str, **options: Any) -> dict[str, Any]:
    """The first page of ``SELECT * FROM table``, as the route serves it."""
    return service.query(QueryBody(sql=f'SELECT * FROM "{table}"', **options)).model_dump()


def check_answer(stage: ShopStage, service: QueryService, table: str, page: dict[str, Any]) -> None:
    """The answer holds exactly the rows of ``table`` at its watermark: no row twice, none
    missing, each in its newest version."""
    watermark = page["watermark"]
    deadline = time.monotonic() + 10
    while True:  # the stager records the truth right after its commit returns
        with stage.lock:
            known = stage.truth.get(watermark)
        if known is not None or time.monotonic() > deadline:
            break
        time.sleep(0.005)
    assert known is not None, f"no truth recorded at watermark {watermark}"
    expected = known[table]
    got = answer_rows(service, page)
    if table in stage.flow.tables:
        ids = [
            i
            for i, c in enumerate(service.planner.tables[table].columns)
            if c in service.planner.tables[table].row_id
        ]
        keys = Counter(tuple(row[i] for i in ids) for row in got.elements())
        twice = [k for k, n in keys.items() if n > 1]
        assert not twice, f"{table}@{watermark} ({page['plan']}): row ids twice {twice[:5]}"
    missing = expected - got
    extra = got - expected
    assert not missing and not extra, (
        f"{table}@{watermark} ({page['plan']}, warehouse at {page['warehouse_watermark']}): "
        f"missing {list(missing.elements())[:3]} extra {list(extra.elements())[:3]}"
    )

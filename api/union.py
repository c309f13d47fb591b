"""Union queries over fresh and historical data: the plans ``island``, ``migrate`` and ``auto``.

The logical tables are the dataflow's state tables and sinks. Staging holds every batch up to its
watermark ``W_s`` (the changes of batches above ``released_through``); a warehouse holds batches up
to its ledger's ``W_t``. A union answer is exact at one batch watermark ``W``: each row once, in
its newest version, none missing.

**island** (the union runs in the service), in order:

1. Open a staging snapshot: ``W_s`` and ``released_through`` ``R`` are fixed.
2. Open a warehouse snapshot (one read-only transaction): ``W_t`` and the last merged batch ``M``.
   Staging released only batches every target acknowledged, and a target acknowledges only what
   it committed, so ``R <= W_t``: staging still holds every batch above ``W_t``.
3. Read the warehouse as of ``W_t`` (full rows overlaid with the newest deltas; only the columns
   the query uses; a one-table query's WHERE evaluated there too) and staging's newest change of
   each row in ``(W_t, W_s]``.
4. In the in-memory island (:mod:`api.sandbox`): per table, the warehouse rows whose row id has
   no staged change plus the staged upserts (a staged delete removes a row, an SCD type 2
   closing replaces the closed version); sinks append. Run the query there. ``W = max(W_t,
   W_s)``.

**migrate**: push the target's pending batches (the same migration round the pipeline runs,
under the same ledger; no merge), then run the query inside the warehouse over its as-of
relations (``W = W_t`` after the push). With no staged change for the tables the query reads,
the push is skipped and the warehouse's answer holds at ``W_s`` too.

**auto**: island or migrate by :class:`~api.planner.PlanModel` from the staged fraction and the
recent timings on the target; the decision travels with the answer.

``include_staged = false`` reads the warehouse alone (``W = W_t``); without any warehouse the
staging changes since batch 0 are the whole answer. A *pinned* watermark ``P`` answers exactly at
``P``: the warehouse as of ``min(W_t, P)`` (possible while it has not merged past that) and
staging's changes up to ``P`` (:class:`~api.exceptions.WatermarkNotReached` above ``W_s``,
:class:`~api.exceptions.WatermarkUnavailable` once merged past).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa

from api.exceptions import (
    AnswerTooLarge,
    QueryFailed,
    QueryMemoryExceeded,
    QueryTimeout,
    ResultTooLarge,
    TargetUnreachable,
    UnknownTarget,
    WatermarkNotReached,
    WatermarkUnavailable,
)
from api.planner import PlanDecision, PlanModel
from api.safety import CheckedQuery
from api.sandbox import UnionInput, UnionSandbox
from etl_dataflows.dataflow import CompiledDataflow
from migration.migrator import Migrator
from migration.reader import WarehouseReader, WarehouseSnapshot, column_types
from migration.schema import WarehouseLayout
from staging.layout import output_columns, q
from staging.retractions import ranges
from staging.snapshot import StagingSnapshot, open_snapshot
from staging.store import StagingStore
from streamdi.settings import ApiSettings
from warehouse.exceptions import (
    ReaderLoginRefused,
    WarehouseQueryFailed,
    WarehouseQueryOutOfMemory,
    WarehouseQueryTimeout,
    WarehouseQueryTooLarge,
    WarehouseUnavailable,
)

logger = logging.getLogger(__name__)

Plan = Literal["island", "migrate", "auto"]
ExecutedPlan = Literal["island", "migrate", "warehouse", "staging"]
TableKind = Literal["table", "history", "window", "output"]


@dataclass(frozen=True)
class LogicalTable:
    """A table a query may read: a state table (``kind`` table/history/window, unique by
    ``row_id``) or a sink (``output``, append-only). ``columns`` map names to engine types."""

    name: str
    kind: TableKind
    columns: dict[str, str]
    row_id: tuple[str, ...]

    @property
    def is_state(self) -> bool:
        return self.kind != "output"


def logical_tables(flow: CompiledDataflow) -> dict[str, LogicalTable]:
    tables: dict[str, LogicalTable] = {}
    for name, table in flow.tables.items():
        columns = {c: str(t) for c, t in table.image_columns().items()}
        tables[name] = LogicalTable(name, table.kind, columns, tuple(table.row_id()))  # type: ignore[arg-type]
    for sink in flow.sinks:
        columns = {"batch_id": "int64"}
        columns.update({c: str(t or "string") for c, t in output_columns(flow, sink).items()})
        tables[sink] = LogicalTable(sink, "output", columns, ())
    return tables


@dataclass(frozen=True)
class UnionRequest:
    query: CheckedQuery
    plan: Plan = "auto"
    include_staged: bool = True
    target: str | None = None
    watermark: int | None = None


@dataclass
class UnionResult:
    """A query's rows (at most ``max_rows``; ``truncated`` when there were more) and how they were
    read: the executed plan, the answer's ``watermark``, the warehouse's and staging's, the staged
    change rows above the warehouse and the warehouse rows of the tables read (the staged fraction),
    rows pushed by ``migrate``, the auto decision and the time taken."""

    table: pa.Table
    truncated: bool
    plan: ExecutedPlan
    requested_plan: Plan
    target: str | None
    watermark: int
    warehouse_watermark: int
    staged_watermark: int
    staged_rows: int = 0
    warehouse_rows: int | None = None
    pushed_rows: int = 0
    decision: PlanDecision | None = None
    seconds: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)
    facts: dict[str, Any] | None = None

    @property
    def staged_fraction(self) -> float | None:
        if self.warehouse_rows is None:
            return None
        total = self.warehouse_rows + self.staged_rows
        return self.staged_rows / total if total else 0.0


@dataclass
class _Bounds:
    upto: int  # the warehouse is read as of this batch
    staged_upto: int  # staging's changes are read in (upto, staged_upto]
    watermark: int  # the answer's watermark


class UnionPlanner:
    """Runs :class:`UnionRequest` s; see the module docstring. ``readers`` are the warehouses by
    target name (none: staging alone), sharing ``migrator``'s targets."""

    def __init__(
        self,
        store: StagingStore,
        migrator: Migrator | None,
        readers: Mapping[str, WarehouseReader],
        sandbox: UnionSandbox,
        settings: ApiSettings,
        model: PlanModel | None = None,
    ) -> None:
        self.store = store
        self.migrator = migrator
        self.readers = dict(readers)
        self.sandbox = sandbox
        self.settings = settings
        self.model = model or PlanModel(crossover=settings.auto_crossover)
        self.tables = logical_tables(store.flow)
        self._layout = WarehouseLayout(store.flow, history=store.history)
        self._answer_cap = settings.max_answer_mb << 20
        self._union_cap = settings.max_union_mb << 20
        self._sizes: dict[tuple[str, int, int, str], int] = {}
        self._counts: dict[tuple[str, int, int], int] = {}

    # -- targets -----------------------------------------------------------------------------------

    def target(self, name: str | None) -> str | None:
        """The warehouse a query reads: ``name``, ``API__DEFAULT_TARGET`` or the first one, among
        those that are readable: a target being bootstrapped is read only once it caught up
        (:meth:`~migration.migrator.Migrator.ready`). Naming one that is not, or having none
        that is, raises :class:`~api.exceptions.TargetUnreachable` (ask again later)."""
        if name is not None:
            if name not in self.readers:
                raise UnknownTarget(
                    f"target {name!r} is not configured; MIGRATION__TARGETS has "
                    f"{sorted(self.readers)}",
                    target=name,
                )
            if not self._readable(name):
                raise TargetUnreachable(
                    f"warehouse {name} is being bootstrapped and has not caught up yet; ask "
                    "again later, or read another target",
                    target=name,
                    bootstrapping=True,
                )
            return name
        readable = [n for n in self.readers if self._readable(n)]
        default = self.settings.default_target
        if default is not None and default in readable:
            return default
        if readable:
            return readable[0]
        if self.readers:
            raise TargetUnreachable(
                f"every warehouse ({', '.join(self.readers)}) is being bootstrapped and none has "
                "caught up yet; ask again later",
                bootstrapping=True,
            )
        return None

    def _readable(self, name: str) -> bool:
        return self.migrator is None or self.migrator.ready(name)

    # -- running -----------------------------------------------------------------------------------

    def run(self, request: UnionRequest) -> UnionResult:
        started = time.perf_counter()
        target = self.target(request.target)
        if not request.include_staged:
            if target is None:
                raise UnknownTarget(
                    "include_staged=false reads a warehouse, and no MIGRATION__TARGETS is set",
                    code="no_target",
                )
            result = self._warehouse(request, target, started, push=False)
        elif target is None:
            result = self._island(request, None, started)
        elif request.plan == "island":
            result = self._island(request, target, started)
        elif request.plan == "migrate":
            result = self._warehouse(request, target, started, push=True)
        else:
            result = self._auto(request, target, started)
        result.seconds = time.perf_counter() - started
        if (
            result.plan == "island" or result.plan == "migrate"
        ) and result.warehouse_rows is not None:
            self.model.observe(
                result.target or "",
                result.plan,
                result.warehouse_rows,
                result.staged_rows,
                result.seconds,
            )
        return result

    @contextmanager
    def _snapshots(
        self, target: str | None
    ) -> Iterator[tuple[StagingSnapshot, WarehouseSnapshot | None]]:
        # staging first, then the warehouse: see step 2 of the module docstring
        with ExitStack() as stack:
            snap = stack.enter_context(open_snapshot(self.store))
            warehouse = None
            if target is not None:
                reader = self.readers[target]
                with mapped_errors(target):
                    warehouse = stack.enter_context(
                        reader.snapshot(
                            timeout_s=self.settings.query_timeout_s, max_bytes=self._answer_cap
                        )
                    )
            yield snap, warehouse

    def _bounds(
        self, snap: StagingSnapshot, wh: WarehouseSnapshot | None, pin: int | None
    ) -> _Bounds:
        staged = snap.watermark
        if pin is not None and pin > staged:
            raise WatermarkNotReached(
                f"watermark {pin} is not committed yet (staging is at batch {staged})",
                watermark=pin,
                staged_watermark=staged,
            )
        held = wh.watermark if wh is not None else 0
        merged = wh.merged_through if wh is not None else 0
        upto = held if pin is None else min(held, pin)
        if merged > upto:
            raise WatermarkUnavailable(
                f"watermark {pin} can no longer be read: the warehouse merged through batch "
                f"{merged}; ask without a pinned watermark (or at {merged} or later)",
                watermark=pin,
                merged_through=merged,
            )
        top = pin if pin is not None else max(staged, held)
        bounds = _Bounds(upto, min(top, staged), top)
        released = snap.released_through()
        if released > upto and bounds.staged_upto > upto:
            # only without any warehouse: staging released what a former target acknowledged
            raise UnknownTarget(
                f"staging released batches up to {released} into a warehouse; name a target "
                "(MIGRATION__TARGETS) to read them",
                code="no_target",
            )
        return bounds

    def _staged_rows(self, snap: StagingSnapshot, query: CheckedQuery, b: _Bounds) -> int:
        """Staged change rows of the query's tables in ``(upto, staged_upto]``. Committed batches
        never change, so a count is kept per range and table."""
        total = 0
        for name in query.tables:
            key = (name, b.upto, b.staged_upto)
            count = self._counts.get(key)
            if count is None:
                count = snap.change_count(name, after=b.upto, upto=b.staged_upto)
                if len(self._counts) > 4096:
                    self._counts.clear()
                self._counts[key] = count
            total += count
        return total

    def _warehouse_rows(self, wh: WarehouseSnapshot | None, query: CheckedQuery) -> int | None:
        if wh is None:
            return None
        total = 0
        for name in query.tables:
            key = (wh.target, wh.watermark, wh.merged_through, name)
            size = self._sizes.get(key)
            if size is None:
                with mapped_errors(wh.target):
                    size = wh.size(name)
                if len(self._sizes) > 4096:
                    self._sizes.clear()
                self._sizes[key] = size
            total += size
        return total

    def _auto(self, request: UnionRequest, target: str, started: float) -> UnionResult:
        with self._snapshots(target) as (snap, wh):
            bounds = self._bounds(snap, wh, request.watermark)
            staged_rows = self._staged_rows(snap, request.query, bounds)
            warehouse_rows = self._warehouse_rows(wh, request.query) or 0
            decision = self.model.choose(target, warehouse_rows, staged_rows)
            if decision.plan == "island":
                result = self._island_in(request, target, snap, wh, bounds, started, staged_rows)
                result.requested_plan = "auto"
                result.decision = decision
                return result
            if staged_rows == 0 and wh is not None:
                # nothing to push for these tables: the warehouse answers, valid at W as well
                t0 = time.perf_counter()
                table, truncated = self._run_in(wh, request.query, bounds.upto)
                return UnionResult(
                    table=table,
                    truncated=truncated,
                    plan="migrate",
                    requested_plan="auto",
                    target=target,
                    watermark=bounds.watermark,
                    warehouse_watermark=wh.watermark,
                    staged_watermark=snap.watermark,
                    staged_rows=0,
                    warehouse_rows=warehouse_rows,
                    decision=decision,
                    timings={"query_ms": (time.perf_counter() - t0) * 1000},
                    facts=snap.facts(bounds.watermark)
                    if bounds.watermark <= snap.watermark
                    else None,
                )
        result = self._warehouse(request, target, started, push=True)
        result.requested_plan = "auto"
        result.decision = decision
        return result

    def _island(self, request: UnionRequest, target: str | None, started: float) -> UnionResult:
        with self._snapshots(target) as (snap, wh):
            bounds = self._bounds(snap, wh, request.watermark)
            return self._island_in(request, target, snap, wh, bounds, started)

    def _island_in(
        self,
        request: UnionRequest,
        target: str | None,
        snap: StagingSnapshot,
        wh: WarehouseSnapshot | None,
        bounds: _Bounds,
        started: float,
        counted: int | None = None,
    ) -> UnionResult:
        query = request.query
        cap = self.settings.max_union_rows
        budget = self._union_cap  # bytes all tables together may still pull
        inputs: list[UnionInput] = []
        t0 = time.perf_counter()
        for name in query.tables:
            table = self.tables[name]
            columns = self._columns(table, query.columns.get(name))
            types = column_types(self._layout, name)
            wanted = {c: types[c] for c in columns}
            if wh is None:
                rows = pa.schema(list(wanted.items())).empty_table()
            else:
                pending = (
                    []
                    if table.is_state
                    else ranges(snap.retractions(after=bounds.upto, upto=bounds.staged_upto), name)
                )
                relation = wh.relation_sql(name, bounds.upto, columns, pending)
                sql = f"SELECT * FROM ({relation}) AS {q(name)}"
                where = query.filter_sql(wh.dialect)  # type: ignore[arg-type]
                if where is not None:
                    sql += f" WHERE {where}"
                try:
                    with mapped_errors(wh.target):
                        rows = wh.fetch(f"{sql} LIMIT {cap + 1}", wanted, max_bytes=budget)
                except AnswerTooLarge as exc:
                    raise ResultTooLarge(
                        f"an island union would pull more than {self._union_cap:,} bytes from "
                        f"{wh.target} (API__MAX_UNION_MB); narrow the query or use plan=migrate",
                        table=name,
                        limit_bytes=self._union_cap,
                    ) from exc
                budget -= rows.nbytes
                if rows.num_rows > cap:
                    raise ResultTooLarge(
                        f"an island union would pull more than {cap:,} rows of {name!r} from "
                        f"{wh.target}; narrow the query or use plan=migrate",
                        table=name,
                        limit=cap,
                    )
            if table.is_state:
                staged = snap.changes(
                    name, after=bounds.upto, upto=bounds.staged_upto, columns=columns
                )
            else:
                staged = snap.outputs(
                    name, after=bounds.upto, upto=bounds.staged_upto, columns=columns
                )
            kind: Literal["state", "output"] = "state" if table.is_state else "output"
            inputs.append(UnionInput(name, kind, table.row_id, tuple(columns), rows, staged))
        t1 = time.perf_counter()
        limit = self.settings.max_rows
        result = self.sandbox.run(
            inputs,
            query.render("duckdb", limit=limit + 1),
            timeout_s=self.settings.query_timeout_s,
            max_bytes=self._answer_cap,
        )
        t2 = time.perf_counter()
        truncated = result.num_rows > limit
        if counted is None:
            counted = self._staged_rows(snap, query, bounds)
        return UnionResult(
            table=result.slice(0, limit) if truncated else result,
            truncated=truncated,
            plan="island" if wh is not None else "staging",
            requested_plan=request.plan,
            target=target,
            watermark=bounds.watermark,
            warehouse_watermark=wh.watermark if wh is not None else 0,
            staged_watermark=snap.watermark,
            staged_rows=counted,
            warehouse_rows=self._warehouse_rows(wh, query),
            timings={"read_ms": (t1 - t0) * 1000, "union_ms": (t2 - t1) * 1000},
            facts=snap.facts(bounds.watermark) if bounds.watermark <= snap.watermark else None,
        )

    def _columns(self, table: LogicalTable, needed: frozenset[str] | None) -> list[str]:
        if needed is None:
            return list(table.columns)
        chosen = [c for c in table.columns if c in needed or c in table.row_id]
        return chosen or ["batch_id"]

    def _warehouse(
        self, request: UnionRequest, target: str, started: float, *, push: bool
    ) -> UnionResult:
        query = request.query
        pin = request.watermark
        pushed = 0
        timings: dict[str, float] = {}
        with open_snapshot(self.store) as snap:
            staged_watermark = snap.watermark
            if pin is not None and pin > staged_watermark:
                raise WatermarkNotReached(
                    f"watermark {pin} is not committed yet (staging is at batch "
                    f"{staged_watermark})",
                    watermark=pin,
                    staged_watermark=staged_watermark,
                )
            acked = self._acknowledged(target)
            pending = sum(snap.change_count(name, after=acked, upto=pin) for name in query.tables)
        unchanged_upto = staged_watermark if pin is None else pin
        if push and pending:
            assert self.migrator is not None
            t0 = time.perf_counter()
            with mapped_errors(target):
                report = self.migrator.migrate([target], via="push", merge="never")
            failure = report.targets[target].error
            if failure is not None:
                raise TargetUnreachable(f"pushing to {target} failed: {failure}", target=target)
            pushed = report.targets[target].rows
            timings["push_ms"] = (time.perf_counter() - t0) * 1000
        reader = self.readers[target]
        t1 = time.perf_counter()
        with (
            mapped_errors(target),
            reader.snapshot(
                timeout_s=self.settings.query_timeout_s, max_bytes=self._answer_cap
            ) as wh,
        ):
            held, merged = wh.watermark, wh.merged_through
            if pin is not None and pin > held and not (push and not pending):
                raise WatermarkNotReached(
                    f"watermark {pin} is not in warehouse {target} yet (it holds batches up "
                    f"to {held}); include staged data or ask again later",
                    watermark=pin,
                    warehouse_watermark=held,
                )
            upto = held if pin is None else min(held, pin)
            if merged > upto:
                raise WatermarkUnavailable(
                    f"watermark {pin} can no longer be read: {target} merged through batch "
                    f"{merged}",
                    watermark=pin,
                    merged_through=merged,
                )
            table, truncated = self._run_in(wh, query, upto)
            warehouse_rows = self._warehouse_rows(wh, query)
            if push and warehouse_rows is not None:
                # what the warehouse held before the push: the same measure island and auto use
                warehouse_rows = max(0, warehouse_rows - pending)
        timings["query_ms"] = (time.perf_counter() - t1) * 1000
        if pin is not None:
            watermark = pin if push and not pending else upto
        elif push and not pending:
            # nothing staged for these tables above the warehouse: its answer holds at W_s too
            watermark = max(held, unchanged_upto)
        else:
            watermark = upto
        return UnionResult(
            table=table,
            truncated=truncated,
            plan="migrate" if push else "warehouse",
            requested_plan=request.plan,
            target=target,
            watermark=watermark,
            warehouse_watermark=held,
            staged_watermark=staged_watermark,
            staged_rows=pending if push else 0,
            warehouse_rows=warehouse_rows,
            pushed_rows=pushed,
            timings=timings,
        )

    def _run_in(
        self, wh: WarehouseSnapshot, query: CheckedQuery, upto: int
    ) -> tuple[pa.Table, bool]:
        """The query inside the warehouse over its tables as of ``upto``; at most ``max_rows``
        rows, and whether there were more."""
        relations = {name: wh.relation_sql(name, upto) for name in query.tables}
        limit = self.settings.max_rows
        sql = query.render(wh.dialect, limit=limit + 1, relations=relations)  # type: ignore[arg-type]
        with mapped_errors(wh.target):
            table = wh.query(sql)
        truncated = table.num_rows > limit
        return (table.slice(0, limit) if truncated else table), truncated

    def _acknowledged(self, target: str) -> int:
        if self.migrator is None:
            return 0
        return self.migrator.acknowledged().get(target, 0)

    # -- what an answer says about its data --------------------------------------------------------

    def describe(self, result: UnionResult) -> dict[str, Any]:
        """The answer's watermark batch's facts: when it committed, the last collector batch
        applied per stream, and (when it is staging's newest batch) the newest event time."""
        if result.facts is not None:
            return result.facts
        with open_snapshot(self.store) as snap:
            return snap.facts(result.watermark)


@contextmanager
def mapped_errors(target: str) -> Iterator[None]:
    """Warehouse errors as the service's errors."""
    try:
        yield
    except WarehouseUnavailable as exc:
        raise TargetUnreachable(str(exc), target=target) from exc
    except ReaderLoginRefused as exc:
        raise TargetUnreachable(str(exc), target=target) from exc
    except WarehouseQueryTooLarge as exc:
        raise AnswerTooLarge(
            f"the answer from {target} passed {exc.limit_bytes:,} bytes, or one of its rows did "
            "(API__MAX_ANSWER_MB); ask for fewer or narrower rows",
            target=target,
            limit_bytes=exc.limit_bytes,
        ) from exc
    except WarehouseQueryOutOfMemory as exc:
        raise QueryMemoryExceeded(
            f"the query passed {target}'s memory limit: {exc.detail}", target=target
        ) from exc
    except WarehouseQueryTimeout as exc:
        raise QueryTimeout(
            f"the query ran past its limit of {exc.seconds:g} s on {target}", seconds=exc.seconds
        ) from exc
    except WarehouseQueryFailed as exc:
        raise QueryFailed(f"the query failed on {target}: {exc.detail}", target=target) from exc

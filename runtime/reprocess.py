"""Recomputing state tables and sinks from retained input: ``streamdi upgrade reprocess``.

After ``streamdi upgrade apply`` a step whose logic changed keeps its state: batches after the
switch run the new code, rows computed (or delivered) before keep what the old code made of them.
:func:`reprocess` recomputes named state tables and sinks with the dataflow as it is now,
replaying the input from a start (``--from``: the first record, or a checkpoint,
:mod:`runtime.replay_start`) in a *shadow* while the old rows keep serving (in staging, in the
warehouses and through the query service), then cuts over in one batch. The protocol:

1. Check the request (:func:`check_request`): every name is a state table or a sink of the
   dataflow (not a plain sink, whose warehouse rows carry no batch ids). Resolve the start and
   set the shadow up there: its own staging file (:func:`shadow_path`), empty or seeded with the
   checkpoint's state and progress (:func:`~runtime.replay_start.prepare_shadow`; a shadow of
   another start is discarded).
2. Bound the catch-up. When staging can be opened (no pipeline runs on it), its offsets; else the
   offsets the pipeline last committed to Kafka for monitoring, which it writes after staging
   committed them, so they never pass staging's.
3. Catch up: run the dataflow as a shadow pipeline (no collectors, no migration, no checkpoints)
   over the retained input, from where the shadow stands (offset 0, the checkpoint's offsets, or
   where an earlier run left it: it resumes) up to the bound
   (:class:`~runtime.bounded_feed.BoundedFeed`). Records deleted by retention stop it
   (:class:`~runtime.replay_start.ReprocessRefused`): a table cannot be recomputed from part of
   its input. If staging was in use at step 2, the run ends here
   (:attr:`ReprocessReport.cut_over` false): stop the pipeline and run again; the cut-over
   replays only what came since.
4. Check staging (opened, so no pipeline runs): it holds the dataflow's version (else ``upgrade
   apply`` first), a seeded file has its seed's checkpoint to start from, and its offsets belong
   to the broker's log. Catch the shadow up to staging's offsets (step 3 again); it must then have
   read exactly what staging read.
5. Per named table, the difference from staging's rows to the shadow's
   (:func:`staging.difference.table_difference`); per named sink, the shadow's rows, delivered in
   place of the rows of batches ``first..W`` (``first``: the batch after the start) through a
   retraction (:mod:`staging.retractions`, marked with the shadow's id). All of it committed as
   batch ``W + 1``: no events, no offsets moved, each sequence at the larger of the two values;
   staging's meta records ``reprocessed:<W + 1>``. Every reader of staging sees the old or the
   new rows, never half.
6. Push: one migration round; each warehouse loads batch ``W + 1`` in one transaction, like any
   batch, so it too holds the old or the new table. A warehouse not reachable takes it when the
   migration reaches it (staging keeps the batch until every warehouse acknowledged it).
7. Remove the shadow.

A crash before step 5's commit changed nothing (running again resumes the shadow); after it, the
shadow equals staging, or staging holds the shadow's retraction: running again commits nothing,
pushes and removes the shadow. So the cut-over is applied exactly once.

What it does not do: tables that read a reprocessed table keep their rows (name them too); the
rows a sink delivers in place of the old carry the cut-over's batch id, not the batches that first
delivered them; a stream read from several partitions is merged by event time, and where partitions
went idle the merge order can depend on timing, so the shadow may order such events differently
than the live run did. With ``--reoffer`` the streams bound to an input read it again instead of
Kafka (:mod:`runtime.reoffer`), up to the positions staging applied; that needs staging at step 2.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pyarrow as pa

from etl_dataflows.batch import TableDelta
from ingest.assembler import TopicPartition
from ingest.broker import BrokerHandle
from ingest.exceptions import RetentionGap
from ingest.kafka_client import delete_topics, group_offsets
from migration.schema import plain_sinks
from runtime.pipeline import Pipeline, PipelineOptions
from runtime.reoffer import reoffer_spec, reoffered_streams, shadow_topic_prefix
from runtime.replay_start import ReplayStart, ReprocessRefused, prepare_shadow, resolve_start
from runtime.reprocess_report import ReprocessReport
from runtime.runspec import RunSpec
from runtime.upgrade import migrate_once, open_staging
from staging.batch_commit import BatchCommit
from staging.difference import table_difference
from staging.exceptions import StagingInUse
from staging.layout import OUTPUTS, qualified
from staging.retractions import SinkRetraction, cut_over_by
from staging.store import StagingStore
from staging.upgrade import plan_staging
from streamdi.settings import StreamdiSettings

logger = logging.getLogger(__name__)

#: The bound of a shadow topic an input is offered into: read it to its end.
UNBOUNDED = 1 << 62
#: A shadow run ends once every partition reached its bound and nothing happened for this long.
REPLAY_IDLE_S = 0.5
#: Shadow runs in a row that may end short of the bound before the catch-up gives up.
MAX_ROUNDS = 5

#: Called at the protocol's dangerous points (``caught-up``, ``committed``, ``pushed``): kill -9
#: tests.
ReprocessHook = Callable[[str], None]


def shadow_path(settings: StreamdiSettings, flow_name: str) -> Path:
    """Where the shadow of ``flow_name``'s reprocess keeps its staging file."""
    return settings.streamdi.state_dir / "reprocess" / flow_name / "staging.duckdb"


def check_request(spec: RunSpec, tables: Sequence[str]) -> None:
    """Step 1: raise :class:`ReprocessRefused` unless every name is a state table or a sink of
    the dataflow (at least one, none unknown, no plain sink)."""
    flow = spec.flow
    if not tables:
        raise ReprocessRefused("name at least one state table or sink to reprocess")
    plain = plain_sinks(flow.name)
    problems = []
    for name in tables:
        if name in plain:
            problems.append(
                f"{name!r} is a plain sink: its warehouse table keeps no batch ids, so the rows "
                "to replace cannot be told apart"
            )
        elif name not in flow.tables and name not in flow.sinks:
            problems.append(
                f"{name!r} is neither a state table nor a sink of dataflow {flow.name!r} (its "
                f"tables: {sorted(flow.tables)}; its sinks: {sorted(flow.sinks)})"
            )
    if problems:
        raise ReprocessRefused("cannot reprocess: " + "; ".join(problems))


def reprocess(
    spec: RunSpec,
    settings: StreamdiSettings,
    broker: BrokerHandle,
    tables: Sequence[str],
    *,
    start: str = "start",
    reoffer: bool = False,
    hook: ReprocessHook | None = None,
) -> ReprocessReport:
    """Recompute ``tables`` per the module docstring, replaying from ``start``
    (:func:`~runtime.replay_start.resolve_start`); with ``reoffer``, the streams bound to an
    input read it again instead of Kafka (:mod:`runtime.reoffer`)."""
    # 1.
    check_request(spec, tables)
    flow = spec.flow
    reoffered = reoffered_streams(spec) if reoffer else []
    report = ReprocessReport(list(dict.fromkeys(tables)))
    replay = resolve_start(settings.staging_path, start)
    report.start = replay.describe() + (
        f", {', '.join(reoffered)} offered again from the input" if reoffered else ""
    )
    if replay.checkpoint is not None and replay.checkpoint.kafka_log not in (None, broker.log_id):
        raise ReprocessRefused(
            f"{replay.describe()} belongs to another Kafka log ({replay.checkpoint.kafka_log}, "
            f"the broker's is {broker.log_id}): the input after it is not in this broker"
        )
    try:
        plan, _ = plan_staging(settings.staging_path, flow)
        live_in_use = False
    except StagingInUse:
        live_in_use = True
    if live_in_use and reoffer:
        raise ReprocessRefused(
            "--reoffer needs the pipeline stopped: the input is offered again up to the "
            "positions staging applied, which only staging knows"
        )
    shadow = shadow_settings(settings, flow.name)
    shadow_id, new = prepare_shadow(
        shadow.staging_path, flow, replay, "+reoffer" if reoffer else ""
    )
    if new and reoffer:
        delete_topics(settings.kafka, broker.bootstrap_servers, shadow_topic_prefix(flow.name))
    started = time.monotonic()
    # 2.
    if live_in_use:
        reported = group_offsets(settings.kafka, broker.bootstrap_servers, f"streamdi.{flow.name}")
        topics = spec.topics()
        bound = {tp: o for tp, o in reported.items() if tp[0] in topics}
        # 3.
        _catch_up(spec, shadow, broker, bound, report)
        report.catch_up_s = time.monotonic() - started
        return report
    if not plan.empty:
        raise ReprocessRefused(
            f"staging holds another version of dataflow {flow.name!r}; apply it first "
            f"(`streamdi upgrade apply <module:attribute>`), then reprocess:\n{plan.render()}"
        )
    # 4.
    with open_staging(flow, settings) as store:
        _check_staging(store, broker, replay)
        bound = store.offsets()
        shadow_spec, positions = spec, {}
        if reoffer:
            applied = store.streams()
            positions = {s: applied[s].last_pos if s in applied else -1 for s in reoffered}
            shadow_spec = reoffer_spec(spec, positions, shadow_id)
            replaced = {spec.topic(s) for s in reoffered}
            bound = {tp: o for tp, o in bound.items() if tp[0] not in replaced}
            for s in reoffered:
                for p in range(shadow_spec.streams[s].partitions):
                    bound[(shadow_spec.topic(s), p)] = UNBOUNDED
        _catch_up(shadow_spec, shadow, broker, bound, report, positions=positions)
        report.catch_up_s = time.monotonic() - started
        cut_started = time.monotonic()
        if hook is not None:
            hook("caught-up")
        # 5.
        report.cut_over = True
        report.watermark = store.watermark
        first = 1 if replay.checkpoint is None else replay.checkpoint.watermark + 1
        _cut_over(store, shadow.staging_path, report, shadow_id=shadow_id, first_batch=first)
        if hook is not None:
            hook("committed")
    # 6.
    report.targets = migrate_once(flow, settings)
    if hook is not None:
        hook("pushed")
    # 7.
    if reoffer:
        delete_topics(settings.kafka, broker.bootstrap_servers, shadow_topic_prefix(flow.name))
    shutil.rmtree(shadow.staging_path.parent, ignore_errors=True)
    report.cut_over_s = time.monotonic() - cut_started
    return report


def shadow_settings(settings: StreamdiSettings, flow_name: str) -> StreamdiSettings:
    """The run's settings for the shadow: its own staging file and state directory (its
    collectors' checkpoints), no migration."""
    path = shadow_path(settings, flow_name)
    return settings.model_copy(
        update={
            "streamdi": settings.streamdi.model_copy(update={"state_dir": path.parent}),
            "staging": settings.staging.model_copy(update={"path": path}),
            "migration": settings.migration.model_copy(update={"targets": ""}),
        }
    )


def _check_staging(store: StagingStore, broker: BrokerHandle, replay: ReplayStart) -> None:
    """Step 4's checks."""
    if store.seeded and replay.checkpoint is None:
        raise ReprocessRefused(
            f"staging {store.path} was seeded with a starting state (e.g. a historical load) "
            "that is not in Kafka, and the seed's checkpoint is missing (the file was seeded "
            "before streamdi kept one): its tables cannot be recomputed from Kafka's records "
            "alone; --from a later checkpoint can"
        )
    log = store.meta("kafka_log")
    if log is not None and log != broker.log_id:
        raise ReprocessRefused(
            f"staging's offsets belong to another Kafka log ({log}, the broker's is "
            f"{broker.log_id}): the input of its batches is not in this broker"
        )


def _catch_up(
    spec: RunSpec,
    shadow: StreamdiSettings,
    broker: BrokerHandle,
    bound: Mapping[TopicPartition, int],
    report: ReprocessReport,
    *,
    positions: Mapping[str, int] | None = None,
) -> None:
    """Step 3: run the shadow pipeline until it consumed every partition up to ``bound`` (a
    partition bounded :data:`UNBOUNDED` is a shadow topic an input is offered into: read to its
    end) and applied each stream of ``positions`` up to its position."""
    bound = {tp: end for tp, end in bound.items() if end > 0}
    positions = dict(positions or {})
    options = PipelineOptions(
        executor=shadow.engine.executor,
        until_idle_s=REPLAY_IDLE_S,
        collect=bool(positions),
        replay_to=bound,
    )
    for _ in range(MAX_ROUNDS):
        behind = _behind(shadow, spec, bound, positions)
        if not behind:
            return
        logger.info("reprocess catches up shadow=%s behind=%s", shadow.staging_path, behind)
        try:
            done = Pipeline(spec, shadow, broker, options).run()
        except RetentionGap as exc:
            gone = ", ".join(exc.gaps) or str(exc)
            raise ReprocessRefused(
                "the input is no longer all in Kafka (retention deleted "
                f"{gone}), so the tables cannot be recomputed from it. Reprocessing needs every "
                "record after its start; offer the inputs "
                "again (--reoffer) if the run spec binds them, or keep the topics of tables you "
                "may reprocess with a retention that never deletes (retention.ms=-1)"
            ) from exc
        report.shadow_batches += done.batches
        report.shadow_events += done.events
    behind = _behind(shadow, spec, bound, positions)
    if behind:
        raise ReprocessRefused(
            f"the shadow did not reach staging's offsets after {MAX_ROUNDS} runs (behind: "
            f"{behind}); the broker may be failing: run again"
        )


def _behind(
    shadow: StreamdiSettings,
    spec: RunSpec,
    bound: Mapping[TopicPartition, int],
    positions: Mapping[str, int],
) -> dict[str, tuple[int, int]]:
    """What the shadow has not read yet: per partition (``topic[p]``) its offset and the bound,
    per offered stream its last position applied and staging's. Raises
    :class:`ReprocessRefused` when the shadow read past a bound."""
    with StagingStore(shadow.staging_path, spec.flow, background_merge=False) as store:
        offsets, applied = store.offsets(), store.streams()
    limits = {tp: end for tp, end in bound.items() if end != UNBOUNDED}
    past = {tp: (o, limits[tp]) for tp, o in offsets.items() if tp in limits and o > limits[tp]}
    if past:
        raise ReprocessRefused(
            f"the shadow {shadow.staging_path} read past staging's offsets ({past}); remove "
            "it and run again"
        )
    behind = {
        f"{t}[{p}]": (offsets.get((t, p), 0), end)
        for (t, p), end in limits.items()
        if offsets.get((t, p), 0) < end
    }
    for stream, last_pos in positions.items():
        at = applied[stream].last_pos if stream in applied else -1
        if at < last_pos:
            behind[stream] = (at, last_pos)
    return behind


def _cut_over(
    store: StagingStore,
    shadow_file: Path,
    report: ReprocessReport,
    *,
    shadow_id: str,
    first_batch: int,
) -> None:
    """Step 5: the state tables' differences and the sinks' rows of batches ``first_batch`` on,
    replaced, in one batch (none when staging already holds this shadow's cut-over, or nothing
    differs)."""
    flow = store.flow
    sinks = [n for n in report.tables if n in flow.sinks]
    tables = [n for n in report.tables if n in flow.tables]
    done = cut_over_by(store, shadow_id)
    if done is not None:
        report.done_in = int(done)
        return
    watermark = store.watermark
    with StagingStore(shadow_file, flow, background_merge=False) as shadow:
        deltas = {
            name: table_difference(
                store.state_table(name), shadow.state_table(name), flow.tables[name].row_id()
            )
            for name in tables
        }
        outputs = {
            name: shadow.query(
                f"SELECT * EXCLUDE (batch_id) FROM {qualified(OUTPUTS, name)} "
                "ORDER BY batch_id, _pos"
            )
            for name in sinks
        }
        ours, theirs = store.sequences(), shadow.sequences()
    for name, delta in deltas.items():
        report.upserted[name] = delta.upserts.num_rows
        report.deleted[name] = delta.deletes.num_rows
    for name, rows in outputs.items():
        report.upserted[name] = rows.num_rows
        report.retracted[name] = (first_batch, watermark) if watermark >= first_batch else None
    if all(d.empty for d in deltas.values()) and not sinks:
        return
    sequences = {n: max(ours.get(n, v), theirs.get(n, v)) for n, v in {**ours, **theirs}.items()}
    batch_id = watermark + 1
    # one per sink even when it retracts nothing (first > last): it marks the cut-over as done
    retractions = [SinkRetraction(name, first_batch, watermark, shadow_id) for name in sinks]
    store.commit([cut_over_commit(batch_id, deltas, sequences, outputs, retractions)])
    store.set_meta(
        f"reprocessed:{batch_id}",
        json.dumps(
            {"tables": report.tables, "upserted": report.upserted, "deleted": report.deleted}
        ),
    )
    report.batch = batch_id
    logger.info("reprocess cut over batch=%s relations=%s", batch_id, report.tables)


def cut_over_commit(
    batch_id: int,
    deltas: Mapping[str, TableDelta],
    sequences: Mapping[str, int],
    outputs: Mapping[str, pa.Table] | None = None,
    retractions: Sequence[SinkRetraction] = (),
) -> BatchCommit:
    """Step 5's batch: no events; state tables changed by ``deltas``, ``sequences`` set, and
    ``outputs`` delivered in place of the sink rows ``retractions`` name."""
    return BatchCommit.without_events(
        batch_id, deltas=deltas, sequences=sequences, outputs=outputs, retractions=retractions
    )

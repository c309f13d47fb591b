"""The pipeline's own wiring of the loop (:meth:`runtime.pipeline.Pipeline.consuming_loop`), driven
without a broker: the fault hooks fire at the batches they name, in the order of a batch's life;
observers hear of every committed batch (its counts, times and progress); the report and the
consumer lag are kept."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from etl_dataflows.executors import create_executor
from ingest.assembler import BatchAssembler
from ingest.broker import BrokerHandle
from runtime.committer import CommittedBatch, StagingCommitter
from runtime.faults import PipelineFaults
from runtime.pipeline import Pipeline, PipelineOptions
from runtime.runspec import bind
from staging.store import StagingStore
from streamdi.settings import load_settings
from tests.unit.runtime.harness import MemoryFeed, StreamWriter, pair_dataflow


class RecordedFaults(PipelineFaults):
    """Notes every hook call instead of crashing."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int]] = []

    def before_execute(self, batch_id: int) -> None:
        self.calls.append(("execute", batch_id, batch_id))

    def commit_hook(self, first_id: int, last_id: int) -> Callable[[str], None] | None:
        def hook(step: str) -> None:
            if step == "ledger":
                self.calls.append(("ledger", first_id, last_id))

        return hook

    def after_commit(self, first_id: int, last_id: int) -> None:
        self.calls.append(("committed", first_id, last_id))


def test_the_pipeline_wires_faults_observers_report_and_lag(tmp_path: Path) -> None:
    flow = pair_dataflow()
    settings = load_settings(
        streamdi={"state_dir": str(tmp_path)},
        engine={"batch_size": 2, "executor": "serial"},
        ingest={"poll_timeout_ms": 10, "commit_group": 1},
    )
    faults = RecordedFaults()
    pipeline = Pipeline(
        bind(flow),
        settings,
        BrokerHandle("127.0.0.1:1", "memory-log", False),  # never contacted
        PipelineOptions(executor="serial", until_idle_s=0.2, collect=False),
        faults=faults,
    )
    seen: list[CommittedBatch] = []
    pipeline.observers.append(seen.append)
    writer = StreamWriter()
    feed = MemoryFeed(
        [r for k in range(3) for r in writer.records("a", [k]) + writer.records("b", [k])],
        per_poll=1,
    )
    store = StagingStore(tmp_path / "s.duckdb", flow)
    executor = create_executor("serial", flow, store.load_state())
    committer = StagingCommitter(
        store, pipeline.report, group=1, observers=pipeline.observers, faults=faults
    )
    assembler = BatchAssembler(
        flow,
        {"pair.a": ["a"], "pair.b": ["b"]},
        progress={},
        offsets={},
        max_record_bytes=1_000_000,
        allowed_lateness_ms=None,
    )
    loop = pipeline.consuming_loop(
        feed,
        assembler,
        executor,
        committer,
        next_batch=1,
        busy=lambda: not committer.idle(),
        started=0.0,
    )
    stop = threading.Event()
    committer.start(stop)
    loop.run(stop)
    committer.close()
    batches = store.watermark
    assert batches == 3 and pipeline.report.batches == 3 and pipeline.report.events == 6
    assert [s.batch_id for s in seen] == [1, 2, 3] and all(s.events == 2 for s in seen)
    for s in seen:  # what the service's console keeps of each batch
        assert s.records == 2 and s.dead_letters == 0
        assert s.arrived_at <= s.committed_at and 0 < s.commit_s <= s.latency_s
        assert s.steps["write_a"].committed == 1 and s.steps["write_b"].committed == 1
        assert s.decisions == ()  # the serial executor decides nothing
        assert s.streams["a"].events == s.streams["b"].events == s.batch_id
    assert [s.committed_at for s in seen] == sorted(s.committed_at for s in seen)
    for batch_id in (1, 2, 3):  # each batch: executed, then its ledger written, then committed
        order = [
            faults.calls.index((kind, batch_id, batch_id))
            for kind in ("execute", "ledger", "committed")
        ]
        assert order == sorted(order)
    assert set(pipeline.consumer_lag) == {"a", "b"}  # refreshed by the loop's monitor
    executor.close()
    store.close()

"""What the pipeline gives back (memory at scale, issue 22): the freed temporaries of building
the engine go back to the system before the first batch, and a loop that has run lets go of the
engine it ran batches with, so a pipeline kept after its run (a TPC-DI run audits after its
updates) does not keep the engine's state alive."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import runtime.pipeline as pipeline_module
from etl_dataflows.executors import BaseExecutor, create_executor
from etl_dataflows.state import StateImage
from ingest.assembler import AssembledBatch
from runtime.pipeline import start_executor
from staging.store import StagingStore
from tests.unit.runtime.harness import LoopRig, MemoryFeed, StreamWriter, pair_dataflow


def test_the_engine_is_built_warmed_up_then_the_freed_memory_released(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    monkeypatch.setattr(pipeline_module, "release_free_memory", lambda: events.append("release"))

    def create(name: str, flow: Any, state: StateImage) -> BaseExecutor:
        built = create_executor(name, flow, state)
        monkeypatch.setattr(built, "warm_up", lambda: events.append("warm_up"))
        return built

    monkeypatch.setattr(pipeline_module, "create_executor", create)
    flow = pair_dataflow()
    kv = pa.table({"key": [1, 2], "value": [10, 20], "stream": ["a", "b"]})
    with StagingStore(tmp_path / "s.duckdb", flow) as store:
        store.seed(StateImage({"kv": kv}, {}))
        executor = start_executor("serial", flow, store)
        try:
            assert events == ["warm_up", "release"]
            assert executor.state_image().tables["kv"].to_pylist() == kv.to_pylist()
        finally:
            executor.close()


class Engine:
    """Stands for the executor a hand-off holds."""

    def __init__(self, calls: list[int]) -> None:
        self.calls = calls

    def run(self, assembled: AssembledBatch) -> None:
        self.calls.append(assembled.batch.batch_id)


def test_a_released_loop_holds_no_engine_and_runs_no_batch(tmp_path: Path) -> None:
    writer = StreamWriter()
    rig = LoopRig(
        tmp_path / "s.duckdb",
        MemoryFeed(writer.records("a", [1, 2]), per_poll=1),
        batch_size=2,
        until_idle_s=0.2,
    )
    calls: list[int] = []
    engine = Engine(calls)
    rig.loop.hand_off = engine.run
    rig.run()
    assert calls == [1]
    held = weakref.ref(engine)
    rig.loop.release()
    del engine
    gc.collect()
    assert held() is None
    with pytest.raises(RuntimeError, match="released loop"):
        rig.loop.hand_off(rig.loop.assembler.take(2, {}))
    rig.close()

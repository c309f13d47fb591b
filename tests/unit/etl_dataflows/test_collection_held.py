"""An executor loads its state with the cyclic garbage collector held off, and the collector
comes back as it was: on after nested and concurrent loads, off when the caller turned it off,
on after a load that failed."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from etl_dataflows import Dataflow
from etl_dataflows.executors import create_executor
from etl_dataflows.executors.collection import collection_held
from etl_dataflows.executors.serial import SerialExecutor
from etl_dataflows.state import StateImage


@pytest.fixture(autouse=True)
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def flow() -> Dataflow:
    f = Dataflow("t")
    f.table("accounts", key={"id": "int64"}, columns={"balance": "int64"})
    f.source("events", schema={"id": "int64"})
    f.transact("touch", input="events").read("accounts", "id")
    return f


def test_the_load_runs_with_the_collector_off_and_it_is_on_again_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[bool] = []
    load = SerialExecutor._load_state  # noqa: SLF001 - watching the load the constructor runs

    def watched(self: SerialExecutor, image: StateImage) -> None:
        seen.append(gc.isenabled())
        load(self, image)

    monkeypatch.setattr(SerialExecutor, "_load_state", watched)
    create_executor("serial", flow())
    assert seen == [False]
    assert gc.isenabled()


def test_a_failed_load_gives_the_collector_back(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: SerialExecutor, image: StateImage) -> None:
        raise RuntimeError("state unreadable")

    monkeypatch.setattr(SerialExecutor, "_load_state", broken)
    with pytest.raises(RuntimeError, match="state unreadable"):
        create_executor("serial", flow())
    assert gc.isenabled()


def test_a_collector_the_caller_turned_off_stays_off() -> None:
    gc.disable()
    with collection_held():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_nested_and_concurrent_holds_give_it_back_when_the_last_ends() -> None:
    inside = threading.Event()
    release = threading.Event()
    states: list[bool] = []

    def other() -> None:
        with collection_held():
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    with collection_held():
        with collection_held():
            states.append(gc.isenabled())
        states.append(gc.isenabled())  # the outer hold still runs
        thread.start()
        assert inside.wait(10)
    states.append(gc.isenabled())  # the other thread's hold still runs
    release.set()
    thread.join(10)
    states.append(gc.isenabled())
    assert states == [False, False, False, True]

"""The adversarial suite's target: a real ``streamdi serve`` with both warehouses (embedded
PostgreSQL and a DuckDB file), the kv dataflow fed over HTTP, and a few committed and migrated
rows so every plan has data to read. Attacks come from outside, over HTTP, as a client would send
them; a service that cannot start fails the suite, it is never skipped."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.integration.api.conftest import ServedService

#: Keys 0..SEED_ROWS-1 are put by the fixture and pushed into both warehouses.
SEED_ROWS = 200


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedService]:
    """``streamdi serve`` under attack, with both warehouses holding the seed rows."""
    service = ServedService(
        tmp_path_factory.mktemp("security") / "state",
        MIGRATION__TARGETS="duckdb,postgres",
        MIGRATION__PUSH_BATCHES="4",
        MIGRATION__PUSH_MS="300",
        ENGINE__BATCH_TIMEOUT_MS="50",
    )
    try:
        service.wait_ready()
        events = [{"op": "put", "key": k, "value": k * 10, "seq": k} for k in range(SEED_ROWS)]
        service.post("/streams/puts/events", {"events": events})
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            kv = next(t for t in service.get("/tables") if t["name"] == "kv")
            if kv["staged_rows"] == SEED_ROWS:
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the seed rows were not staged within 60 s")
        service.post("/migration/push", {})
        yield service
    finally:
        if service.process.poll() is None:
            service.stop()

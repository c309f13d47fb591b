"""schemathesis against a real ``streamdi serve`` with ``API__TOKEN`` set, bounded for the
default run: every operation without and with bad credentials, every undeclared method, valid
and invalid cases per operation, and the state machine over the OpenAPI links. It fails on any
5xx, on an answer the OpenAPI description does not declare (status, content type, body), on a
keep-alive connection reset, and on an internal error in the service's log.

The full run (20,000 requests and a report per route) is ``python -m benchmarks.fuzz_api``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from benchmarks.fuzz_api import TOKEN, FuzzTarget, fuzz, markdown

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

#: Requests of the bounded run (about a minute on two busy cores).
REQUESTS = 2_000


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzTarget]:
    """``streamdi serve`` with both warehouses, a token, 200 rows and a dead letter."""
    target = FuzzTarget(tmp_path_factory.mktemp("fuzz") / "state")
    try:
        target.start()
        yield target
    finally:
        target.stop()


def test_fuzzing_every_route_finds_no_server_error_and_no_reset(guarded: FuzzTarget) -> None:
    report = fuzz(
        guarded.url, token=TOKEN, requests=REQUESTS, seed=3, max_seconds=400, log=guarded.log
    )
    summary = markdown(report, budget=REQUESTS)
    assert report.ok, summary
    assert report.server_errors == 0 and report.resets == 0, summary
    assert report.requests >= REQUESTS * 0.9, summary
    operations = {op for op in report.by_operation if not op.startswith(("PUT ", "PATCH "))}
    declared = {
        "POST /query",
        "GET /query/{answer_id}",
        "GET /tables",
        "GET /batches",
        "GET /migration",
        "POST /migration/push",
        "POST /migration/pull",
        "GET /deadletters",
        "POST /deadletters/replay",
        "POST /streams/{stream}/events",
        "POST /ingest/pause",
        "POST /ingest/resume",
        "GET /status",
        "GET /health",
        "GET /ready",
        "GET /metrics",
    }
    assert declared <= operations, summary
    # a random answer id is unknown (404): a 200 page means the link from POST /query to
    # GET /query/{answer_id} was followed (the fuzzer follows it once on purpose, and the state
    # machine at random)
    assert report.by_operation["GET /query/{answer_id}"]["200"] > 0, summary
    assert report.by_phase["links"] >= 3, summary  # tables, a one-row page, the next page
    assert report.by_phase["stateful"] > REQUESTS * 0.2, summary
    for operation in declared:
        assert report.by_operation[operation]["401"] > 0, f"{operation} never refused\n{summary}"

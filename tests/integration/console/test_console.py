"""The console in headless Chromium against a real ``streamdi serve`` (see conftest): every
page loads with no console error at 1280x800 and 390 px wide and is keyboard navigable; while
events are pushed the throughput and the watermark rise without a reload; a query returns the
pushed rows, paged; a dead letter is fixed, replayed and then shown as committed; pause stops
the watermark and resume restarts it; without the token nothing but the form is shown and no
data request succeeds."""

from __future__ import annotations

import json
import math
import socket
import threading
import time
from typing import Any

import pytest

from tests.integration.api.conftest import ServedService
from tests.integration.console.conftest import NARROW, TOKEN, ConsoleTab

pytestmark = [pytest.mark.browser, pytest.mark.kafka, pytest.mark.postgres]

#: The pages in the navigation: link text -> heading.
PAGES = {
    "Overview": "Overview",
    "Batches": "Batches",
    "Dataflow": "Dataflow",
    "Tables": "Tables",
    "Dead letters": "Dead letters",
    "Query": "Query",
    "Migration": "Migration",
}


def push(stack: ServedService, events: list[dict[str, Any]]) -> dict[str, Any]:
    receipt = stack.post("/streams/puts/events", {"events": events})
    assert receipt["events"] + receipt["rejects"] == len(events), receipt
    return receipt


def puts(first: int, n: int, key_base: int = 0) -> list[dict[str, Any]]:
    return [
        {"op": "put", "key": key_base + i % 50, "value": first + i, "seq": first + i}
        for i in range(n)
    ]


def staged(stack: ServedService) -> int:
    """Staging's watermark: the last batch committed (staging's own batch ids)."""
    return int(stack.get("/status")["staging"]["watermark"])


def consumed(stack: ServedService) -> int:
    """The last logical batch of ``puts`` staged (a push receipt's batch ids)."""
    return int(stack.get("/status")["streams"]["puts"]["last_batch"])


def test_every_page_loads_without_console_errors(
    tab: ConsoleTab, stack: ServedService, shots: Any
) -> None:
    fresh = staged(stack) == 0  # this module's first test: no event pushed yet
    tab.sign_in()
    hint = tab.page.locator("[data-empty]", has_text="No events yet")
    if fresh:  # the empty state says how to push, with the token's header
        command = hint.locator("code").inner_text()
        assert "/streams/puts/events" in command and "Authorization: Bearer" in command
        shots(tab.page, "wide-overview-empty")
    push(stack, puts(1, 200))
    tab.until(lambda: tab.number("staged-watermark") >= 1, "the overview never showed a batch")
    hint.wait_for(state="detached")
    for link, heading in PAGES.items():
        tab.go(link, heading)
        time.sleep(1.2)  # a poll or two on each page
        shots(tab.page, f"wide-{link.lower().replace(' ', '-')}")
    page = tab.page
    assert page.get_by_role("link", name="Run report").is_hidden()  # no TPC-DI run here
    tab.go("Batches", "Batches")
    newest = page.locator("tbody tr[data-batch]").first
    newest.wait_for()
    assert "apply:" in newest.inner_text()  # the engine's strategy for the step, and why
    tab.go("Dataflow", "Dataflow")
    page.locator('[data-node="step:apply"]').wait_for()
    for node in ("source:puts", "table:kv", "sink:log"):
        assert page.locator(f'[data-node="{node}"]').count() == 1, node
    tab.until(lambda: tab.number("step-apply-events") >= 200, "the step's count stayed short")
    assert tab.value("step-apply-runs") in ("compiled", "interpreted")
    tab.go("Tables", "Tables")
    page.locator('[data-table="kv"]').wait_for()
    assert "rows staged" in page.locator('[data-table="kv"]').inner_text().lower()
    tab.go("Migration", "Migration")
    page.get_by_role("cell", name="postgres", exact=True).wait_for()
    page.get_by_role("button", name="Push now").click()
    outcome = page.locator("p", has_text="push round: staging at batch")
    outcome.wait_for()
    assert {"duckdb", "postgres"} <= set(
        outcome.locator("xpath=..").locator("tbody tr td:first-child").all_inner_texts()
    )
    assert tab.errors == []


def test_narrow_window_and_keyboard(tab: ConsoleTab, shots: Any) -> None:
    tab.page.set_viewport_size(NARROW)
    tab.sign_in()
    page = tab.page
    for link in ("Overview", "Dead letters", "Query", "Batches"):
        tab.go(link, PAGES[link])
        time.sleep(0.6)
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 1, f"{link}: the page is {overflow} px wider than a 390 px window"
        shots(page, f"narrow-{link.lower().replace(' ', '-')}")
        unlabelled = page.evaluate(
            """[...document.querySelectorAll('main input, main select, main textarea')]
                .filter((el) => el.offsetParent !== null && el.labels.length === 0)
                .map((el) => el.outerHTML)"""
        )
        assert unlabelled == [], f"{link}: inputs without a label: {unlabelled}"

    # from the top of a freshly loaded page, Tab reaches every page's link, the focus visible
    page.reload()
    page.get_by_role("heading", level=1, name="Batches").wait_for()
    reached = []
    for _ in range(12):
        page.keyboard.press("Tab")
        focused = page.evaluate(
            """(() => { const el = document.activeElement;
                 return {text: el.textContent.trim(), tag: el.tagName,
                         outline: getComputedStyle(el).outlineStyle}; })()"""
        )
        if focused["tag"] == "BODY":  # past the last focusable element
            break
        assert focused["outline"] != "none", f"no visible focus on {focused}"
        reached.append(focused["text"])
    assert set(PAGES) <= set(reached), reached
    page.get_by_role("link", name="Query", exact=True).focus()
    page.keyboard.press("Enter")
    page.get_by_role("heading", level=1, name="Query").wait_for()
    assert tab.errors == []


def test_throughput_and_watermark_rise_while_events_are_pushed(
    tab: ConsoleTab, stack: ServedService, shots: Any
) -> None:
    tab.sign_in()
    page = tab.page
    page.evaluate("window.notReloaded = true")
    before = tab.number("staged-watermark")
    total = tab.number("events-total")
    receipts: list[dict[str, Any]] = []

    def producer() -> None:
        for round_ in range(15):
            receipts.append(push(stack, puts(10_000 + round_ * 100, 100)))
            time.sleep(0.2)

    pushing = threading.Thread(target=producer)
    pushing.start()
    rates: list[float] = []
    marks: list[float] = []
    while pushing.is_alive():
        rates.append(tab.number("events-per-second"))
        marks.append(tab.number("staged-watermark"))
        time.sleep(0.25)
    pushing.join()
    last = max(r["last_batch"] for r in receipts)
    tab.until(
        lambda: tab.number("last-batch-puts") >= last,
        f"the overview never showed the stream's batch {last} staged",
    )
    assert max(r for r in rates if not math.isnan(r)) > 0, rates
    assert marks[-1] > before and sorted(marks) == marks, marks  # it rose, never went back
    assert len(set(marks)) >= 2, f"the watermark did not move while events arrived: {marks}"
    assert page.evaluate("window.notReloaded") is True
    tab.until(lambda: tab.number("events-total") >= total + 1500, "events since start did not rise")
    # the freshness chart draws the seconds those batches committed in (a line or a dot each)
    tab.until(
        lambda: page.locator("svg.chart .p99").count() > 0, "no freshness p99 drawn", timeout=10
    )
    assert page.locator('[data-field="events-per-second"]').inner_text().endswith("events/s")
    assert page.locator('[data-field="staged-watermark"]').inner_text().startswith("batch ")
    shots(page, "overview-after-pushing")
    assert tab.errors == []


def test_a_query_returns_the_pushed_rows(tab: ConsoleTab, stack: ServedService, shots: Any) -> None:
    events = [{"op": "put", "key": 7000 + i, "value": 70 + i, "seq": 70_000 + i} for i in range(5)]
    receipt = push(stack, events)
    deadline = time.monotonic() + 30
    while consumed(stack) < receipt["last_batch"]:
        assert time.monotonic() < deadline, "the pushed events were never staged"
        time.sleep(0.1)
    tab.sign_in()
    tab.go("Query", "Query")
    page = tab.page
    page.get_by_label("SQL: one SELECT").fill(
        "SELECT key, value FROM kv WHERE key >= 7000 AND key < 7100 ORDER BY key"
    )
    page.get_by_label("Rows per page").fill("2")
    page.get_by_role("button", name="Run query").click()
    page.locator('[data-field="answer-rows"]').wait_for()
    seen = []
    captions = [f"Rows {a}\N{EN DASH}{b} of 5" for a, b in ((1, 2), (3, 4), (5, 5))]
    for expected in captions:
        caption = page.locator("caption", has_text=expected)
        caption.wait_for()
        rows = caption.locator("xpath=..").locator("tbody tr").all()
        seen += [[int(c) for c in r.locator("td").all_inner_texts()] for r in rows]
        if expected != captions[-1]:
            page.get_by_role("button", name="Next page").click()
    assert seen == [[e["key"], e["value"]] for e in events]
    assert tab.number("answer-stream-puts") >= receipt["last_batch"]
    assert tab.number("answer-watermark") >= 1
    assert tab.number("answer-rows") == 5
    summary = page.locator("dl.facts").inner_text()
    assert "Plan decision" in summary and "Freshness" in summary
    page.get_by_role("button", name="Previous page").click()
    page.locator("caption", has_text=captions[1]).wait_for()
    shots(page, "query-answer")

    # the same rows through the structured form: key >= 7000 and key < 7100, newest key first
    page.get_by_label("Structured").check()
    page.get_by_label("Table", exact=True).select_option("kv")
    page.get_by_label("Columns (comma-separated)").fill("key, value")
    conditions = page.locator(".condition")
    conditions.nth(0).get_by_label("Column").fill("key")
    conditions.nth(0).get_by_label("Operator").select_option(">=")
    conditions.nth(0).get_by_label("Value").fill("7000")
    page.get_by_role("button", name="Add a condition").click()
    conditions.nth(1).get_by_label("Column").fill("key")
    conditions.nth(1).get_by_label("Operator").select_option("<")
    conditions.nth(1).get_by_label("Value").fill("7100")
    page.get_by_label("Order by column").fill("key")
    page.get_by_label("descending").check()
    page.get_by_label("Rows per page").fill("10")
    page.get_by_role("button", name="Run query").click()
    caption = page.locator("caption", has_text="Rows 1\N{EN DASH}5 of 5")
    caption.wait_for()
    rows = caption.locator("xpath=..").locator("tbody tr").all()
    got = [[int(c) for c in r.locator("td").all_inner_texts()] for r in rows]
    assert got == [[e["key"], e["value"]] for e in reversed(events)]
    assert tab.errors == []


def test_a_dead_letter_is_fixed_replayed_and_then_committed(
    tab: ConsoleTab, stack: ServedService, shots: Any
) -> None:
    bad = {"op": "put", "key": "not-a-number", "value": 5, "seq": 88_000}
    receipt = push(stack, [bad])
    assert receipt["rejects"] == 1
    deadline = time.monotonic() + 30
    letter: dict[str, Any] | None = None
    while letter is None:
        assert time.monotonic() < deadline, "the bad event never became a dead letter"
        found = [d for d in stack.get("/deadletters") if d["pos"] == receipt["first_pos"]]
        letter = found[0] if found else None
        time.sleep(0.1)

    tab.sign_in()
    tab.go("Dead letters", "Dead letters")
    page = tab.page
    page.get_by_label("Stream").fill("puts")
    page.get_by_label("Reason contains").fill("CANNOT READ")  # case does not matter
    page.get_by_role("button", name="Filter", exact=True).click()
    row = page.locator(f'tr[data-letter="{letter["id"]}"]')
    row.wait_for()
    assert "cannot read" in row.inner_text()
    assert tab.value(f"letter-{letter['id']}-state") == "pending"
    page.get_by_role("button", name=f"Open dead letter {letter['id']}").click()
    editor = page.get_by_label("Event to replay")
    assert json.loads(editor.input_value()) == bad
    editor.fill("{not json")
    page.get_by_role("button", name="Replay the fixed event").click()
    page.get_by_text("Not JSON").wait_for()
    fixed = {**bad, "key": 8800}
    editor.fill(json.dumps(fixed))
    page.get_by_role("button", name="Replay the fixed event").click()
    page.get_by_text("Sent 1 event through Kafka").wait_for()
    tab.until(
        lambda: tab.value("letter-state") == "replayed",
        "the replayed dead letter was never shown as committed",
    )
    state = page.locator('[data-field="letter-state"]').inner_text()
    assert state.startswith("replayed: committed in batch ")
    batch = int(state.rsplit(" ", 1)[1].replace(",", ""))
    assert tab.value(f"letter-{letter['id']}-state") == "replayed"
    shots(page, "dead-letter-replayed")
    answer = stack.post("/query", {"sql": "SELECT value FROM kv WHERE key = 8800"})
    assert answer["rows"] == [[5]] and answer["watermark"] >= batch
    assert tab.errors == []


def test_pause_stops_the_watermark_and_resume_restarts_it(
    tab: ConsoleTab, stack: ServedService, shots: Any
) -> None:
    tab.sign_in()
    page = tab.page
    try:
        page.get_by_role("button", name="Pause ingest").click()
        tab.until(lambda: tab.value("pipeline") == "paused", "the page never showed paused")
        assert stack.get("/status")["pipeline"]["paused"] is True
        time.sleep(1.5)  # the batch in hand commits
        held = tab.number("staged-watermark")
        receipt = push(stack, puts(90_000, 300))
        time.sleep(3)
        assert tab.number("staged-watermark") == held, "the watermark moved while paused"
        assert staged(stack) == held
        assert tab.number("last-batch-puts") < receipt["first_batch"]
        assert page.get_by_role("button", name="Pause ingest").is_disabled()
        shots(page, "overview-paused")
        page.get_by_role("button", name="Resume ingest").click()
        tab.until(lambda: tab.value("pipeline") == "running", "the page never showed running")
        tab.until(
            lambda: tab.number("last-batch-puts") >= receipt["last_batch"],
            f"after resume the stream's batch {receipt['last_batch']} was never staged",
        )
        tab.until(lambda: tab.number("staged-watermark") > held, "the watermark stayed put")
    finally:
        stack.client.post("/ingest/resume")
    assert tab.errors == []


def raw_status(port: int, target: str, token: str | None = None) -> int:
    """The status the server answers for ``GET <target>`` sent exactly as written."""
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    request = f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Connection: close\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request.encode("ascii"))
        head = sock.recv(64)
    return int(head.split(b" ", 2)[1])


def test_the_token_gate_holds(tab: ConsoleTab, stack: ServedService, shots: Any) -> None:
    page = tab.page
    tab.open()
    form = page.get_by_role("button", name="Open the console")
    form.wait_for()
    time.sleep(2)  # the page's polls and probes have their chance
    assert page.locator("[data-field]").count() == 0
    assert page.get_by_role("navigation").is_hidden()
    assert page.get_by_role("button", name="Pause ingest").count() == 0
    data = [(path, status) for path, status in tab.answers if not _public(path)]
    assert data and all(status == 401 for _, status in data), data
    fetched = page.evaluate("fetch('/status').then((r) => r.status)")
    assert fetched == 401
    shots(page, "token-gate")

    page.get_by_label("API token").fill("wrong-token")
    form.click()
    page.get_by_text("The service refused that token").wait_for()
    assert page.locator("[data-field]").count() == 0
    assert page.evaluate("sessionStorage.length") == 0
    data = [(path, status) for path, status in tab.answers if not _public(path)]
    assert all(status == 401 for _, status in data), data

    page.get_by_label("API token").fill(TOKEN)
    form.click()
    page.locator('[data-field="pipeline"]').wait_for()
    assert page.evaluate("Object.values(sessionStorage)") == [TOKEN]

    # a token that stops working (the service restarted with another) brings the form back
    page.evaluate("sessionStorage.setItem('streamdi.console.token', 'revoked')")
    page.get_by_role("link", name="Tables", exact=True).click()
    page.get_by_text("The service refused that token").wait_for()
    assert page.locator("main").inner_text().strip() == ""
    assert page.locator("[data-field]").count() == 0

    # what the server lets through without a token: exactly the page and its assets
    port = int(stack.url.rsplit(":", 1)[1])
    assert raw_status(port, "/") == 200
    assert raw_status(port, "/console/assets/app.js") == 200
    for target in (
        "/status",
        "/console/assets/../status",
        "/console/assets/%2e%2e/status",
        "/console/assets/..%2fstatus",
        "/console/assets%2fapp.js",
        "/console/assets/app.js/../../tables",
        "//status",
        "/console/overview",
        "/openapi.json",
    ):
        assert raw_status(port, target) == 401, target
    assert raw_status(port, "/status", TOKEN) == 200


def _public(path: str) -> bool:
    return path == "/" or path.startswith("/console/assets/")


def test_the_page_modules_compute_what_the_pages_show(tab: ConsoleTab) -> None:
    """The pure parts of the page's modules, run in the browser as the pages run them: units,
    chart bounds, the graph's layers, typed values of the structured form, the push example."""
    tab.sign_in()
    got = tab.page.evaluate(
        """async () => {
          const f = await import('/console/assets/format.js');
          const c = await import('/console/assets/chart.js');
          const g = await import('/console/assets/graph.js');
          const q = await import('/console/assets/pages/structured.js');
          const o = await import('/console/assets/pages/overview.js');
          const nodes = ['source:a', 'step:s1', 'step:s2', 'table:t', 'sink:k']
            .map((id) => ({id, kind: id.split(':')[0], name: id.split(':')[1]}));
          const edges = [['source:a', 'step:s1'], ['step:s1', 'table:t'], ['table:t', 'step:s2'],
                         ['step:s1', 'step:s2'], ['step:s2', 'sink:k']]
            .map(([from, to]) => ({from, to, kind: 'input'}));
          return {
            rate: [f.rate(12345.6), f.rate(0.25), f.rate(0)],
            ms: [f.ms(0.4213), f.ms(12.34), f.ms(1234.5)],
            seconds: [f.seconds(0.0481), f.seconds(1.256), f.seconds(312.4)],
            counts: [f.rows(1), f.rows(2000), f.batches(1), f.events(0), f.batch(17), f.rows(null)],
            ceilings: [c.niceCeiling(0.25), c.niceCeiling(3), c.niceCeiling(1234), c.niceCeiling(0)],
            windows: [c.windowFor([{t: 990, events: 5}], 1000, ['events']),
                      c.windowFor([{t: 800, events: 0}, {t: 850, events: 1}], 1000, ['events']),
                      c.windowFor([{t: 600, events: 1}], 1000, ['events'])],
            layers: Object.fromEntries(g.layers(nodes, edges)),
            typed: [q.typed('42'), q.typed('true'), q.typed('"7"'), q.typed('abc'), q.typed(' 1.5 ')],
            example: o.exampleEvent({op: 'string', key: 'int64', ok: 'bool'}),
            placeholder: o.exampleEvent(null),
          };
        }"""
    )
    assert got["rate"] == ["12,346 events/s", "0.3 events/s", "0 events/s"]
    assert got["ms"] == ["0.42 ms", "12.3 ms", "1,235 ms"]
    assert got["seconds"] == ["0.048 s", "1.26 s", "312 s"]
    assert got["counts"] == ["1 row", "2,000 rows", "1 batch", "0 events", "batch 17", "—"]
    assert got["ceilings"] == [0.4, 4, 2000, 1]
    assert got["windows"] == [60, 180, 300]
    assert got["layers"] == {"source:a": 0, "step:s1": 1, "table:t": 2, "step:s2": 3, "sink:k": 4}
    assert got["typed"] == [42, True, "7", "abc", 1.5]
    assert got["example"] == {"op": "text", "key": 1, "ok": True}
    assert got["placeholder"] == {"column": "value"}
    assert tab.errors == []

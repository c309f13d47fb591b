"""Hand-made hostile HTTP against a real ``streamdi serve`` (and, for the one case no request can
cause, a real uvicorn server over a broken service): oversized, chunked, slow and abandoned
bodies; many connections at once; JSON that is not UTF-8, nested thousands deep, with duplicate
keys or huge numbers; unknown parameters, bodies where none belong, odd path parameters; header
injection; credentials. Every answer is a 4xx with a stable code (or the route's normal answer),
never a 5xx, and the service keeps serving. Requests that must reach the server byte for byte
(no client would send them) go over raw sockets."""

from __future__ import annotations

import http.client
import json
import select
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.api.conftest import ServedService
from tests.unit.api.harness import ShopStage, shop_service, shop_settings

pytestmark = [pytest.mark.kafka]

TOKEN = "attack-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
LIMIT = 1 << 20  # API__MAX_BODY_MB=1
BODY_TIMEOUT_S = 2.0
HEADER_TIMEOUT_S = 1.5

#: Routes whose JSON body this service parses itself (the push route reads its own).
JSON_ROUTES = ("/query", "/deadletters/replay", "/migration/push", "/migration/pull")


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedService]:
    """``streamdi serve`` (a DuckDB warehouse) with a token, a 1 MiB body limit, a 2 s body
    timeout and a 1.5 s header timeout, holding a few rows."""
    service = ServedService(
        tmp_path_factory.mktemp("attacks") / "state",
        MIGRATION__TARGETS="duckdb",
        ENGINE__BATCH_TIMEOUT_MS="50",
        API__TOKEN=TOKEN,
        API__MAX_BODY_MB="1",
        API__BODY_TIMEOUT_S=str(BODY_TIMEOUT_S),
        API__HEADER_TIMEOUT_S=str(HEADER_TIMEOUT_S),
    )
    service.client.headers.update(AUTH)
    try:
        service.wait_ready()
        service.post(
            "/streams/puts/events",
            {"events": [{"op": "put", "key": k, "value": k, "seq": k} for k in range(20)]},
        )
        yield service
    finally:
        if service.process.poll() is None:
            service.stop()
        log = service.log.read_text()
        assert "Exception in ASGI application" not in log, log
        assert "request failed error_id" not in log, log


# -- raw HTTP ----------------------------------------------------------------------------------------


def connect(served: ServedService) -> socket.socket:
    return socket.create_connection(("127.0.0.1", served.port), timeout=30)


def read_answer(sock: socket.socket, timeout: float = 30) -> tuple[int, dict[str, str], bytes]:
    """One HTTP answer from ``sock``: status, headers (lower-case names), body."""
    sock.settimeout(timeout)
    answer = http.client.HTTPResponse(sock)
    answer.begin()
    body = answer.read()
    return answer.status, {k.lower(): v for k, v in answer.getheaders()}, body


def head(method: str, path: str, *lines: str) -> bytes:
    headers = "".join(f"{line}\r\n" for line in lines)
    return f"{method} {path} HTTP/1.1\r\nHost: x\r\n{headers}\r\n".encode()


def code_of(body: bytes) -> str:
    error = json.loads(body)["error"]
    assert error["reason"]
    code: str = error["code"]
    return code


def closed_by_peer(sock: socket.socket, wait_s: float = 5) -> bool:
    sock.settimeout(wait_s)
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def still_serving(served: ServedService) -> None:
    response = served.client.get("/health")
    assert response.status_code == 200, response.text


# -- a bug's 500 -------------------------------------------------------------------------------------


class ThreadedServer:
    """uvicorn serving an app in a thread, on a free loopback port."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.05)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(30)


def test_a_server_error_keeps_the_keep_alive_connection(tmp_path: Path) -> None:
    """A genuine bug answers a JSON 500 and the next request on the same connection is served.
    No request to a healthy service answers 500 (that is the point of the rest of this suite),
    so the service here is broken from inside: its staging store is closed under it."""
    from api.app import create_app

    stage = ShopStage(tmp_path / "staging.duckdb")
    stage.stage_range(1, 2)
    settings = shop_settings(tmp_path)
    service, migrator = shop_service(stage, settings)
    try:
        with (
            ThreadedServer(create_app(service, settings)) as url,
            httpx.Client(base_url=url, limits=httpx.Limits(max_connections=1)) as client,
        ):

            def local_address(response: httpx.Response) -> Any:
                return response.extensions["network_stream"].get_extra_info("client_addr")

            first = client.get("/health")
            assert first.status_code == 200
            stage.store.close()
            for _ in range(3):
                failed = client.get("/tables")
                assert failed.status_code == 500
                assert failed.json()["error"]["code"] == "internal_error"
                assert "connection" not in failed.headers
                after = client.get("/health")
                assert after.status_code == 200
                assert local_address(failed) == local_address(after) == local_address(first)
    finally:
        service.close()
        migrator.close()


# -- bodies ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/query", "/streams/puts/events", "/deadletters/replay"])
def test_a_declared_oversized_body_is_refused_before_it_is_sent(
    limited: ServedService, path: str
) -> None:
    with connect(limited) as sock:
        sock.sendall(
            head(
                "POST",
                path,
                f"Authorization: Bearer {TOKEN}",
                "Content-Type: application/json",
                f"Content-Length: {50 * LIMIT}",
                "Expect: 100-continue",
            )
        )
        status, headers, body = read_answer(sock, timeout=10)  # no byte of the body was sent
        assert (status, code_of(body)) == (413, "body_too_large")
        assert headers["connection"] == "close"
        assert closed_by_peer(sock)
    still_serving(limited)


@pytest.mark.parametrize("path", ["/query", "/streams/puts/events"])
def test_a_chunked_body_is_refused_as_soon_as_it_passes_the_limit(
    limited: ServedService, path: str
) -> None:
    chunk = b"[" + b"0," * 32_000 + b"0]"
    planned = 32 * LIMIT
    sent = 0
    with connect(limited) as sock:
        sock.sendall(
            head(
                "POST",
                path,
                f"Authorization: Bearer {TOKEN}",
                "Content-Type: application/json",
                "Transfer-Encoding: chunked",
            )
        )
        try:
            while sent < planned:
                if select.select([sock], [], [], 0)[0]:
                    break  # the server answered before the body ended
                sock.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # it closed after answering; the answer is still in our receive buffer
        status, headers, body = read_answer(sock)
    assert (status, code_of(body)) == (413, "body_too_large")
    assert headers["connection"] == "close"
    # refused while reading: the rest was never taken (kernel buffers hold a few MiB at most)
    assert sent < 8 * LIMIT, sent
    still_serving(limited)


@pytest.mark.parametrize("path", ["/query", "/streams/puts/events"])
def test_a_stalled_or_dripping_body_is_408(limited: ServedService, path: str) -> None:
    for drip in (False, True):
        with connect(limited) as sock:
            sock.sendall(
                head(
                    "POST",
                    path,
                    f"Authorization: Bearer {TOKEN}",
                    "Content-Type: application/json",
                    "Content-Length: 1000",
                )
                + b'{"sql": '
            )
            started = time.monotonic()
            if drip:  # a byte every 0.3 s never completes within the timeout
                while not select.select([sock], [], [], 0.3)[0]:
                    sock.sendall(b" ")
                    assert time.monotonic() - started < 30
            status, headers, body = read_answer(sock)
            waited = time.monotonic() - started
            assert (status, code_of(body)) == (408, "body_timeout")
            assert headers["connection"] == "close"
            assert BODY_TIMEOUT_S * 0.8 < waited < BODY_TIMEOUT_S + 10, waited
    still_serving(limited)


def test_an_abandoned_body_costs_nothing(limited: ServedService) -> None:
    for path in ("/query", "/streams/puts/events", "/deadletters/replay"):
        with connect(limited) as sock:
            sock.sendall(
                head(
                    "POST",
                    path,
                    f"Authorization: Bearer {TOKEN}",
                    "Content-Type: application/json",
                    "Content-Length: 100000",
                )
                + b'{"events": [{"op": "put", '
            )
            time.sleep(0.2)
    time.sleep(0.5)
    still_serving(limited)
    assert "request failed" not in limited.log.read_text()


def test_a_connection_without_a_timely_request_head_is_closed(limited: ServedService) -> None:
    """Idle, half a head, a head dripping a byte at a time: each connection is closed once
    API__HEADER_TIMEOUT_S passes, while a client that asks promptly keeps its connection."""
    idle = connect(limited)
    partial = connect(limited)
    partial.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
    drip = connect(limited)
    drip.sendall(b"GET /health HTTP/1.1\r\nX-Slow: ")
    started = time.monotonic()
    closed: dict[str, float] = {}
    try:
        while len(closed) < 3 and time.monotonic() - started < 20:
            for name, sock in (("idle", idle), ("partial", partial), ("drip", drip)):
                if name not in closed and select.select([sock], [], [], 0)[0]:
                    assert closed_by_peer(sock, 1), name
                    closed[name] = time.monotonic() - started
            if "drip" not in closed:
                try:
                    drip.sendall(b"a")
                except OSError:
                    closed["drip"] = time.monotonic() - started
            time.sleep(0.2)
    finally:
        for sock in (idle, partial, drip):
            sock.close()
    assert set(closed) == {"idle", "partial", "drip"}, closed
    assert all(HEADER_TIMEOUT_S * 0.8 < t < HEADER_TIMEOUT_S + 5 for t in closed.values()), closed
    with connect(limited) as sock:  # prompt requests, each after a pause shorter than the limit
        for _ in range(4):
            sock.sendall(head("GET", "/health", f"Authorization: Bearer {TOKEN}"))
            assert read_answer(sock)[0] == 200
            time.sleep(HEADER_TIMEOUT_S * 0.6)
        # two pipelined requests in one write: both answered
        sock.sendall(head("GET", "/health", f"Authorization: Bearer {TOKEN}") * 2)
        sock.settimeout(10)
        answers = b""
        while answers.count(b"HTTP/1.1 200") < 2:
            chunk = sock.recv(65536)
            assert chunk, answers
            answers += chunk


def test_many_connections_at_once(limited: ServedService) -> None:
    """300 idle connections and 48 clients querying at once: every answer is a 200, and a new
    client is served promptly meanwhile."""
    idle = [connect(limited) for _ in range(300)]
    statuses: list[int] = []
    lock = threading.Lock()

    def client(n: int) -> None:
        with httpx.Client(base_url=limited.url, headers=AUTH, timeout=120) as http:
            for _ in range(3):
                got = [
                    http.get("/tables").status_code,
                    http.post("/query", json={"sql": f"SELECT {n} AS n, * FROM kv"}).status_code,
                ]
                with lock:
                    statuses.extend(got)

    try:
        threads = [threading.Thread(target=client, args=(n,)) for n in range(48)]
        for thread in threads:
            thread.start()
        started = time.monotonic()
        still_serving(limited)
        assert time.monotonic() - started < 30
        for thread in threads:
            thread.join(300)
    finally:
        for sock in idle:
            sock.close()
    assert statuses == [200] * (48 * 3 * 2), sorted(set(statuses))


# -- JSON --------------------------------------------------------------------------------------------

MALFORMED: list[tuple[str, bytes]] = [
    ("not UTF-8", b'{"sql": "\xff\xfe\xfd", "ids": [1]}'),
    ("UTF-16", '{"sql": "SELECT 1"}'.encode("utf-16")),
    ("nesting bomb", b"[" * 100_000 + b"]" * 100_000),
    ("object bomb", b'{"a":' * 50_000 + b"1" + b"}" * 50_000),
    ("duplicate keys", b'{"targets": ["duckdb"], "targets": ["nope"], "ids": [1], "ids": [2]}'),
    ("2^70", b'{"watermark": 1180591620717411303424, "ids": [1180591620717411303424]}'),
    ("5000 digits", b'{"ids": [' + b"9" * 5000 + b"]}"),
    ("1e400", b'{"page_size": 1e400, "ids": [1e400]}'),
    ("NaN", b'{"page_size": NaN, "ids": [NaN]}'),
    ("NUL", b'{"sql": "SELECT \\u0000", "targets": ["\\u0000"], "ids": [0]}'),
    ("lone surrogate", b'{"sql": "\\udc00", "targets": ["\\udc00"]}'),
    ("array", b"[]"),
    ("string", b'"SELECT 1"'),
    ("null", b"null"),
    ("number", b"-1"),
    ("truncated", b'{"sql": "SELECT'),
    ("garbage", b"\x00\x01\x02"),
    ("wrong types", b'{"sql": 1, "ids": "1", "targets": "duckdb", "merge": true}'),
    ("unknown keys", b'{"sql": "SELECT 1 FROM kv", "ids": [1], "merge": "auto", "evil": 1}'),
]


@pytest.mark.parametrize(("name", "body"), MALFORMED, ids=[name for name, _ in MALFORMED])
def test_malformed_json_is_a_4xx_on_every_route(
    limited: ServedService, name: str, body: bytes
) -> None:
    for path in (*JSON_ROUTES, "/streams/puts/events"):
        if name == "null" and path.startswith("/migration/"):
            continue  # its body is optional: null is no body, a migration round with defaults
        response = limited.client.post(
            path, content=body, headers={"Content-Type": "application/json"}
        )
        assert 400 <= response.status_code < 500, (path, response.status_code, response.text)
        error = response.json()["error"]
        assert error["reason"], (path, response.text)
        if path in JSON_ROUTES:
            assert error["code"] == "invalid_request", (path, response.text)
    still_serving(limited)


def test_unknown_parameters_and_stray_bodies_change_nothing(limited: ServedService) -> None:
    plain = limited.client.get("/batches", params={"after": 0, "limit": 2})
    odd = limited.client.get(
        "/batches", params={"after": 0, "limit": 2, "bogus": "1", "sql": "DROP TABLE kv"}
    )
    assert plain.status_code == odd.status_code == 200 and plain.json() == odd.json()
    with_body = limited.client.request(
        "GET", "/batches", params={"after": 0, "limit": 2}, json={"after": 99, "sql": "DROP"}
    )
    assert with_body.status_code == 200 and with_body.json() == plain.json()
    tables = limited.client.request("GET", "/tables", content=b"\xff" * 1000)
    assert tables.status_code == 200


@pytest.mark.parametrize(
    ("path", "status", "code"),
    [
        ("/query/%00", 404, "answer_not_found"),
        ("/query/..%2F..%2Fetc%2Fpasswd", 404, "not_found"),
        ("/query/" + "a" * 129, 422, "invalid_request"),
        ("/query/%ED%B3%80", 404, "answer_not_found"),
        ("/query/%F0%9F%92%A5", 404, "answer_not_found"),
        ("/batches?after=-1", 422, "invalid_request"),
        ("/batches?after=99999999999999999999999", 422, "invalid_request"),
        ("/batches?limit=0", 422, "invalid_request"),
        ("/batches?limit=1e3", 422, "invalid_request"),
        ("/deadletters?after_id=%00", 422, "invalid_request"),
        ("/deadletters?stream=" + "s" * 257, 422, "invalid_request"),
        ("/deadletters?pending=maybe", 422, "invalid_request"),
        ("/query/x?offset=-5", 422, "invalid_request"),
        ("/query/x?limit=0", 422, "invalid_request"),
    ],
)
def test_odd_parameters_are_4xx(limited: ServedService, path: str, status: int, code: str) -> None:
    response = limited.client.get(path)
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code


def test_odd_stream_names_are_404(limited: ServedService) -> None:
    for stream in ("%00", "%0d%0a", "..", "puts%2F..", "%F0%9F%92%A5", "x" * 2000):
        response = limited.client.post(f"/streams/{stream}/events", json={"events": [{}]})
        assert response.status_code in (404, 422), response.text
        assert response.json()["error"]["code"] in ("unknown_stream", "not_found")


# -- headers -----------------------------------------------------------------------------------------


def test_header_injection_goes_nowhere(limited: ServedService) -> None:
    injected = "/streams/x%0D%0ASet-Cookie:%20a=b%0D%0AX-Injected:%201/events"
    response = limited.client.post(injected, json={"events": [{}]})
    assert response.status_code == 404
    assert "set-cookie" not in response.headers and "x-injected" not in response.headers
    echoed = limited.client.get(
        "/nowhere", headers={"X-Forwarded-Host": "evil.example", "Referer": "http://evil.example/"}
    )
    assert echoed.status_code == 404 and "location" not in echoed.headers
    assert all("evil" not in value for value in echoed.headers.values())
    for raw in (
        head("GET", "/health", f"Authorization: Bearer {TOKEN}", "X-A: a\rSet-Cookie: b=c"),
        head("GET", "/health", f"Authorization: Bearer {TOKEN}", "X-A: a\x00b"),
        head("GET", "/health", f"Authorization: Bearer {TOKEN}\r\n Bearer other"),
        head("GET", "/he alth", f"Authorization: Bearer {TOKEN}"),
        b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
    ):
        with connect(limited) as sock:
            sock.sendall(raw)
            status, headers, _ = read_answer(sock)
        assert status in (400, 401), (raw, status)
        assert "set-cookie" not in headers
    still_serving(limited)


def test_credentials_are_checked_before_anything_else(limited: ServedService) -> None:
    for path in ("/docs", "/openapi.json", "/nowhere", "/query/abc"):
        response = httpx.get(limited.url + path)
        assert response.status_code == 401 and response.json()["error"]["code"] == "unauthorized"
    two = [("Authorization", f"Bearer {TOKEN}"), ("Authorization", f"Bearer {TOKEN}")]
    refused = httpx.get(limited.url + "/health", headers=two)
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "ambiguous_credentials"
    # a refused request with a body closes its connection: the unread body is not drained
    with connect(limited) as sock:
        sock.sendall(head("POST", "/query", "Content-Length: 1000000000") + b"{")
        status, headers, body = read_answer(sock)
        assert (status, code_of(body), headers["connection"]) == (401, "unauthorized", "close")
        assert closed_by_peer(sock)


def test_it_listens_on_loopback_only(limited: ServedService) -> None:
    listening = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        address, port = fields[1].split(":")
        if fields[3] == "0A" and int(port, 16) == limited.port:
            listening.append(address)
    assert listening == ["0100007F"], listening  # 127.0.0.1 unless API__HOST says otherwise


# -- requests that once stopped the service ----------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body"),
    [
        pytest.param(
            "/streams/puts/events",
            {"events": [{"op": [1], "key": 1, "value": 1, "seq": 1}]},
            id="push-nested-value",
        ),
        pytest.param(
            "/deadletters/replay",
            {"entries": [{"stream": "puts", "event": {"op": "put", "key": "x", "value": 1}}]},
            id="replay-to-stream",
        ),
    ],
)
def test_one_bad_event_does_not_stop_the_service(
    tmp_path: Path, path: str, body: dict[str, Any]
) -> None:
    service = ServedService(
        tmp_path / "state", MIGRATION__TARGETS="duckdb", ENGINE__BATCH_TIMEOUT_MS="50"
    )
    try:
        service.wait_ready()
        service.post("/streams/puts/events", {"events": [{"op": "put", "key": 1, "value": 1}]})
        response = service.client.post(path, json=body)
        assert response.status_code < 500, response.text
        deadline = time.monotonic() + 5  # the pipeline consumes the event meanwhile
        while time.monotonic() < deadline:
            assert service.process.poll() is None, service.log.read_text()
            still_serving(service)
            time.sleep(0.2)
    finally:
        if service.process.poll() is None:
            service.stop()

"""``streamdi status``, ``streamdi pause`` and ``streamdi resume``: operate a running service.

They talk to ``streamdi serve`` over HTTP (``--url``, default ``http://API__HOST:API__PORT``,
with ``API__TOKEN`` as the bearer token). ``status`` falls back to the state directory when no
service answers: it reads the staging file (``STAGING__PATH``) read-only and says the service is
not running.

Exit codes: 0 ok; 1 the service answered but reports a failed pipeline, or refused the request;
2 bad usage or configuration; 3 no service answers (and, for ``status``, no staging file either).
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from typing import Any

from cli.commands import EXIT_FAILED, EXIT_OK, EXIT_UNAVAILABLE, Commands, write_json
from streamdi.settings import StreamdiSettings


class _Unreachable(Exception):
    """No service answered at the URL."""


def service_url(settings: StreamdiSettings, url: str | None) -> str:
    """``url``, or the address ``streamdi serve`` binds with these settings (a wildcard bind
    address is reached through the loopback)."""
    if url:
        return url.rstrip("/")
    host = settings.api.host
    if host in ("0.0.0.0", "", "::"):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{settings.api.port}"


def _call(
    settings: StreamdiSettings, base: str, method: str, path: str, timeout_s: float
) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(f"{base}{path}", method=method)
    if settings.api.token is not None:
        request.add_header("Authorization", f"Bearer {settings.api.token.get_secret_value()}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            status: int = response.status
            body = response.read()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read()
    except (urllib.error.URLError, OSError) as exc:
        raise _Unreachable(f"no streamdi service at {base}: {getattr(exc, 'reason', exc)}") from exc
    try:
        data: dict[str, Any] = json.loads(body or b"{}")
    except ValueError:
        data = {"error": {"code": "not_json", "reason": body[:200].decode(errors="replace")}}
    return status, data


def _print_status(data: dict[str, Any], source: str) -> None:
    print(f"source      {source}")
    if "pipeline" in data:
        pipe = data["pipeline"]
        paused = "  (ingest paused)" if pipe.get("paused") else ""
        print(f"pipeline    {pipe['state']}{paused}")
        if pipe.get("error"):
            print(f"error       {pipe['error']}")
        svc = data["service"]
        print(f"service     streamdi {svc['version']} pid {svc['pid']} up {svc['uptime_s']:.0f} s")
        staging = data["staging"]
        print(
            f"staging     watermark {staging['watermark']}  released {staging['released_through']}"
            f"  {staging['bytes'] / 2**20:,.1f} MiB  newest batch "
            f"{staging['newest_batch_age_s']:.1f} s old"
        )
        print(f"engine      {data['engine']['events_per_second']:,.0f} events/s of engine time")
    else:
        print("pipeline    not running (no service answers)")
        print(
            f"staging     {data['path']}: dataflow {data['dataflow']}  watermark "
            f"{data['watermark']}  released {data['released_through']}  {data['batches']:,} "
            f"batches  {data['events']:,} events  {data['dead_letters']:,} dead letters  "
            f"{data['bytes'] / 2**20:,.1f} MiB"
        )
    for stream, info in sorted(data.get("streams", {}).items()):
        lag = info.get("lag_records")
        lag_text = "" if lag is None else f"  lag {lag:,} records"
        print(f"stream      {stream}: last batch {info['last_batch']}{lag_text}")
    for target, info in sorted(data.get("migration", {}).items()):
        seconds = info.get("lag_seconds")
        age = "" if seconds is None else f" ({seconds:.1f} s)"
        print(
            f"target      {target}: acknowledged {info['acknowledged']}  behind "
            f"{info['lag_batches']} batches{age}"
        )


def _status(args: argparse.Namespace, settings: StreamdiSettings) -> int:
    from staging.summary import staging_summary

    base = service_url(settings, args.url)
    try:
        code, data = _call(settings, base, "GET", "/status", args.timeout)
    except _Unreachable as exc:
        summary = staging_summary(settings.staging_path)
        if summary is None:
            print(
                f"streamdi status: {exc}; no staging file at {settings.staging_path}",
                file=sys.stderr,
            )
            return EXIT_UNAVAILABLE
        if args.json:
            write_json({"running": False, "url": base, "staging": summary}, "-")
        else:
            _print_status(summary, f"{settings.staging_path} (no service at {base})")
        return EXIT_OK
    if code != 200:
        print(f"streamdi status: {base} answered {code}: {data.get('error')}", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        write_json({"running": True, "url": base, **data}, "-")
    else:
        _print_status(data, base)
    return EXIT_FAILED if data["pipeline"]["state"] == "failed" else EXIT_OK


def _control(action: str) -> Any:
    def handler(args: argparse.Namespace, settings: StreamdiSettings) -> int:
        base = service_url(settings, args.url)
        try:
            code, data = _call(settings, base, "POST", f"/ingest/{action}", args.timeout)
        except _Unreachable as exc:
            print(f"streamdi {action}: {exc}", file=sys.stderr)
            return EXIT_UNAVAILABLE
        if code != 200:
            print(
                f"streamdi {action}: {base} answered {code}: {data.get('error')}", file=sys.stderr
            )
            return EXIT_FAILED
        if args.json:
            write_json(data, "-")
        else:
            state = "paused" if data["pipeline"]["paused"] else "consuming"
            print(f"streamdi {action}: ingest {state} at {base}")
        return EXIT_OK

    return handler


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url", help="the service (default: http://API__HOST:API__PORT, loopback for 0.0.0.0)"
    )
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds (default 10)")
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")


def register(commands: Commands) -> None:
    status = commands.add_parser(
        "status",
        help="summary of a running service, or of the state directory when none runs",
        description="Ask streamdi serve for GET /status (pipeline, ingest paused or not, staging "
        "watermark and size, consumer lag per stream, migration lag per target). When no service "
        "answers, summarize the staging file under STREAMDI__STATE_DIR instead. Exit 0 ok, 1 the "
        "pipeline failed, 3 nothing to report.",
    )
    _common(status)
    status.set_defaults(handler=_status)
    for action, text in (
        ("pause", "stop the running service consuming from Kafka (events keep arriving)"),
        ("resume", "make the running service consume again"),
    ):
        parser = commands.add_parser(action, help=text, description=text + ". Exit 3: no service.")
        _common(parser)
        parser.set_defaults(handler=_control(action))

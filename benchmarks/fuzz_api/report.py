"""What a fuzz run sent and found, and its JSON and Markdown reports."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.fuzz_api.known import KNOWN_CRASHES


@dataclass
class Failure:
    """One check that failed, with what reproduces it."""

    phase: str
    operation: str
    check: str
    status: int | None
    message: str
    reproduce: str


@dataclass
class FuzzReport:
    """What a run sent and found. ``by_operation[op][status]`` counts answers; ``failures`` keeps
    the first :data:`KEEP_FAILURES` of each (operation, check, status); ``resets`` counts
    requests that found their keep-alive connection reset."""

    requests: int = 0
    seconds: float = 0.0
    by_operation: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    by_phase: Counter[str] = field(default_factory=Counter)
    failures: list[Failure] = field(default_factory=list)
    failure_counts: Counter[str] = field(default_factory=Counter)
    resets: int = 0
    transport_errors: int = 0
    skipped_known: Counter[str] = field(default_factory=Counter)
    stopped: str | None = None
    load_average: dict[str, list[float]] = field(default_factory=dict)
    server_errors_logged: int | None = None

    @property
    def server_errors(self) -> int:
        """Answers with a 5xx status."""
        return sum(
            n
            for statuses in self.by_operation.values()
            for status, n in statuses.items()
            if int(status) >= 500
        )

    @property
    def ok(self) -> bool:
        return (
            not self.failures
            and self.resets == 0
            and self.transport_errors == 0
            and not self.server_errors_logged
            and self.stopped is None
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "seconds": round(self.seconds, 1),
            "requests_per_second": round(self.requests / self.seconds, 1) if self.seconds else 0,
            "server_errors": self.server_errors,
            "resets": self.resets,
            "transport_errors": self.transport_errors,
            "server_errors_logged": self.server_errors_logged,
            "service_stopped": self.stopped,
            "skipped_known_crashes": dict(self.skipped_known),
            "failures": len(self.failures),
            "failure_counts": dict(self.failure_counts),
            "load_average": self.load_average,
            "by_phase": dict(self.by_phase),
            "by_operation": {
                op: dict(sorted(statuses.items()))
                for op, statuses in sorted(self.by_operation.items())
            },
            "failure_examples": [asdict(f) for f in self.failures],
        }


KEEP_FAILURES = 3


def markdown(report: FuzzReport, *, budget: int) -> str:
    """The report for people: totals, per operation the answers by status, the failures."""
    data = report.as_dict()
    lines = [
        "# HTTP fuzz run",
        "",
        f"- requests: {data['requests']} (budget {budget}) in {data['seconds']} s "
        f"({data['requests_per_second']}/s)",
        f"- 5xx answers: {data['server_errors']}; connection resets: {data['resets']}; "
        f"transport errors: {data['transport_errors']}; internal errors in the serve log: "
        f"{data['server_errors_logged']}",
        f"- failed checks: {sum(report.failure_counts.values())} "
        f"({len(report.failure_counts)} distinct)",
        f"- load average (1, 5, 15 min) before {data['load_average'].get('before')}, after "
        f"{data['load_average'].get('after')}",
        f"- requests per phase: {data['by_phase']}",
        f"- not sent, known to stop the service (reported): {data['skipped_known_crashes']}",
        f"- service stopped: {'no' if report.stopped is None else 'YES'}",
        "",
        "| operation | requests | answers by status |",
        "|---|---:|---|",
    ]
    for operation, statuses in data["by_operation"].items():
        total = sum(statuses.values())
        spread = ", ".join(f"{s}: {n}" for s, n in statuses.items())
        lines.append(f"| `{operation}` | {total} | {spread} |")
    if report.stopped is not None:
        lines += ["", "## The service stopped", "", "```", report.stopped, "```"]
    if report.skipped_known:
        lines += ["", "## Known crashes (not sent)", ""]
        lines += [f"- `{key}`: {KNOWN_CRASHES[key][0]}" for key in sorted(report.skipped_known)]
    if report.failures:
        lines += ["", "## Failures (first examples of each)", ""]
        for failure in report.failures:
            lines += [
                f"### {failure.operation}: {failure.check} ({failure.status}, {failure.phase})",
                "",
                "```",
                failure.message,
                "```",
                "",
                "```",
                failure.reproduce,
                "```",
                "",
            ]
    return "\n".join(lines) + "\n"


def write_report(report: FuzzReport, out: Path, *, budget: int) -> tuple[Path, Path]:
    """``out``.json and ``out``.md."""
    out.parent.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out.with_suffix(".json"), out.with_suffix(".md")
    json_path.write_text(json.dumps({"budget": budget, **report.as_dict()}, indent=2) + "\n")
    md_path.write_text(markdown(report, budget=budget))
    return json_path, md_path

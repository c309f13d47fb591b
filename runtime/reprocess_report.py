"""What a reprocess did (:mod:`runtime.reprocess`), for the command's output and ``--json``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ReprocessReport:
    """What :func:`reprocess` did."""

    tables: list[str]
    start: str = ""
    """Where the replay started (:meth:`~runtime.replay_start.ReplayStart.describe`)."""
    cut_over: bool = False
    watermark: int = 0
    """Staging's last batch before the cut-over."""
    batch: int | None = None
    """The cut-over's batch (``watermark + 1``), or None when nothing differed."""
    upserted: dict[str, int] = field(default_factory=dict)
    """Per state table the rows written, per sink the rows delivered in place of the old."""
    deleted: dict[str, int] = field(default_factory=dict)
    retracted: dict[str, tuple[int, int] | None] = field(default_factory=dict)
    """Per sink the batches whose rows were replaced (None: there were none)."""
    done_in: int | None = None
    """The batch that already cut this shadow over (a rerun after a crash)."""
    shadow_batches: int = 0
    shadow_events: int = 0
    catch_up_s: float = 0.0
    cut_over_s: float = 0.0
    """From opening staging to the pushed cut-over: the time the pipeline has to stay stopped."""
    targets: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "tables": self.tables,
            "start": self.start,
            "cut_over": self.cut_over,
            "watermark": self.watermark,
            "batch": self.batch,
            "upserted": self.upserted,
            "deleted": self.deleted,
            "retracted": {k: None if v is None else list(v) for k, v in self.retracted.items()},
            "done_in": self.done_in,
            "shadow_batches": self.shadow_batches,
            "shadow_events": self.shadow_events,
            "catch_up_s": round(self.catch_up_s, 3),
            "cut_over_s": round(self.cut_over_s, 3),
            "targets": self.targets,
        }

    def _changes(self) -> list[str]:
        out = []
        for name in self.tables:
            if name in self.retracted:
                span = self.retracted[name]
                old = "nothing" if span is None else f"the rows of batches {span[0]}-{span[1]}"
                out.append(f"{name} {self.upserted[name]:,} rows in place of {old}")
            else:
                out.append(
                    f"{name} {self.upserted[name]:,} rows written, {self.deleted[name]:,} deleted"
                )
        return out

    def render(self) -> str:
        lines = [
            f"shadow: from {self.start}, {self.shadow_events:,} events replayed in "
            f"{self.shadow_batches:,} batches ({self.catch_up_s:.1f} s)"
        ]
        if not self.cut_over:
            lines.append(
                "staging is in use by a running pipeline, so the old tables keep serving: stop "
                "the pipeline and run this command again to cut over (it replays only what "
                "came since)"
            )
            return "\n".join(lines)
        if self.done_in is not None:
            lines.append(f"staging: already cut over in batch {self.done_in}")
        elif self.batch is None:
            lines.append(
                f"staging: {', '.join(self.tables)} already equal the recomputed rows (batch "
                f"{self.watermark}); nothing to cut over"
            )
        else:
            lines.append(
                f"staging: cut over in batch {self.batch} ({'; '.join(self._changes())}; "
                f"{self.cut_over_s:.2f} s)"
            )
        lines.extend(f"warehouse {n}: {m}" for n, m in sorted(self.targets.items()))
        return "\n".join(lines)

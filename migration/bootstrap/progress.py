"""How far a bootstrap has got: what the running copy reports, and what ``status`` shows."""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from migration.bootstrap.record import BootstrapRecord

#: ``copying`` (under way), ``loaded`` (through its snapshot; loads follow), ``caught_up``,
#: ``failed`` (stopped by an error; the next round resumes it).
ProgressState = Literal["copying", "loaded", "caught_up", "failed"]

#: How the rows came: ``file`` (a copy of a peer's DuckDB file, rewritten), ``rows`` (relations
#: read and bulk-loaded), ``""`` (not known: read from a target's record).
BootstrapPath = Literal["file", "rows", ""]


@dataclass
class RelationProgress:
    """One relation: rows copied so far, the staging watermark it is copied at, whether its
    transaction committed."""

    rows: int = 0
    through: int | None = None
    done: bool = False
    source: str = ""


@dataclass
class BootstrapProgress:
    """A target's bootstrap: its state, the staging snapshot ``through`` (the watermark it is
    copied at; the ledger says it once loaded), the peer the sinks come from and its watermark,
    the first batch whose sink rows the target will hold (``sinks_from``; above 1 when staging
    had released older ones and no peer held them), per relation what was copied, and the error
    that stopped it, if one did; ``method``, the path it took (:data:`BootstrapPath`; ``file``
    while it tries the file path); ``seconds`` it took (0 when read from a target's record: a
    bootstrap may have run in several attempts). Updated by the copy, read by ``status`` (a copy
    under a lock)."""

    target: str
    state: ProgressState = "copying"
    through: int | None = None
    peer: str | None = None
    peer_watermark: int | None = None
    sinks_from: int = 1
    relations: dict[str, RelationProgress] = field(default_factory=dict)
    error: str | None = None
    method: BootstrapPath = ""
    started: float = field(default_factory=time.monotonic)
    seconds: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def rows(self) -> int:
        return sum(r.rows for r in self.relations.values())

    @property
    def copied(self) -> int:
        """Relations whose copy committed."""
        return sum(1 for r in self.relations.values() if r.done)

    def update(self, relation: str, **changes: Any) -> None:
        with self._lock:
            entry = self.relations.setdefault(relation, RelationProgress())
            for key, value in changes.items():
                setattr(entry, key, value)

    def add_rows(self, relation: str, rows: int) -> None:
        with self._lock:
            self.relations.setdefault(relation, RelationProgress()).rows += rows

    def as_dict(self) -> dict[str, Any]:
        """A plain copy (``status``, ``--json``)."""
        with self._lock:
            relations = {n: asdict(r) for n, r in self.relations.items()}
        return {
            "state": self.state,
            "through": self.through,
            "peer": self.peer,
            "peer_watermark": self.peer_watermark,
            "sinks_from": self.sinks_from,
            "relations_copied": sum(1 for r in relations.values() if r["done"]),
            "relations_total": len(relations),
            "rows": sum(int(r["rows"]) for r in relations.values()),
            "seconds": round(
                self.seconds if self.state != "copying" else time.monotonic() - self.started, 3
            ),
            "error": self.error,
            "method": self.method,
            "relations": relations,
        }


def progress_of(target: str, record: BootstrapRecord, relations: list[str]) -> BootstrapProgress:
    """What a target's record says (a bootstrap this process is not running): ``relations`` are
    every relation the layout has, in copy order."""
    marked = [m.through for m in record.relations.values()]
    progress = BootstrapProgress(
        target,
        state=record.state,
        through=record.through if record.through is not None else max(marked, default=None),
        peer=record.peer,
        peer_watermark=record.peer_watermark,
        sinks_from=record.sinks_from,
    )
    for name in relations:
        mark = record.relations.get(name)
        progress.relations[name] = (
            RelationProgress(mark.rows, mark.through, True, mark.source)
            if mark is not None
            else RelationProgress()
        )
    return progress

"""What a :class:`~migration.migrator.Migrator` tells its observers about each target as it learns
it: :class:`TargetProgress`.

The query service's console (:mod:`api.console_recorder`) shows per target when it acknowledged
each batch, what it merged, and whether it answers, without asking the warehouses itself: the
migrator already learns all of it in its rounds. An observer is told, from the thread that runs
the round (the pipeline's migration worker, or a request's push or pull):

* ``acknowledged`` — the target holds every batch through this one: after each load commits in
  step 3, when a round first reads the target's ledger in step 2 (after a restart, or after a
  background bootstrap), when the target is first opened, and when :meth:`Migrator.status` reads
  it;
* ``merged_through`` — its full tables hold every batch through this one: after a merge, when the
  target is first opened, and from :meth:`Migrator.status`;
* ``reachable=False`` with ``error`` — an open, load or merge failed (staging keeps buffering).

A field left ``None`` is not known from that event. Observers must be cheap (they run inside the
migration round) and must not call back into the migrator (its lock is held); one that raises is
logged and never stops the round.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TargetProgress:
    """One thing a migrator learnt about ``target`` at ``at`` (epoch seconds); see the module
    docstring."""

    target: str
    reachable: bool
    acknowledged: int | None = None
    merged_through: int | None = None
    error: str | None = None
    at: float = field(default_factory=time.time)


#: An observer of a migrator's targets (:attr:`migration.migrator.Migrator.observers`).
ProgressObserver = Callable[[TargetProgress], None]


def tell(observers: Sequence[ProgressObserver], progress: TargetProgress) -> None:
    """Tell every observer; one that raises is logged and the others are still told."""
    for observe in observers:
        try:
            observe(progress)
        except Exception as exc:  # an observer must never stop a migration round
            logger.warning("migration observer failed target=%s: %s", progress.target, exc)

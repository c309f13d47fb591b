"""Migration inside the pipeline process: push on thresholds, pull when a target is idle.

DuckDB allows one writing process per file, so the migration of a running pipeline runs in that
process: a :class:`MigrationWorker` thread reads staging through the pipeline's store (cursors of
its connection) and writes acknowledgements and releases under the store's write lock.

* **Push** (``MIGRATION__PUSH`` targets): a round starts once ``push_batches`` (K) batches or
  ``push_rows`` (N) rows were committed since the last push, or the oldest of them waited
  ``push_ms`` (T). The committer reports each commit with :meth:`MigrationWorker.notify`.
* **Pull** (the other targets): a round starts for a target that has pending batches and has had
  no other active query for ``pull_idle_ms``; a pull merges its deltas at once (the warehouse is
  idle). ``streamdi migrate pull`` pulls on request.
* A target that cannot be reached is retried every ``retry_ms``; staging keeps its deltas until
  it is back. A terminal error (a target that contradicts staging) stops the worker and is raised
  by the pipeline.
* A target added later is bootstrapped in the background (:mod:`migration.bootstrap`); rounds
  look at it every ``retry_ms`` until it is done.
* On a clean stop the worker pushes what is pending (``push_on_stop``).
* At start, a round runs at once: batches staging holds that a push target has not acknowledged
  (a pipeline that was killed, or stopped with a warehouse away) have waited longer than any
  threshold, and no commit may come to count them (the input may have ended); the round also
  opens the targets, so deltas a target holds unmerged are merged ``merge_ms`` later, without
  waiting for a new load.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Sequence

from migration.migrator import MigrationHook, Migrator, Via, build_targets
from migration.schema import WarehouseLayout
from staging.batch_commit import BatchCommit
from staging.handoff import StagedDeltas
from staging.store import StagingStore
from streamdi.errors import TransientError
from streamdi.settings import MigrationSettings, StreamdiSettings

logger = logging.getLogger(__name__)

_TICK_S = 0.05


class PushPolicy:
    """When a push is due: after K batches, N rows, or when the oldest unpushed batch is T old."""

    def __init__(self, settings: MigrationSettings) -> None:
        self.batches = settings.push_batches
        self.rows = settings.push_rows
        self.ms = settings.push_ms

    def due(self, batches: int, rows: int, oldest_age_ms: float) -> bool:
        if batches <= 0:
            return False
        return (
            (self.batches is not None and batches >= self.batches)
            or (self.rows is not None and rows >= self.rows)
            or (self.ms is not None and oldest_age_ms >= self.ms)
        )


class MigrationWorker:
    """See the module docstring."""

    def __init__(self, migrator: Migrator, settings: MigrationSettings) -> None:
        self.migrator = migrator
        self.settings = settings
        self.policy = PushPolicy(settings)
        names = list(migrator.targets)
        self.push_targets = [t for t in settings.push_targets if t in names]
        self.pull_targets = [t for t in names if t not in self.push_targets]
        self.error: BaseException | None = None
        self.rounds = 0
        self._cond = threading.Condition()
        self._batches = 0
        self._rows = 0
        self._oldest: float | None = None
        self._stopping = False
        self._retry_at: float | None = None
        self._idle_since: dict[str, float] = {}
        self._thread = threading.Thread(target=self._loop, name="migration", daemon=True)

    def start(self) -> None:
        if self.push_targets:
            backlog = max(self.migrator.pending_batches(t) for t in self.push_targets)
            logger.info("migration round at start backlog_batches=%s", backlog)
            self._retry_at = time.monotonic()
        self._thread.start()

    def notify(self, batches: int, rows: int) -> None:
        """``batches`` batches with ``rows`` delta and output rows were committed to staging."""
        with self._cond:
            self._batches += batches
            self._rows += rows
            if self._oldest is None:
                self._oldest = time.monotonic()
            self._cond.notify()

    def stop(self, *, push: bool | None = None) -> None:
        """Stop the thread; push what is pending first when ``push`` (default: the setting)."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join()
        final = self.settings.push_on_stop if push is None else push
        if final and self.error is None and self.push_targets:
            try:
                self.migrator.migrate(self.push_targets, via="push")
            except Exception as exc:  # the pipeline stops anyway; say why the push failed
                logger.error("final push failed: %s", exc)
                self.error = exc
        self.migrator.close()

    def _take_due(self) -> bool:
        with self._cond:
            age_ms = 0.0 if self._oldest is None else (time.monotonic() - self._oldest) * 1000
            if not self.policy.due(self._batches, self._rows, age_ms):
                return False
            self._batches = self._rows = 0
            self._oldest = None
            return True

    def _loop(self) -> None:
        try:
            while True:
                with self._cond:
                    if self._stopping:
                        return
                    self._cond.wait(_TICK_S)
                    if self._stopping:
                        return
                now = time.monotonic()
                retry = self._retry_at is not None and now >= self._retry_at
                if self.push_targets and (self._take_due() or retry or self._merge_waiting()):
                    self._round(self.push_targets, "push")
                for name in self.pull_targets:
                    if self._pull_due(name, now):
                        self._round([name], "pull")
                        self._idle_since[name] = time.monotonic()  # at most one pull per idle span
        except BaseException as exc:
            logger.error("migration worker stopped: %s", exc)
            self.error = exc

    def _merge_waiting(self) -> bool:
        return bool(self.migrator.merges_due(self.push_targets))

    def _round(self, names: Sequence[str], via: Via) -> None:
        report = self.migrator.migrate(names, via=via, merge="auto" if via == "push" else "force")
        self.rounds += 1
        again = report.failed or report.bootstrapping  # a bootstrap's end is not a commit
        self._retry_at = time.monotonic() + self.settings.retry_ms / 1000 if again else None

    def _pull_due(self, name: str, now: float) -> bool:
        idle_ms = self.settings.pull_idle_ms
        if idle_ms is None:
            return False
        if self._retry_at is not None and now < self._retry_at:
            return False
        try:
            busy = self.migrator.target_busy(name)
        except TransientError:
            busy = True
        if busy:
            self._idle_since[name] = now
            return False
        since = self._idle_since.setdefault(name, now)
        if (now - since) * 1000 < idle_ms:
            return False
        return self.migrator.pending_batches(name) > 0


def start_migration_worker(
    store: StagingStore,
    settings: StreamdiSettings,
    *,
    migrator: Migrator | None = None,
    hook: MigrationHook | None = None,
) -> MigrationWorker | None:
    """The running migration of a pipeline over ``store`` (``None`` when ``MIGRATION__TARGETS``
    is empty), with ``migrator`` when the caller shares one (the query service; it carries its
    own hook). Targets connect lazily: one that is down does not stop the pipeline. ``hook``:
    the fault-injection hook of the migrator built here."""
    if not settings.migration.target_names:
        return None
    if migrator is None:
        layout = WarehouseLayout(store.flow, settings.migration.schema_name, history=store.history)
        migrator = Migrator(
            StagedDeltas(store),
            build_targets(settings, layout),
            settings.migration,
            bootstrap="background",
            hook=hook,
        )
    worker = MigrationWorker(migrator, settings.migration)
    worker.start()
    logger.info(
        "migration worker started push=%s pull=%s", worker.push_targets, worker.pull_targets
    )
    return worker


def committed_rows(commits: Iterable[BatchCommit]) -> int:
    """Delta and output rows a group of commits staged (what a push will move)."""
    rows = 0
    for c in commits:
        rows += sum(d.upserts.num_rows + d.deletes.num_rows for d in c.result.deltas.values())
        rows += sum(t.num_rows for t in c.result.outputs.values())
    return rows

"""The migrator: moves staged deltas into every configured warehouse exactly once.

One :class:`Migrator` serves one staging store and its targets; push (the pipeline, after K
batches, T ms or N rows) and pull (on request, or when a target is idle) both call
:meth:`Migrator.migrate`, so they move the same deltas under the same ledgers and can be mixed
freely. A round, in order:

1. Take the staging watermark ``W``; batches committed later wait for the next round.
2. For each target: open it (a target that cannot be reached is skipped and retried in a later
   round: staging keeps buffering) and read its watermark ``w`` from its own ledger, the truth
   about what it holds. A target ahead of staging, or behind what staging already released, is a
   :class:`~migration.exceptions.TargetMismatch` — unless it holds no batch at all: a target
   added later is *bootstrapped* (:mod:`migration.bootstrap`: a snapshot of every full table
   copied in bulk, its ledger then at the snapshot's watermark ``S``), inline or in the background
   (then it is skipped until the bootstrap is done), and goes on from ``S`` like any target.
3. Until every reachable target is at ``W``: take the targets with the lowest ``w``, read the
   staged changes of batches ``(w, min(w + max_batches_per_load, W)]`` once, and load them into
   each of those targets (one target transaction with the rows and the ledger rows,
   :meth:`~migration.targets.base.BaseTarget.load`), the targets at once, a thread each
   (``parallel_targets``; a target's transaction is its own, so each is still loaded exactly
   once); after each target's commit, note its acknowledgement (in memory). A target whose load
   brings it to ``W`` with a merge due (step 4) merges in the same thread, without waiting for
   the others' loads (with two warehouses, the faster one's merge no longer waits for the
   slower one's load), and in the load's own transaction when no earlier load of it waits
   unmerged (:meth:`~migration.targets.base.BaseTarget.load_and_merge`: its delta rows never
   leave the transaction).
4. Merge a target's delta tables into its full tables when it holds ``merge_rows`` unmerged rows
   or ``merge_ms`` passed since its last merge (or when asked); the targets due that step 3 did
   not merge merge at once, a thread each, like step 3.
5. At most every ``release_ms``, and when the migrator closes: write the noted acknowledgements to
   staging, then release from staging what every configured target acknowledged (after the
   retention). One large release costs less than many small ones, and it runs on a background
   thread (at most one at a time) so the next round's loads need not wait for staging's deletes;
   ``release_ms=0`` releases inline at the end of every round instead. A staging acknowledgement is
   only ever a copy of what the target's ledger says, which step 2 reads every round, so writing
   it late (or losing it in a crash) loses nothing.

A target object (one connection, one open transaction) is used by one thread at a time: rounds,
merges and ``status`` hold the migrator's lock, and inside a round each target has at most one
thread of step 3 or 4 (a round names each target once, however often the caller named it:
``POST /migration/pull {"targets": ["postgres", "postgres"]}`` once had two threads merge one
PostgreSQL target on its one connection, and both waited forever).

Crash between a target's commit and the staging acknowledgement: the next round reads ``w`` from
the target's ledger and starts after it, so nothing is loaded twice; a crash before the commit
leaves the batches staged and unacknowledged, so they are loaded again. Staging releases a batch
only after every target's acknowledgement, so a batch one target holds and another does not is
still staged for the second, and goes there exactly once.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from migration.bootstrap import BootstrapMethod, BootstrapMode, Bootstrapper, BootstrapProgress
from migration.exceptions import TargetMismatch
from migration.progress import ProgressObserver, TargetProgress, tell
from migration.schema import WarehouseLayout
from migration.targets.base import BaseTarget, MergeResult
from staging.handoff import StagedChanges, StagedDeltas
from streamdi.settings import MigrationSettings, StreamdiSettings
from warehouse.exceptions import WarehouseUnavailable

logger = logging.getLogger(__name__)

Via = Literal["push", "pull"]
MergeMode = Literal["auto", "force", "never"]
#: ``hook(phase, target)``: fault injection (crash tests); see :data:`migration.targets.base.Hook`.
MigrationHook = Callable[[str, str], None]


#: :attr:`_Advanced.merged` when step 3 did not merge the target.
_NOT_MERGED: Any = object()


@dataclass
class _Advanced:
    """What step 3 did for one target: its watermark after the load, the load's seconds, and
    its merge when it merged at once (:meth:`Migrator._advance`)."""

    watermark: int
    seconds: float
    merged: MergeResult | BaseException | None = field(default=_NOT_MERGED)


@dataclass
class TargetRound:
    """What one round did for one target."""

    target: str
    start: int = 0
    watermark: int = 0
    batches: int = 0
    rows: int = 0
    loads: int = 0
    load_ms: float = 0.0
    merge: MergeResult | None = None
    error: str | None = None
    bootstrap: BootstrapProgress | None = None
    """Its bootstrap, when the round ran or looked at one."""


@dataclass
class MigrationReport:
    """One round of :meth:`Migrator.migrate`."""

    via: Via
    staged_watermark: int
    targets: dict[str, TargetRound] = field(default_factory=dict)
    released_through: int = 0
    read_ms: float = 0.0
    seconds: float = 0.0

    @property
    def rows(self) -> int:
        return sum(t.rows for t in self.targets.values())

    @property
    def failed(self) -> list[str]:
        return [t for t, r in self.targets.items() if r.error is not None]

    @property
    def bootstrapping(self) -> list[str]:
        """Targets skipped because their bootstrap runs (in the background)."""
        return [
            t
            for t, r in self.targets.items()
            if r.bootstrap is not None and r.bootstrap.state in ("copying", "failed")
        ]


def build_targets(
    settings: StreamdiSettings, layout: WarehouseLayout, names: Iterable[str] | None = None
) -> dict[str, BaseTarget]:
    """The configured targets (``MIGRATION__TARGETS``, or ``names``), not yet opened.

    PostgreSQL without ``POSTGRES__DSN`` is the embedded server, started here.
    """
    from migration.targets.duckdb_file import DuckDBTarget
    from migration.targets.postgres import PostgresTarget

    chosen = list(names) if names is not None else list(settings.migration.target_names)
    targets: dict[str, BaseTarget] = {}
    for name in chosen:
        if name == "duckdb":
            targets[name] = DuckDBTarget(
                layout,
                settings.warehouse_path,
                memory_limit=settings.api.warehouse_memory_limit,
                threads=settings.api.warehouse_threads,
            )
        elif name == "postgres":
            dsn, args = postgres_connection(settings)
            targets[name] = PostgresTarget(
                layout, dsn, args, fillfactor=settings.postgres.fillfactor
            )
        else:
            raise ValueError(f"unknown migration target {name!r}")
    return targets


def once(names: Iterable[str]) -> list[str]:
    """``names`` in order, each once (a round, a merge: a target is used by one thread at a
    time)."""
    return list(dict.fromkeys(names))


def postgres_connection(settings: StreamdiSettings) -> tuple[str, dict[str, str]]:
    """The PostgreSQL warehouse's libpq DSN and extra connection parameters (TLS): ``POSTGRES__DSN``
    or the embedded server, started here when it is not running."""
    pg = settings.postgres
    if pg.dsn is not None:
        dsn = pg.dsn.get_secret_value()
    else:
        from warehouse.embedded import embedded_postgres_dsn

        dsn = embedded_postgres_dsn(settings.postgres_data_dir, server_settings=pg.server_settings)
    args: dict[str, str] = {}
    if pg.sslmode:
        args["sslmode"] = pg.sslmode
    for option in ("sslrootcert", "sslcert", "sslkey"):
        path = getattr(pg, option)
        if path is not None:
            args[option] = str(path)
    return dsn, args


class Migrator:
    """See the module docstring. ``release_targets`` are the targets every release waits for
    (all configured targets; default: the keys of ``targets``). ``bootstrap``: run a target's
    bootstrap ``inline`` in the round (``streamdi migrate``) or in the ``background`` (the
    pipeline and the service: the other targets' rounds go on meanwhile); ``bootstrap_method``
    which paths it may take (:data:`~migration.bootstrap.BootstrapMethod`). :attr:`observers`
    are told what each round learns of each target (:mod:`migration.progress`)."""

    def __init__(
        self,
        staged: StagedDeltas,
        targets: dict[str, BaseTarget],
        settings: MigrationSettings,
        *,
        release_targets: Sequence[str] | None = None,
        hook: MigrationHook | None = None,
        bootstrap: BootstrapMode = "inline",
        bootstrap_method: BootstrapMethod = "auto",
    ) -> None:
        self.staged = staged
        self.targets = targets
        self.settings = settings
        self.release_targets = list(release_targets if release_targets is not None else targets)
        self.hook = hook
        #: Held by a round (and status, merges): re-entrant, for a bootstrap's file path swaps
        #: the target's file under it (:meth:`quiet`) from inside an inline round.
        self._lock = threading.RLock()
        self._last_merge: dict[str, float] = {}
        self._unmerged: dict[str, int] = {}
        self._last_release = float("-inf")
        self._noted: dict[str, int] = {}
        self._releasing: dict[str, int] = {}
        #: Guards the swaps of ``_noted`` and ``_releasing`` against :meth:`acknowledged`, which
        #: reads both from other threads (the query service's status and metrics).
        self._memory_lock = threading.Lock()
        self._round_since_release = False
        self._releaser: threading.Thread | None = None
        self.bootstraps = Bootstrapper(
            staged,
            targets,
            mode=bootstrap,
            hold_release=self.hold_release,
            hook=hook,
            quiet=self.quiet,
            method=bootstrap_method,
        )
        #: Told what the migrator learns of each target: acknowledgements, merges, failures
        #: (:mod:`migration.progress`; the query service's console).
        self.observers: list[ProgressObserver] = []
        self._spent: dict[str, float] = {}
        self._spent_lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def _tell(
        self,
        name: str,
        *,
        acknowledged: int | None = None,
        merged_through: int | None = None,
        error: str | None = None,
    ) -> None:
        if self.observers:
            progress = TargetProgress(
                name, error is None, acknowledged, merged_through, error, time.time()
            )
            tell(self.observers, progress)

    def _each(
        self, names: Sequence[str], work: Callable[[str], Any]
    ) -> dict[str, Any | BaseException]:
        """``work(name)`` for every name (each once: a target is used by one thread at a time,
        see the module docstring): at once on the migrator's threads when ``parallel_targets``
        and there are several, else one after the other. Each outcome is its result or the
        exception it raised, in ``names`` order."""
        if len(set(names)) != len(names):
            raise ValueError(f"targets named more than once: {list(names)}")

        def attempt(name: str) -> Any | BaseException:
            try:
                return work(name)
            except BaseException as exc:
                return exc

        if len(names) < 2 or not self.settings.parallel_targets:
            return {name: attempt(name) for name in names}
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                max_workers=max(2, len(self.targets)), thread_name_prefix="streamdi-target"
            )
        futures = {name: self._pool.submit(attempt, name) for name in names}
        return {name: futures[name].result() for name in names}

    def spent(self) -> dict[str, float]:
        """Seconds spent so far (cumulative): ``staging.read`` reading the staged changes,
        ``load.<target>`` loading them into each target, ``merge.<target>`` merging them."""
        with self._spent_lock:
            return dict(self._spent)

    def _spend(self, what: str, seconds: float) -> None:
        with self._spent_lock:
            self._spent[what] = self._spent.get(what, 0.0) + seconds

    def close(self) -> None:
        """Write the noted acknowledgements, release what they allow, close every target."""
        self.bootstraps.close()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        with self._lock:
            try:
                self.wait_for_release()
                if self._round_since_release:
                    self._release(self._take_noted())
            except Exception as exc:  # the next round heals the acknowledgements from the ledgers
                logger.warning("release on close failed: %s", exc)
            finally:
                for target in self.targets.values():
                    target.close()

    def _note_ack(self, name: str, batch_id: int, acks: dict[str, int]) -> None:
        if batch_id > max(acks.get(name, 0), self._noted.get(name, 0)):
            with self._memory_lock:
                self._noted[name] = batch_id

    def _take_noted(self) -> dict[str, int]:
        with self._memory_lock:
            noted = dict(self._noted)
            self._releasing = noted  # still visible to acknowledged() until staging holds them
            self._noted.clear()
        self._last_release = time.monotonic()
        self._round_since_release = False
        return noted

    def _release(self, noted: dict[str, int]) -> None:
        """Step 5: the noted acknowledgements into staging, then the release."""
        staged = self.staged
        for name, batch_id in sorted(noted.items()):
            staged.acknowledge(name, batch_id)
            if self.hook is not None:
                self.hook("acked", name)
        with self._memory_lock:
            self._releasing = {}
        staged.release(self.release_targets, self.settings.retention_s)

    def _release_in_background(self, noted: dict[str, int]) -> None:
        def run() -> None:
            try:
                self._release(noted)
            except Exception as exc:  # the next round heals the acknowledgements
                logger.warning("background release failed: %s", exc)

        self._releaser = threading.Thread(target=run, name="streamdi-release", daemon=True)
        self._releaser.start()

    def wait_for_release(self) -> None:
        """Block until the background release running now, if any, has ended (its
        acknowledgements are then in staging). :meth:`close` does this; a caller that needs
        staging to hold the acknowledgements at once may too."""
        if self._releaser is not None:
            self._releaser.join()
            self._releaser = None

    def hold_release(self, name: str) -> None:
        """From now on staging keeps every batch for target ``name`` (before its bootstrap reads
        anything): a release in flight ends first, then its acknowledgement is set back to 0."""
        self.wait_for_release()
        with self._memory_lock:
            self._noted.pop(name, None)
        self.staged.retract(name)

    @contextmanager
    def quiet(self, name: str) -> Iterator[None]:
        """Nothing of this migrator uses target ``name`` inside: no round, status or merge runs
        (they wait), and its object of the target is closed (the next use opens it again). A
        bootstrap's file path replaces the target's file in it."""
        with self._lock:
            self.targets[name].close()
            yield

    def acknowledged(self) -> dict[str, int]:
        """The last batch each target acknowledged (staging's record and the noted ones)."""
        # memory before staging: an acknowledgement leaves memory only once staging holds it
        with self._memory_lock:
            noted = {**self._releasing, **self._noted}
        acks = self.staged.acks()
        return {n: max(acks.get(n, 0), noted.get(n, 0)) for n in {*acks, *noted}}

    def _target_hook(self, name: str) -> Callable[[str], None] | None:
        hook = self.hook
        if hook is None:
            return None

        def call(phase: str) -> None:
            hook(phase, name)

        return call

    def _open(self, name: str) -> BaseTarget:
        target = self.targets[name]
        first = not target.opened
        try:
            target.open()
        except WarehouseUnavailable as exc:
            self._tell(name, error=str(exc))
            raise
        if first:
            self._unmerged[name] = target.delta_rows()
            self._last_merge.setdefault(name, time.monotonic())
            watermark = target.watermark()
            self.bootstraps.observe(name, target, watermark, self.staged.released_through())
            if self.observers:
                self._tell(name, acknowledged=watermark, merged_through=self._merged(target))
        return target

    @staticmethod
    def _merged(target: BaseTarget) -> int | None:
        try:
            return target.merged_through()[0]
        except WarehouseUnavailable:
            return None

    def migrate(
        self,
        names: Iterable[str] | None = None,
        *,
        via: Via = "push",
        merge: MergeMode = "auto",
    ) -> MigrationReport:
        """One round over ``names`` (default: every target); see the module docstring.

        Unreachable targets are reported in the round's ``targets[name].error`` and skipped;
        :class:`~migration.exceptions.TargetMismatch` propagates. A target named more than once
        is taken once.
        """
        with self._lock:
            return self._migrate(once(names if names is not None else self.targets), via, merge)

    def _migrate(self, names: list[str], via: Via, merge: MergeMode) -> MigrationReport:
        started = time.perf_counter()
        staged = self.staged
        # 1.
        top = staged.watermark()
        report = MigrationReport(via, top)
        released = staged.released_through()
        # 2.
        acks = staged.acks()
        progress: dict[str, int] = {}
        for name in names:
            result = report.targets.setdefault(name, TargetRound(name))
            try:
                w = self._open(name).watermark()
            except WarehouseUnavailable as exc:
                result.error = str(exc)
                logger.warning("migration target unavailable target=%s: %s", name, exc)
                self._tell(name, error=result.error)
                continue
            if w > top:
                raise TargetMismatch(
                    name,
                    f"it holds batches up to {w} of {staged.flow_name!r} but staging has only "
                    f"committed {top}: the staging file was replaced; migrate into a new schema "
                    "(MIGRATION__SCHEMA_NAME) or database",
                )
            if w == 0 and self.bootstraps.wanted(name, self.targets[name], released):
                try:
                    booting = result.bootstrap = self.bootstraps.run(name)
                    if booting.state != "loaded":  # runs in the background: skipped meanwhile
                        continue
                    w = self._open(name).watermark()  # (its file may have been swapped)
                except WarehouseUnavailable as exc:
                    result.error = str(exc)
                    logger.warning("bootstrap failed target=%s: %s", name, exc)
                    continue
            if w < released:
                raise TargetMismatch(
                    name,
                    f"it holds batches up to {w} but staging released batches up to {released} "
                    "(every other target had them); load it from a copy of another target",
                )
            result.start = result.watermark = progress[name] = w
            self._note_ack(name, w, acks)  # heals an acknowledgement lost in a crash
            self._tell(name, acknowledged=w)
        # 3.
        step = self.settings.max_batches_per_load
        merged: set[str] = set()  # targets step 3 merged
        while True:
            behind = {t: w for t, w in progress.items() if w < top}
            if not behind:
                break
            low = min(behind.values())
            group = [t for t, w in behind.items() if w == low]
            t0 = time.perf_counter()
            changes = staged.read(low, min(low + step, top))
            report.read_ms += (time.perf_counter() - t0) * 1000
            self._spend("staging.read", time.perf_counter() - t0)
            advance = functools.partial(
                self._advance, changes=changes, via=via, top=top, merge=merge
            )
            for name, outcome in self._each(group, advance).items():
                result = report.targets[name]
                if isinstance(outcome, WarehouseUnavailable):
                    result.error = str(outcome)
                    logger.warning("migration load failed target=%s: %s", name, outcome)
                    self._tell(name, error=result.error)
                    del progress[name]
                    continue
                if isinstance(outcome, BaseException):
                    raise outcome
                w = outcome.watermark
                result.load_ms += outcome.seconds * 1000
                if w == changes.upto:
                    result.batches += changes.upto - changes.after
                    result.rows += changes.rows
                    result.loads += 1
                self._note_ack(name, w, acks)
                self._tell(name, acknowledged=w)
                progress[name] = result.watermark = w
                if outcome.merged is not _NOT_MERGED:
                    merged.add(name)
                    self._merged_outcome(name, outcome.merged, result)
        for name, w in progress.items():
            self.bootstraps.caught_up(name, self.targets[name], w, top)
        # 4.
        # (a target not in progress without an error is one whose bootstrap runs)
        due = [
            name
            for name in names
            if name in progress
            and name not in merged
            and report.targets[name].error is None
            and self._merge_due(name, merge)
        ]
        for name, merge_outcome in self._each(due, self._merge_one).items():
            self._merged_outcome(name, merge_outcome, report.targets[name])
        # 5.
        self._round_since_release = True
        if self.settings.release_ms == 0:
            self._release(self._take_noted())
        elif (time.monotonic() - self._last_release) * 1000 >= self.settings.release_ms and (
            self._releaser is None or not self._releaser.is_alive()
        ):
            self.wait_for_release()
            self._release_in_background(self._take_noted())
        report.released_through = staged.released_through()
        report.seconds = time.perf_counter() - started
        for name, result in report.targets.items():
            if result.loads or result.merge:
                logger.info(
                    "migrated via=%s target=%s batches=%s..%s rows=%s merge_rows=%s "
                    "load_ms=%.0f merge_ms=%.0f round_s=%.3f",
                    via,
                    name,
                    result.start + 1,
                    result.watermark,
                    result.rows,
                    result.merge.rows if result.merge else 0,
                    result.load_ms,
                    result.merge.ms if result.merge else 0.0,
                    report.seconds,
                )
        return report

    def _advance(
        self, name: str, *, changes: StagedChanges, via: Via, top: int, merge: MergeMode
    ) -> _Advanced:
        """Step 3 for one target, and step 4 at once when the load brought it to ``top`` and a
        merge is due (a merge that fails is the outcome's, reported as step 4 reports it). A
        load and merge in one transaction that fails is made again as a load, then a merge: a
        merge that keeps failing must not hold the loads back (their rows are read through the
        delta tables meanwhile)."""
        merged: MergeResult | None = None
        if changes.upto >= top and self._merge_due(name, merge, adding=changes.rows):
            try:
                w, seconds, merged = self._load_and_merge(name, changes=changes, via=via)
            except Exception as exc:
                logger.warning(
                    "load and merge in one transaction failed target=%s: %s; loading, then merging",
                    name,
                    exc,
                )
                w, seconds = self._load(name, changes=changes, via=via)
            if merged is not None:
                return _Advanced(w, seconds, merged)
        else:
            w, seconds = self._load(name, changes=changes, via=via)
        if w == changes.upto:
            self._unmerged[name] = self._unmerged.get(name, 0) + changes.rows
        advanced = _Advanced(w, seconds)
        if w >= top and self._merge_due(name, merge):
            try:
                advanced.merged = self._merge_one(name)
            except BaseException as exc:  # the round reports it, as step 4 does
                advanced.merged = exc
        return advanced

    def _merged_outcome(
        self, name: str, outcome: MergeResult | BaseException | None, result: TargetRound
    ) -> None:
        """Account a target's merge (step 4) in the round: an unreachable target is reported and
        skipped, any other error raised."""
        if isinstance(outcome, WarehouseUnavailable):
            result.error = str(outcome)
            logger.warning("migration merge failed target=%s: %s", name, outcome)
            self._tell(name, error=result.error)
            return
        if isinstance(outcome, BaseException):
            raise outcome
        result.merge = outcome
        self._unmerged[name] = 0
        self._last_merge[name] = time.monotonic()
        if outcome is not None:
            self._tell(name, merged_through=outcome.through)

    def _load(self, name: str, *, changes: StagedChanges, via: Via) -> tuple[int, float]:
        """Step 3 for one target: its new watermark and the seconds the load took."""
        t1 = time.perf_counter()
        w = self.targets[name].load(changes, via, self._target_hook(name))
        seconds = time.perf_counter() - t1
        self._spend(f"load.{name}", seconds)
        return w, seconds

    def _load_and_merge(
        self, name: str, *, changes: StagedChanges, via: Via
    ) -> tuple[int, float, MergeResult | None]:
        """Steps 3 and 4 for one target in one of its transactions
        (:meth:`~migration.targets.base.BaseTarget.load_and_merge`): its new watermark, the
        seconds the load took and the merge (None: loaded only, the merge is step 4's)."""
        t1 = time.perf_counter()
        w, merged = self.targets[name].load_and_merge(changes, via, self._target_hook(name))
        seconds = time.perf_counter() - t1
        merge_s = merged.ms / 1000 if merged is not None else 0.0
        self._spend(f"load.{name}", seconds - merge_s)
        if merged is not None:
            self._spend(f"merge.{name}", merge_s)
        return w, seconds - merge_s, merged

    def _merge_one(self, name: str) -> MergeResult | None:
        """Step 4 for one target."""
        t2 = time.perf_counter()
        try:
            return self.targets[name].merge(self._target_hook(name))
        finally:
            self._spend(f"merge.{name}", time.perf_counter() - t2)

    def _merge_due(self, name: str, merge: MergeMode, *, adding: int = 0) -> bool:
        """Whether ``name`` merges now (``adding``: rows of a load about to be made)."""
        if merge == "never":
            return False
        if merge == "force":
            return True
        unmerged = self._unmerged.get(name, 0) + adding
        if unmerged <= 0:
            return False
        waited_ms = (time.monotonic() - self._last_merge.get(name, 0.0)) * 1000
        return unmerged >= self.settings.merge_rows or waited_ms >= self.settings.merge_ms

    def merges_due(self, names: Iterable[str]) -> list[str]:
        """Targets (opened already) whose unmerged rows waited ``merge_ms``."""
        return [
            n
            for n in names
            if self.targets[n].opened
            and self._unmerged.get(n, 0) > 0
            and self._merge_due(n, "auto")
        ]

    def opened(self, name: str) -> BaseTarget:
        """Target ``name``, connected (raises :class:`~warehouse.exceptions.WarehouseUnavailable`
        when it cannot be reached). Readers use it to share the target's database; an open target
        is returned at once, without waiting for a migration round."""
        target = self.targets[name]
        if target.opened:
            return target
        with self._lock:
            return self._open(name)

    def target_busy(self, name: str) -> bool:
        """Whether another client is querying target ``name`` (raises
        :class:`~warehouse.exceptions.WarehouseUnavailable` when it cannot be reached)."""
        with self._lock:
            return self._open(name).busy()

    def ready(self, name: str) -> bool:
        """Whether the query service may read target ``name``: no bootstrap of it is under way
        or waiting to catch up, and it holds every batch staging released. An unknown or
        unreachable target counts as ready (reading it says what is wrong)."""
        if name not in self.targets:
            return True
        known = self.bootstraps.readable(name)
        if known is None:
            try:
                self.opened(name)
            except WarehouseUnavailable:
                return True
            known = self.bootstraps.readable(name)
        return known is not False

    def pending_batches(self, name: str) -> int:
        """Staged batches target ``name`` has not acknowledged."""
        return max(0, self.staged.watermark() - self.acknowledged().get(name, 0))

    def merge(self, names: Iterable[str] | None = None) -> dict[str, MergeResult | None]:
        """Merge now, on every reachable target of ``names`` (default: all); the time counts in
        :meth:`spent` like a round's merges (a target named more than once: once)."""
        with self._lock:
            out: dict[str, MergeResult | None] = {}
            for name in once(names if names is not None else self.targets):
                started = time.perf_counter()
                try:
                    merged = out[name] = self._open(name).merge(self._target_hook(name))
                finally:
                    self._spend(f"merge.{name}", time.perf_counter() - started)
                self._unmerged[name] = 0
                self._last_merge[name] = time.monotonic()
                if merged is not None:
                    self._tell(name, merged_through=merged.through)
            return out

    def status(self) -> dict[str, Any]:
        """Staging's watermark and release point, and per target what it holds."""
        staged = self.staged
        acks = self.acknowledged()
        top = staged.watermark()
        out: dict[str, Any] = {
            "stream": staged.flow_name,
            "staged_watermark": top,
            "released_through": staged.released_through(),
            "targets": {},
        }
        for name, target in self.targets.items():
            entry: dict[str, Any] = {"acknowledged": acks.get(name, 0)}
            try:
                with self._lock:
                    self._open(name)
                    w = target.watermark()
                    merged, merged_at = target.merged_through()
                    entry.update(
                        reachable=True,
                        watermark=w,
                        pending_batches=max(0, top - w),
                        merged_through=merged,
                        merged_at=None if merged_at is None else str(merged_at),
                        unmerged_rows=target.delta_rows(),
                        busy=target.busy(),
                        readable=self.bootstraps.readable(name) is not False,
                    )
                    boot = self.bootstraps.status(name, target)
                    if boot is not None:
                        entry["bootstrap"] = boot
                    self._tell(name, acknowledged=w, merged_through=merged)
            except WarehouseUnavailable as exc:
                entry.update(reachable=False, error=str(exc))
                self._tell(name, error=str(exc))
            out["targets"][name] = entry
        return out

"""One run of the TPC-DI workload (:mod:`benchmarks.faults.tpcdi_workload`): the ledger run's
machinery (:class:`~benchmarks.faults.run.LedgerRun`: serve under the supervisor, the pusher,
the faults, recoveries, the snapshot) with TPC-DI's phases around it.

A run, in order:

1. Its files are a copy of the prepared base (the warehouses after the historical load, the
   seeded staging file; PostgreSQL's data directory too, before the server starts).
2. Before serve starts: ``streamdi tpcdi phase end 1`` (the historical load's validation and
   CT1) and ``begin 2`` (Phase started, the first Visibility_1).
3. serve takes Batch2's offers under the schedule's faults. Every :data:`VISIBILITY_EVERY_S`
   (checked before each milestone) serve is stopped (SIGTERM) for a ``phase visibility`` (a
   Visibility_2): the DuckDB warehouse is in serve's process, so the bookkeeping writes while it
   is away, and clause 7.3.4 wants one at most five minutes apart.
4. At Batch3's first offer (a planned pause, like the ledger's reprocess: no offer of Batch3 is
   taken before it): once Batch2's last batch is in staging and both warehouses, serve stops
   (SIGTERM), ``streamdi migrate push --merge`` folds every delta, ``phase end 2`` and ``phase
   begin 3`` run; in the faulted run the first attempt is killed (``phase_kill``: at one of the
   points of :mod:`tpcdi.run.resume` or at a random moment) and the step run again.
5. Batch3's offers, as in 3.
6. The end (after the ledger run's: serve stopped, the last merge): ``phase end 3`` and ``phase
   audit 3`` (in the faulted run the first attempt of one of them killed), then the snapshot:
   staging and both warehouses under the workload's :data:`~benchmarks.faults.
   tpcdi_workload.RULES`, and each warehouse's audit. An audit check that fails is a finding.
"""

from __future__ import annotations

import json
import logging
import random
import signal
import time
from pathlib import Path
from typing import Any

from benchmarks.faults import compare
from benchmarks.faults.injector import Injection
from benchmarks.faults.kinds import Fault
from benchmarks.faults.processes import run_command
from benchmarks.faults.run import LedgerRun, Live, RunConfig
from benchmarks.faults.supervisor import Supervisor
from benchmarks.faults.tpcdi_workload import (
    BATCHES,
    RULES,
    SCHEMA,
    SPEC,
    STREAM,
    Base,
    TpcdiInput,
    audit_relations,
    copy_base,
)

logger = logging.getLogger(__name__)

#: A Visibility_2 at least this often (clause 7.3.4 allows five minutes; a fault and its
#: recovery may come between the check and the stop).
VISIBILITY_EVERY_S = 150.0
#: ``streamdi tpcdi phase --crash-at`` points of the faulted run's first attempts (None: a kill
#: after a random delay): at the end of Batch2 (``begin``: of Batch3), and at the run's end.
BOUNDARY_POINTS = ("prospects", "visibility", "validation", "pcr", "begin", None)
FINAL_POINTS = ("prospects", "visibility", "validation", "pcr", "audit", None)


class TpcdiRun(LedgerRun):
    """One run of the TPC-DI workload (see the module docstring)."""

    spec = SPEC
    schema = SCHEMA
    stream = STREAM

    def __init__(self, config: RunConfig, base: Base, workload: TpcdiInput) -> None:
        super().__init__(config)
        self.base = base
        self.input = workload
        self.batch = BATCHES[0]
        self.last_visibility = time.monotonic()
        self.audits: dict[str, dict[str, Any]] = {}
        self.rng = random.Random(config.seed * 7919 + 17)
        self.kills = 0

    # -- the hooks of LedgerRun ----------------------------------------------------------------

    def extra_env(self) -> dict[str, str]:
        # a staging checkpoint copies the state: TPC-DI's is the warehouse's dimensions
        return {"MIGRATION__SCHEMA_NAME": SCHEMA, "STAGING__CHECKPOINT_EVERY_S": "5"}

    def pause_offers(self) -> list[int]:
        return [self.input.first_offer[b] for b in BATCHES[1:]]

    def _setup(self, staging: Path) -> None:
        # 1.
        copy_base(self.base, self.state, staging)

    def _prepare(self, env: dict[str, str], staging: Path) -> None:
        # 2.
        for action, batch in (("end", 1), ("begin", BATCHES[0])):
            code = self.phase(action, batch, env)
            if code != 0:
                raise RuntimeError(f"streamdi tpcdi phase {action} {batch} exited {code}")
        self.last_visibility = time.monotonic()

    def _between(self, live: Live) -> None:
        # 3.
        if time.monotonic() - self.last_visibility < VISIBILITY_EVERY_S:
            return
        self._wait_serving(live)
        with live.supervisor.held("serve"):
            self._stop_serve(live.supervisor, "a visibility query")
            self._step("visibility", self.batch, live.env)
            self.last_visibility = time.monotonic()
        self._wait_serving(live, self.last_visibility)

    def _pause(self, offer: int, live: Live) -> None:
        # 4.
        supervisor, sampler, env = live.supervisor, live.sampler, live.env
        before = self.batch_of(offer - 1)
        if not self._wait(lambda: sampler.caught_up(before, 0.0) is not None, 300):
            self.result.findings.append(f"batch {before} never reached both warehouses")
        ended, following = self.batch, self.input.batch_of_offer(offer)
        self._wait_serving(live)
        with supervisor.held("serve"):
            self._stop_serve(supervisor, f"the end of phase {ended}")
            self._merge(env)
            self._kill_first(offer, env, BOUNDARY_POINTS, ended, following)
            self._step("end", ended, env)
            self._step("begin", following, env)
            self.batch = following
            self.last_visibility = time.monotonic()
        self._wait_serving(live, self.last_visibility)

    def _after_merge(self, env: dict[str, str], dsn: str) -> None:
        # 6.
        last = BATCHES[-1]
        self._kill_first(len(self.config.offers), env, FINAL_POINTS, last, None)
        self._step("end", last, env)
        out = self.folder / "audit.json"
        out.unlink(missing_ok=True)
        self._step("audit", last, env, json_path=out)
        try:
            self.audits = json.loads(out.read_text())
        except (OSError, ValueError) as exc:
            self.result.findings.append(f"no audit verdicts: {exc}")
            return
        for target, verdicts in sorted(self.audits.items()):
            failed = [f"{c['name']}: {c['detail']}" for c in verdicts["checks"] if not c["ok"]]
            if failed:
                self.result.findings.append(f"audit on {target}: {'; '.join(failed)}")

    def _snapshot(self, staging: Path, dsn: str) -> compare.Snapshot:
        snap = compare.staging_snapshot(staging, RULES)
        snap.update(
            compare.duckdb_warehouse_snapshot(self.state / "warehouse.duckdb", SCHEMA, RULES)
        )
        snap.update(compare.postgres_snapshot(dsn, SCHEMA, RULES))
        snap.update(audit_relations(self.audits))
        return snap

    # -- the phase steps -------------------------------------------------------------------------

    def phase(
        self,
        action: str,
        batch: int,
        env: dict[str, str],
        *,
        crash_at: str | None = None,
        kill_after_s: float | None = None,
        json_path: Path | None = None,
    ) -> int:
        """``streamdi tpcdi phase ACTION BATCH`` on this run's warehouses: its exit code."""
        args = ["tpcdi", "phase", action, str(batch), "--workdir", str(self.state)]
        args += ["--data", str(self.base.data), "--target", "both"]
        if json_path is not None:
            args += ["--json", str(json_path)]
        if crash_at is not None:
            args += ["--crash-at", crash_at]
        return run_command(args, env, self.log, timeout_s=600, kill_after_s=kill_after_s)

    def _step(self, action: str, batch: int, env: dict[str, str], **kwargs: Any) -> None:
        code = self.phase(action, batch, env, **kwargs)
        if code != 0:
            self.result.findings.append(f"streamdi tpcdi phase {action} {batch} exited {code}")

    def _wait_serving(self, live: Live, since: float = 0.0) -> None:
        """Wait until a serve process started after ``since`` answers ``/status`` with its
        pipeline running: a planned stop is a SIGTERM to a started service (one still starting
        dies of it), and the fault after a planned stop must find serve and its Kafka up (the
        supervisor starts serve again at its next look, after the stop's block)."""

        def serving() -> bool:
            samples = live.sampler.samples
            last = samples[-1] if samples else None
            started = live.supervisor.serve.started_at
            return started > since and last is not None and last.at > started

        if not self._wait(serving, 240):
            self.result.findings.append("serve did not come up within 240 s before a planned stop")

    def _stop_serve(self, supervisor: Supervisor, why: str) -> None:
        code = supervisor.terminate_serve()
        if code != 0:
            self.result.findings.append(f"serve exited {code} on SIGTERM before {why}")

    def _merge(self, env: dict[str, str]) -> None:
        code = run_command(["migrate", "push", self.spec, "--merge"], env, self.log, timeout_s=600)
        if code != 0:
            self.result.findings.append(f"streamdi migrate push --merge exited {code}")

    def _kill_first(
        self,
        offer: int,
        env: dict[str, str],
        points: tuple[str | None, ...],
        ended: int,
        following: int | None,
    ) -> None:
        """In the faulted run, the first attempt of a phase step killed (``phase_kill``): at a
        point drawn from ``points`` (``begin``: of phase ``following``; ``audit``: the audit
        after ``ended``'s end; any other: the end of phase ``ended``), or after a random delay
        into the end of phase ``ended``: the ``points`` in turn from the seed. The caller runs the
        steps again to their end."""
        if not self.config.reprocess_fault:
            return
        # the points in turn from the seed (a seed's two kills never both at a random moment)
        point = points[(self.config.seed + 3 * self.kills) % len(points)]
        self.kills += 1
        started = time.monotonic()
        if point == "begin" and following is not None:
            self._step("end", ended, env)
            code = self.phase("begin", following, env, crash_at=point)
            what = f"phase begin {following} killed at {point}"
        elif point == "audit":
            self._step("end", ended, env)
            code = self.phase("audit", ended, env, crash_at=point)
            what = f"phase audit {ended} killed at {point}"
        elif point is None:
            delay = round(self.rng.uniform(1.5, 5.0), 2)  # start-up ~1.5 s, the work 1-3 s
            code = self.phase("end", ended, env, kill_after_s=delay)
            what = f"phase end {ended} killed after {delay:.2f} s"
        else:
            code = self.phase("end", ended, env, crash_at=point)
            what = f"phase end {ended} killed at {point}"
        self.result.injections.append(
            Injection(
                Fault(-1, offer, "phase_kill", point=point),
                started,
                time.monotonic(),
                code == -signal.SIGKILL,
                f"{what} (code {code})",
            )
        )
        logger.info("fault phase_kill %s landed=%s", what, code == -signal.SIGKILL)

"""The engine demo: a generated ledger workload run through an executor and through the serial
oracle, with a short report.

It is the main job until the TPC-DI job exists (``streamdi demo``). The report gives the batches,
transactions, commits, aborts, dead letters, throughput and per-batch latency of the chosen
executor, the strategies it chose, its speed-up over the oracle, and whether its results (outputs,
aborts, dead letters, deltas, final state) are identical to the oracle's. It is a demonstration,
not a benchmark (the benchmarks live in ``benchmarks/``).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from etl_dataflows.batch import BatchResult
from etl_dataflows.executors import create_executor
from etl_dataflows.testing.harness import RunResult, TestingSink, assert_same_results
from etl_dataflows.testing.workload import WorkloadSpec, ledger_workload


@dataclass
class DemoReport:
    executor: str
    batches: int
    transactions: int
    committed: int
    aborted: int
    dead_letters: int
    seconds: float
    txn_per_s: float
    p50_batch_ms: float
    p99_batch_ms: float
    strategies: str
    oracle_txn_per_s: float
    identical_to_oracle: bool
    difference: str | None
    final_accounts: int
    final_total_balance: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def render(self) -> str:
        verdict = "yes" if self.identical_to_oracle else f"NO — {self.difference}"
        speedup = self.txn_per_s / self.oracle_txn_per_s if self.oracle_txn_per_s else 0.0
        lines = [
            f"streamdi engine demo — executor {self.executor}",
            f"  batches           {self.batches}",
            f"  transactions      {self.transactions:,}",
            f"  committed         {self.committed:,}",
            f"  aborted           {self.aborted:,} (conditions and errors)",
            f"  dead letters      {self.dead_letters:,}",
            f"  wall time         {self.seconds:.2f} s (after the first batch, which compiles)",
            f"  throughput        {self.txn_per_s:,.0f} transactions/s",
            f"  batch latency     p50 {self.p50_batch_ms:.1f} ms, p99 {self.p99_batch_ms:.1f} ms",
            f"  strategies        {self.strategies}",
            f"  serial oracle     {self.oracle_txn_per_s:,.0f} transactions/s ({speedup:,.0f}x)",
            f"  same as oracle    {verdict}",
            f"  final accounts    {self.final_accounts:,}",
            f"  total balance     {self.final_total_balance:,}",
        ]
        return "\n".join(lines)


def _run(executor: str, spec: WorkloadSpec) -> tuple[RunResult, list[float], Counter[str]]:
    workload = ledger_workload(spec)
    runner = create_executor(executor, workload.flow, workload.state)
    latencies: list[float] = []
    strategies: Counter[str] = Counter()
    results: list[BatchResult] = []
    sink = TestingSink()
    try:
        started = time.perf_counter()
        for result in runner.run_stream(workload.batches):
            latencies.append((time.perf_counter() - started) * 1000)
            results.append(result)
            sink.collect(result)
            for decision in result.decisions:
                strategies[decision.strategy] += 1
            started = time.perf_counter()
        final = runner.state_image()
    finally:
        runner.close()
    return RunResult(executor, results, sink, final), latencies, strategies


def run_demo(spec: WorkloadSpec, executor: str = "local") -> DemoReport:
    """Generate the ledger workload for ``spec``; run it through ``executor`` and the oracle."""
    run, latencies, strategies = _run(executor, spec)
    oracle, oracle_latencies, _ = _run("serial", spec)
    difference = None
    try:
        assert_same_results(oracle, run)
    except AssertionError as exc:
        difference = str(exc).splitlines()[0]
    measured = latencies[1:] or latencies
    seconds = sum(measured) / 1000
    counted = sum(b.num_events for b in ledger_workload(spec).batches[1:]) or spec.batch_size
    oracle_seconds = sum(oracle_latencies[1:] or oracle_latencies) / 1000
    accounts = run.final_state.tables["accounts"]
    return DemoReport(
        executor=executor,
        batches=len(run.results),
        transactions=sum(
            s.rows_in for r in run.results for n, s in r.stats.items() if n == "ledger"
        ),
        committed=sum(r.committed for r in run.results),
        aborted=sum(r.aborted for r in run.results),
        dead_letters=sum(r.dead_letters.num_rows for r in run.results),
        seconds=seconds,
        txn_per_s=counted / seconds if seconds > 0 else 0.0,
        p50_batch_ms=float(np.percentile(measured, 50)),
        p99_batch_ms=float(np.percentile(measured, 99)),
        strategies=", ".join(f"{s} x{c}" for s, c in strategies.most_common()) or "-",
        oracle_txn_per_s=counted / oracle_seconds if oracle_seconds > 0 else 0.0,
        identical_to_oracle=difference is None,
        difference=difference,
        final_accounts=accounts.num_rows,
        final_total_balance=int(accounts.column("balance").to_numpy().sum()),
    )

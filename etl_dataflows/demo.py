"""The engine demo: a generated ledger workload run through an executor, with a short report.

It is the main job until the TPC-DI job exists (``streamdi demo``). The report gives the batches,
transactions, commits, aborts, dead letters, throughput and per-batch latency; it is a
demonstration, not a benchmark (the benchmarks live in ``benchmarks/``).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from etl_dataflows.executors import create_executor
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
    final_accounts: int
    final_total_balance: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def render(self) -> str:
        lines = [
            f"streamdi engine demo — executor {self.executor}",
            f"  batches           {self.batches}",
            f"  transactions      {self.transactions:,}",
            f"  committed         {self.committed:,}",
            f"  aborted           {self.aborted:,} (conditions and errors)",
            f"  dead letters      {self.dead_letters:,}",
            f"  wall time         {self.seconds:.2f} s",
            f"  throughput        {self.txn_per_s:,.0f} transactions/s",
            f"  batch latency     p50 {self.p50_batch_ms:.1f} ms, p99 {self.p99_batch_ms:.1f} ms",
            f"  final accounts    {self.final_accounts:,}",
            f"  total balance     {self.final_total_balance:,}",
        ]
        return "\n".join(lines)


def run_demo(spec: WorkloadSpec, executor: str = "serial") -> DemoReport:
    """Generate the ledger workload for ``spec`` and run it through ``executor``."""
    workload = ledger_workload(spec)
    runner = create_executor(executor, workload.flow, workload.state)
    latencies = []
    committed = aborted = dead = transactions = 0
    started = time.perf_counter()
    try:
        for batch in workload.batches:
            t0 = time.perf_counter()
            result = runner.run_batch(batch)
            latencies.append((time.perf_counter() - t0) * 1000)
            transactions += batch.num_events
            committed += result.committed
            aborted += result.aborted
            dead += result.dead_letters.num_rows
        seconds = time.perf_counter() - started
        accounts = runner.state_image().tables["accounts"]
    finally:
        runner.close()
    balances = accounts.column("balance").to_numpy()
    return DemoReport(
        executor=executor,
        batches=len(workload.batches),
        transactions=transactions,
        committed=committed,
        aborted=aborted,
        dead_letters=dead,
        seconds=seconds,
        txn_per_s=transactions / seconds if seconds > 0 else 0.0,
        p50_batch_ms=float(np.percentile(latencies, 50)),
        p99_batch_ms=float(np.percentile(latencies, 99)),
        final_accounts=accounts.num_rows,
        final_total_balance=int(balances.sum()),
    )

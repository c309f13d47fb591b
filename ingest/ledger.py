"""A ledger-like event stream for the ingest crash tests and benchmarks, generated vectorized.

It feeds :func:`etl_dataflows.testing.workload.ledger_dataflow` (source ``txns``): first one
``open`` per account (so balances exist), then deposits, transfers, adjustments and audits over
Zipf-skewed keys, with a few aborting transfers. Event times increase by 1 µs per event.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from ingest.sources import DelimitedFileSource

LEDGER_COLUMNS = {
    "kind": "string",
    "src": "int64",
    "dst": "int64",
    "amount": "int64",
    "amount2": "int64",
    "ts": "int64",
}


def ledger_events(n: int, *, keys: int = 1_000, theta: float = 0.6, seed: int = 0) -> pa.Table:
    """``keys`` opens followed by ``n - keys`` ledger transactions (``n`` events in all)."""
    rng = np.random.default_rng(seed)
    opens = min(keys, n)
    rest = n - opens
    weights = 1.0 / np.power(np.arange(1, keys + 1, dtype=np.float64), theta)
    cdf = np.cumsum(weights / weights.sum())
    perm = rng.permutation(keys)

    def pick(size: int) -> np.ndarray:
        ranks = np.minimum(np.searchsorted(cdf, rng.random(size)), keys - 1)
        picked: np.ndarray = perm[ranks]
        return picked

    choice = rng.random(rest)
    kinds = np.where(
        choice < 0.45,
        "deposit",
        np.where(choice < 0.90, "transfer", np.where(choice < 0.97, "adjust", "audit")),
    )
    src = pick(rest)
    dst = pick(rest)
    amount = rng.integers(1, 100, rest)
    amount = np.where(amount == 13, 14, amount)
    amount = np.where(rng.random(rest) < 0.01, 10**12, amount)  # a few aborting amounts
    amount2 = rng.integers(1, 200, rest)
    kind = np.concatenate([np.full(opens, "open"), kinds])
    src_all = np.concatenate([np.arange(opens), src])
    dst_all = np.concatenate([np.zeros(opens, dtype=np.int64), dst])
    dst_valid = np.concatenate([np.zeros(opens, bool), np.isin(kinds, ["transfer", "audit"])])
    amt = np.concatenate([np.full(opens, 1_000), amount])
    amt_valid = np.concatenate([np.ones(opens, bool), kinds != "audit"])
    amt2_valid = np.concatenate([np.zeros(opens, bool), kinds == "adjust"])
    amt2 = np.concatenate([np.zeros(opens, dtype=np.int64), amount2])
    return pa.table(
        {
            "kind": pa.array(kind.astype(str)),
            "src": pa.array(src_all, pa.int64()),
            "dst": pa.array(dst_all, pa.int64(), mask=~dst_valid),
            "amount": pa.array(amt, pa.int64(), mask=~amt_valid),
            "amount2": pa.array(amt2, pa.int64(), mask=~amt2_valid),
            "ts": pa.array(np.arange(1, n + 1, dtype=np.int64) * 1_000, pa.int64()),
        }
    )


def write_ledger_file(path: Path, events: pa.Table) -> None:
    """Write ``events`` as a pipe-delimited file (nulls as empty fields)."""
    columns = [
        [("" if v is None else str(v)) for v in events.column(name).to_pylist()]
        for name in events.column_names
    ]
    with Path(path).open("w", encoding="utf-8") as handle:
        for row in zip(*columns, strict=True):
            handle.write("|".join(row) + "\n")


def ledger_file_source(path: Path) -> DelimitedFileSource:
    """The pipe-delimited ledger file as a source with event time from its ``ts`` column."""
    return DelimitedFileSource(path, LEDGER_COLUMNS, delimiter="|", timestamp="ts")

"""A generated ledger workload for engine tests: every operation kind, with knobs for skew,
cross-key transactions, aborts, key cycles and several operations on one key.

The dataflow (:func:`ledger_dataflow`) keeps ``accounts`` (with a surrogate key) and ``book``
(asset book entries, as in Streaming Ledger) and runs one transactional step whose event ``kind``
selects the operations:

============  ==================================================================================
``deposit``   ``accounts[src] += amount + bonus(amount)`` (a Python function; it raises for 13)
              and ``book[src] += amount`` (created if missing)
``transfer``  debit ``accounts[src]`` and ``book[src]`` (each must cover the amount), credit
              ``accounts[dst]`` and ``book[dst]`` — a cross-key transaction with conditions
``adjust``    ``accounts[src] += amount`` then ``accounts[src] -= amount2`` (must stay >= 0):
              two operations on one key, the second's condition depending on the first
``open``      insert ``accounts[src]`` with a new surrogate key (aborts if the key exists), funded
              from ``dst`` when given (aborts if ``dst`` cannot cover it, after the key was drawn)
``close``     move ``accounts[src]``'s balance to ``dst`` and delete ``src``
``audit``     read two accounts and emit the sum (read-only, cross-key)
============  ==================================================================================

Every transaction then reads ``src`` and ``dst`` again and emits the balances it leaves.

Knobs (:class:`WorkloadSpec`): ``theta`` (Zipf skew of keys, 0 = uniform), ``cross_key_ratio``
(share of transfers among deposit/transfer transactions), ``abort_ratio`` (share of transactions
given an amount no balance covers), ``cycle_ratio`` (share of transfers arranged in key cycles
A→B→…→A), ``same_key_ratio`` (share of ``adjust`` transactions; also self-transfers),
``insert_delete_ratio`` (share of open/close), ``read_ratio`` (share of audits), ``error_ratio``
(share of bad events: a null key or the amount 13), ``disorder`` (share of events arriving out of
timestamp order), ``ties`` (share of events sharing the previous event's timestamp).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from etl_dataflows.batch import EngineBatch
from etl_dataflows.dataflow import Dataflow
from etl_dataflows.expressions import coalesce, col, old, udf
from etl_dataflows.state import StateImage, rows_to_table
from etl_dataflows.testing.harness import make_batch

ABORTING_AMOUNT = 10**12


@dataclass(frozen=True)
class WorkloadSpec:
    """Knobs of the generated ledger workload (see the module docstring)."""

    keys: int = 1_000
    theta: float = 0.6
    cross_key_ratio: float = 0.5
    abort_ratio: float = 0.01
    cycle_ratio: float = 0.0
    same_key_ratio: float = 0.05
    insert_delete_ratio: float = 0.02
    read_ratio: float = 0.02
    error_ratio: float = 0.0
    disorder: float = 0.0
    ties: float = 0.0
    batch_size: int = 1_000
    batches: int = 3
    initial_balance: int = 1_000
    seed: int = 0

    def __post_init__(self) -> None:
        ratios = (
            *("theta", "cross_key_ratio", "abort_ratio", "cycle_ratio", "same_key_ratio"),
            *("insert_delete_ratio", "read_ratio", "error_ratio", "disorder", "ties"),
        )
        for name in ratios:
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], got {value}")
        if self.keys < 2 or self.batch_size < 1 or self.batches < 1:
            raise ValueError("keys >= 2, batch_size >= 1 and batches >= 1 are required")
        special = (
            self.same_key_ratio + self.insert_delete_ratio + self.read_ratio + self.error_ratio
        )
        if special > 1.0:
            raise ValueError("same_key + insert_delete + read + error ratios exceed 1")


def bonus(amount: int | None) -> int | None:
    """The deposit bonus: a tenth of the amount; raises for the unlucky amount 13."""
    if amount is None:
        return None
    if amount == 13:
        raise ValueError("unlucky amount 13")
    return amount // 10


def ledger_dataflow() -> Dataflow:
    """The ledger dataflow of the module docstring."""
    flow = Dataflow("ledger")
    accounts = flow.table(
        "accounts",
        key={"id": "int64"},
        columns={"balance": "int64"},
        surrogate="sk",
        defaults={"balance": 0},
    )
    book = flow.table(
        "book", key={"id": "int64"}, columns={"balance": "int64"}, defaults={"balance": 0}
    )
    flow.source(
        "txns",
        schema={
            "kind": "string",
            "src": "int64",
            "dst": "int64",
            "amount": "int64",
            "amount2": "int64",
        },
    )
    kind = col("kind")
    t = flow.transact("ledger")
    dep = t.update(
        accounts,
        "src",
        set={
            "balance": old("balance") + col("amount") + udf(bonus, col("amount"), returns="int64")
        },
        when=kind == "deposit",
    )
    t.update(
        book,
        "src",
        set={"balance": old("balance") + col("amount")},
        if_missing="insert",
        when=kind == "deposit",
    )
    debit = t.update(
        accounts,
        "src",
        set={"balance": old("balance") - col("amount")},
        require=(old("balance") >= col("amount"), "insufficient funds"),
        when=kind == "transfer",
    )
    t.update(
        book,
        "src",
        set={"balance": old("balance") - col("amount")},
        if_missing="insert",
        require=(old("balance") >= col("amount"), "insufficient book balance"),
        when=kind == "transfer",
    )
    t.update(
        accounts, "dst", set={"balance": old("balance") + col("amount")}, when=kind == "transfer"
    )
    t.update(
        book,
        "dst",
        set={"balance": old("balance") + col("amount")},
        if_missing="insert",
        when=kind == "transfer",
    )
    t.update(
        accounts, "src", set={"balance": old("balance") + col("amount")}, when=kind == "adjust"
    )
    down = t.update(
        accounts,
        "src",
        set={"balance": old("balance") - col("amount2")},
        require=(old("balance") >= col("amount2"), "adjustment below zero"),
        when=kind == "adjust",
    )
    opened = t.insert(accounts, "src", {"balance": col("amount")}, when=kind == "open")
    t.update(
        accounts,
        "dst",
        set={"balance": old("balance") - col("amount")},
        require=(old("balance") >= col("amount"), "funding account short"),
        when=(kind == "open") & col("dst").not_null(),
    )
    closing = t.read(accounts, "src", if_missing="abort", when=kind == "close")
    t.update(
        accounts,
        "dst",
        set={"balance": old("balance") + closing["balance"]},
        require=(col("src") != col("dst"), "cannot close into itself"),
        when=kind == "close",
    )
    t.delete(accounts, "src", when=kind == "close")
    a = t.read(accounts, "src", when=kind == "audit")
    b = t.read(accounts, "dst", when=kind == "audit")
    src_now = t.read(accounts, "src", when=kind != "close")
    dst_now = t.read(accounts, "dst", when=kind.isin(["transfer", "close", "audit"]))
    t.emit(
        kind=kind,
        src_balance=src_now["balance"],
        dst_balance=dst_now["balance"],
        audit_total=a["balance"] + b["balance"],
        new_sk=opened["sk"],
        touched=coalesce(dep["balance"], debit["balance"], down["balance"]),
    )
    flow.sink("balances")
    return flow


def initial_state(spec: WorkloadSpec) -> StateImage:
    """Accounts ``0..keys-1`` with the initial balance in both tables."""
    flow = ledger_dataflow().build()
    accounts = [{"id": i, "sk": i + 1, "balance": spec.initial_balance} for i in range(spec.keys)]
    book = [{"id": i, "balance": spec.initial_balance} for i in range(spec.keys)]
    return StateImage(
        {
            "accounts": rows_to_table(flow.tables["accounts"], accounts),
            "book": rows_to_table(flow.tables["book"], book),
        },
        {"accounts": spec.keys + 1, "book": 1},
    )


def zipf_probabilities(n: int, theta: float) -> np.ndarray:
    """P(rank i) ∝ 1 / i**theta over ``n`` ranks (theta = 0 is uniform)."""
    weights = 1.0 / np.power(np.arange(1, n + 1, dtype=np.float64), theta)
    result: np.ndarray = weights / weights.sum()
    return result


def _events(
    spec: WorkloadSpec, rng: np.random.Generator, batch_index: int, next_new: list[int]
) -> list[dict[str, Any]]:
    n = spec.batch_size
    order = rng.permutation(spec.keys)
    probabilities = zipf_probabilities(spec.keys, spec.theta)

    def key() -> int:
        # Now and then an account opened earlier in the workload (it may exist or be closed).
        if next_new[0] and rng.random() < 0.05:
            return spec.keys + int(rng.integers(0, next_new[0]))
        return int(order[rng.choice(spec.keys, p=probabilities)])

    rows: list[dict[str, Any]] = []
    while len(rows) < n:
        r = rng.random()
        edges = np.cumsum(
            [spec.insert_delete_ratio, spec.same_key_ratio, spec.read_ratio, spec.error_ratio]
        )
        amount = int(rng.integers(1, 100))
        if r < edges[0]:
            if rng.random() < 0.5:
                new_id = key() if rng.random() < 0.2 else spec.keys + next_new[0]
                next_new[0] += 1
                funder = key() if rng.random() < 0.5 else None
                rows.append(
                    {
                        "kind": "open",
                        "src": new_id,
                        "dst": funder,
                        "amount": amount * 20,
                        "amount2": None,
                    }
                )

            else:
                rows.append(
                    {"kind": "close", "src": key(), "dst": key(), "amount": None, "amount2": None}
                )
        elif r < edges[1]:
            rows.append(
                {
                    "kind": "adjust",
                    "src": key(),
                    "dst": None,
                    "amount": amount,
                    "amount2": int(rng.integers(1, 200)),
                }
            )
        elif r < edges[2]:
            rows.append(
                {"kind": "audit", "src": key(), "dst": key(), "amount": None, "amount2": None}
            )
        elif r < edges[3]:
            if rng.random() < 0.5:
                rows.append(
                    {"kind": "deposit", "src": None, "dst": None, "amount": amount, "amount2": None}
                )
            else:
                rows.append(
                    {"kind": "deposit", "src": key(), "dst": None, "amount": 13, "amount2": None}
                )
        elif rng.random() < spec.cross_key_ratio:
            if rng.random() < spec.cycle_ratio:
                length = int(rng.integers(2, 5))
                ring = [key() for _ in range(length)]
                for i in range(length):
                    rows.append(
                        {
                            "kind": "transfer",
                            "src": ring[i],
                            "dst": ring[(i + 1) % length],
                            "amount": amount,
                            "amount2": None,
                        }
                    )
            else:
                src = key()
                dst = src if rng.random() < spec.same_key_ratio else key()
                rows.append(
                    {"kind": "transfer", "src": src, "dst": dst, "amount": amount, "amount2": None}
                )
        else:
            amount = amount if amount != 13 else 14
            rows.append(
                {"kind": "deposit", "src": key(), "dst": None, "amount": amount, "amount2": None}
            )
    rows = rows[:n]
    for row in rows:
        if row["kind"] in ("deposit", "transfer", "adjust") and rng.random() < spec.abort_ratio:
            if row["kind"] == "adjust":
                row["amount2"] = ABORTING_AMOUNT
            else:
                row.update(kind="transfer", dst=key(), amount=ABORTING_AMOUNT)
            if row["src"] is None:
                row["src"] = key()
    base = batch_index * n * 4
    ts = base
    for i, row in enumerate(rows):
        if i > 0 and rng.random() < spec.ties:
            row["_ts"] = ts
        else:
            ts = base + i * 4
            row["_ts"] = ts
    if spec.disorder > 0:
        for i in range(n):
            if rng.random() < spec.disorder:
                j = int(rng.integers(0, n))
                rows[i], rows[j] = rows[j], rows[i]
    return rows


@dataclass
class LedgerWorkload:
    """A generated workload: the dataflow, its initial state and the batches."""

    flow: Dataflow
    state: StateImage
    batches: list[EngineBatch]
    spec: WorkloadSpec


def ledger_workload(spec: WorkloadSpec) -> LedgerWorkload:
    """Generate the ledger workload for ``spec`` (deterministic by ``spec.seed``)."""
    rng = np.random.default_rng(spec.seed)
    flow = ledger_dataflow()
    compiled = flow.build()
    next_new = [0]
    batches = []
    pos = 0
    for b in range(spec.batches):
        rows = _events(spec, rng, b, next_new)
        for row in rows:
            row["_pos"] = pos
            pos += 1
        batches.append(make_batch(compiled, b + 1, txns=rows))
    return LedgerWorkload(flow, initial_state(spec), batches, spec)

"""An independent, hand-written model of the generated ledger workload's semantics.

It shares no code with the engine: it applies each event of the ledger workload directly to dicts,
following the rules in ``etl_dataflows.testing.workload``'s docstring. The serial executor must
agree with it exactly; every other executor must agree with the serial executor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa


@dataclass
class ReferenceResult:
    outputs: list[dict[str, Any]] = field(default_factory=list)
    aborts: list[tuple[int, str]] = field(default_factory=list)  # (pos, kind)
    accounts: dict[int, tuple[int, int]] = field(default_factory=dict)  # id -> (sk, balance)
    book: dict[int, int] = field(default_factory=dict)
    next_sk: int = 1


class _Abort(Exception):
    def __init__(self, kind: str) -> None:
        self.kind = kind


def run_reference(
    accounts: pa.Table, book: pa.Table, next_sk: int, batches: list[pa.Table]
) -> ReferenceResult:
    result = ReferenceResult(
        accounts={r["id"]: (r["sk"], r["balance"]) for r in accounts.to_pylist()},
        book={r["id"]: r["balance"] for r in book.to_pylist()},
        next_sk=next_sk,
    )
    for events in batches:
        rows = events.to_pylist()
        for index in sorted(range(len(rows)), key=lambda i: (rows[i]["_ts"], i)):
            row = rows[index]
            acc, bk, sk = dict(result.accounts), dict(result.book), result.next_sk
            try:
                out, sk = _apply(row, acc, bk, sk)
            except _Abort as abort:
                result.aborts.append((row["_pos"], abort.kind))
                continue
            result.accounts, result.book, result.next_sk = acc, bk, sk
            result.outputs.append({**out, "_ts": row["_ts"], "_pos": row["_pos"], "_src": 0})
    return result


def _balance(acc: dict[int, tuple[int, int]], key: int | None) -> int | None:
    return None if key is None or key not in acc else acc[key][1]


def _apply(
    row: dict[str, Any], acc: dict[int, tuple[int, int]], bk: dict[int, int], sk: int
) -> tuple[dict[str, Any], int]:
    kind, src, dst, amount, amount2 = (
        row["kind"],
        row["src"],
        row["dst"],
        row["amount"],
        row["amount2"],
    )
    touched = None
    new_sk = None
    if kind == "deposit":
        if src is None:
            raise _Abort("error")
        if src not in acc:
            raise _Abort("condition")
        if amount == 13:
            raise _Abort("error")
        acc[src] = (acc[src][0], acc[src][1] + amount + amount // 10)
        touched = acc[src][1]
        bk[src] = bk.get(src, 0) + amount
    elif kind == "transfer":
        if src not in acc or acc[src][1] < amount:
            raise _Abort("condition")
        acc[src] = (acc[src][0], acc[src][1] - amount)
        touched = acc[src][1]
        if bk.get(src, 0) < amount:
            raise _Abort("condition")
        bk[src] = bk.get(src, 0) - amount
        if dst not in acc:
            raise _Abort("condition")
        acc[dst] = (acc[dst][0], acc[dst][1] + amount)
        bk[dst] = bk.get(dst, 0) + amount
    elif kind == "adjust":
        if src not in acc:
            raise _Abort("condition")
        acc[src] = (acc[src][0], acc[src][1] + amount)
        if acc[src][1] < amount2:
            raise _Abort("condition")
        acc[src] = (acc[src][0], acc[src][1] - amount2)
        touched = acc[src][1]
    elif kind == "open":
        if src in acc:
            raise _Abort("condition")
        acc[src] = (sk, amount)
        new_sk = sk
        sk += 1
        if dst is not None:
            if dst not in acc or acc[dst][1] < amount:
                raise _Abort("condition")
            acc[dst] = (acc[dst][0], acc[dst][1] - amount)
    elif kind == "close":
        if src not in acc or dst not in acc or src == dst:
            raise _Abort("condition")
        acc[dst] = (acc[dst][0], acc[dst][1] + acc[src][1])
        del acc[src]
    audit_total = None
    if kind == "audit":
        a, b = _balance(acc, src), _balance(acc, dst)
        audit_total = None if a is None or b is None else a + b
    src_balance = None if kind == "close" else _balance(acc, src)
    dst_balance = _balance(acc, dst) if kind in ("transfer", "close", "audit") else None
    out = {
        "kind": kind,
        "src_balance": src_balance,
        "dst_balance": dst_balance,
        "audit_total": audit_total,
        "new_sk": new_sk,
        "touched": touched,
    }
    return out, sk

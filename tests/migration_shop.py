"""A small dataflow with every kind of state for the migration tests, and a deterministic staging
file of it.

``shop``: ``customers`` is a history table (SCD type 2 by day, same-day changes in place),
``accounts`` a keyed table with a surrogate key, inserts, updates and deletes, ``prices`` an
event-time window whose old entries expire (deletes), and the sink ``activity`` one row per
committed transaction. Columns cover every engine type (int64, float64, bool, string, timestamp,
date), and strings include empty ones, quotes, commas and newlines (the COPY path must keep them).

With ``rejects=True``, :func:`stage_shop` also stages rejects: each batch gets two ``refund``
events, which the dataflow refuses (real aborts from the engine), and two dead letters (payloads
with quotes, commas, newlines, an empty string and a null), and from batch 4 on each batch replays
the first dead letter of the batch three before it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from etl_dataflows import Dataflow, col, create_executor, date_of, lit, old
from etl_dataflows.batch import EngineBatch
from etl_dataflows.testing.harness import events_table
from staging import BatchCommit, StagingStore, StreamProgress
from staging.layout import DEAD_LETTER_INPUT_SCHEMA

DAY = 86_400_000_000
NAMES = ["Ann", "", 'Bo "the" Bear', "Cy, Jr.", "line\nbreak", "Zoë"]
SYMBOLS = ["AAA", "BBB", "CCC", "DDD"]


def shop_dataflow() -> Dataflow:
    flow = Dataflow("shop")
    customers = flow.history_table(
        "customers",
        key={"cid": "int64"},
        columns={"name": "string", "tier": "int64"},
        surrogate="sk_customer",
    )
    accounts = flow.table(
        "accounts",
        key={"aid": "int64"},
        columns={"cid": "int64", "balance": "float64", "active": "bool", "opened": "date"},
        surrogate="sk_account",
        defaults={"balance": 0.0},
    )
    prices = flow.window_table(
        "prices",
        key={"symbol": "string"},
        columns={"price": "float64"},
        span=3 * DAY,
        aggregates={"high": ("max", "price")},
    )
    flow.source(
        "events",
        schema={
            "kind": "string",
            "cid": "int64",
            "aid": "int64",
            "name": "string",
            "tier": "int64",
            "amount": "float64",
            "symbol": "string",
            "price": "float64",
            "at": "timestamp",
        },
    )
    kind = col("kind")
    t = flow.transact("apply", input="events")
    t.write(customers, "cid", {"name": col("name"), "tier": col("tier")}, when=kind == "customer")
    t.insert(
        accounts,
        "aid",
        {
            "cid": col("cid"),
            "balance": col("amount"),
            "active": lit(True),
            "opened": date_of(col("at")),
        },
        if_exists="skip",
        when=kind == "open",
    )
    t.update(
        accounts,
        "aid",
        set={"balance": old("balance") + col("amount")},
        if_missing="skip",
        when=kind == "deposit",
    )
    t.delete(accounts, "aid", if_missing="skip", when=kind == "close")
    # refunds are refused: the transaction aborts (only stage_shop(rejects=True) sends them)
    t.read(accounts, "aid", when=kind == "refund", require=(col("amount") < 0, "no refunds"))
    w = t.window(prices, "symbol", {"price": col("price")}, when=kind == "price")
    t.emit(kind=kind, cid=col("cid"), aid=col("aid"), amount=col("amount"), high=w["high"])
    flow.sink("activity", input="apply")
    return flow


def shop_events(batch_id: int, n: int, seed: int = 7) -> list[dict[str, Any]]:
    """``n`` events of batch ``batch_id`` (half a day per batch), deterministic per seed."""
    rng = np.random.default_rng(seed * 100_003 + batch_id)
    kinds = rng.choice(
        ["customer", "open", "deposit", "close", "price"], size=n, p=[0.2, 0.2, 0.3, 0.05, 0.25]
    )
    base = batch_id * DAY // 2
    rows = []
    for i, kind in enumerate(kinds):
        ts = base + i * 1_000_000
        rows.append(
            {
                "kind": str(kind),
                "cid": int(rng.integers(0, 40)),
                "aid": int(rng.integers(0, 80)),
                "name": NAMES[int(rng.integers(0, len(NAMES)))],
                "tier": int(rng.integers(1, 4)),
                "amount": float(np.round(rng.random() * 100, 2)),
                "symbol": SYMBOLS[int(rng.integers(0, len(SYMBOLS)))],
                "price": float(np.round(rng.random() * 50 + 1, 3)),
                "at": ts,
                "_ts": ts,
            }
        )
    return rows


def shop_batch(batch_id: int, n: int, seed: int = 7, refunds: int = 0) -> EngineBatch:
    """Batch ``batch_id``: ``n`` events, then ``refunds`` refund events (each one aborts)."""
    flow = shop_dataflow().build()
    rows = shop_events(batch_id, n, seed)
    base = batch_id * DAY // 2 + n * 1_000_000
    for i in range(refunds):
        ts = base + i * 1_000_000
        rows.append({**rows[0], "kind": "refund", "aid": i, "amount": 5.0, "at": ts, "_ts": ts})
    return EngineBatch(batch_id, {"events": events_table(flow, "events", rows)})


def shop_dead_letters(batch_id: int) -> pa.Table:
    """The two dead letters :func:`stage_shop` stages with batch ``batch_id`` (with ``rejects``)."""
    odd = batch_id % 2 == 1
    return pa.Table.from_pylist(
        [
            {
                "batch_id": batch_id,
                "stream": "events",
                "step": "ingest",
                "topic": "shop.events",
                "partition": 0,
                "offset": batch_id * 10,
                "pos": batch_id * 100,
                "ts": batch_id * DAY // 2,
                "reason": f'late event, batch {batch_id}: "too old"',
                "payload": '{"kind": "open", "name": "Cy, Jr.\\nZoë"}',
                "encoding": "json",
                "payload_bytes": 42,
            },
            {
                "batch_id": batch_id,
                "stream": "events",
                "step": "apply",
                "topic": None,
                "partition": None,
                "offset": None,
                "pos": batch_id * 100 + 1,
                "ts": None,
                "reason": "bad value,\nline two",
                "payload": "" if odd else None,
                "encoding": "utf8" if odd else None,
                "payload_bytes": 0 if odd else None,
            },
        ],
        schema=DEAD_LETTER_INPUT_SCHEMA,
    )


def stage_shop(
    path: Path,
    batches: range,
    events: int = 200,
    seed: int = 7,
    *,
    per_commit: int = 1,
    recent_cache_bytes: int = 256 * 2**20,
    rejects: bool = False,
) -> StagingStore:
    """Run ``batches`` of the shop through the serial executor into staging at ``path`` (state
    resumed from the file), ``per_commit`` batches per staging transaction, and return the open
    store. ``rejects``: stage rejects too (see the module docstring; a replay names a dead letter
    already committed, so with ``per_commit`` above 3 some are left out)."""
    flow = shop_dataflow().build()
    store = StagingStore(path, flow, recent_cache_bytes=recent_cache_bytes)
    executor = create_executor("serial", flow, store.load_state())
    pending: list[BatchCommit] = []
    for batch_id in batches:
        result = executor.run_batch(shop_batch(batch_id, events, seed, 2 if rejects else 0))
        replayed: list[int] = []
        if rejects and batch_id > 3:
            earlier = store.query(
                "SELECT min(id) AS id FROM streamdi.dead_letters WHERE batch_id = ?",
                [batch_id - 3],
            ).column("id")[0]
            replayed = [earlier.as_py()] if earlier.is_valid else []
        pending.append(
            BatchCommit(
                batch_id=batch_id,
                result=result,
                dead_letters=shop_dead_letters(batch_id)
                if rejects
                else DEAD_LETTER_INPUT_SCHEMA.empty_table(),
                offsets={("shop.events", 0): batch_id},
                streams={"events": StreamProgress(batch_id, None, batch_id * events, -1)},
                events=events,
                records=1,
                arrived_at=time.time(),
                executed_ms=1.0,
                replayed=replayed,
            )
        )
        if len(pending) == per_commit or batch_id == batches[-1]:
            store.commit(pending)
            pending = []
    executor.close()
    return store


def staged_state(store: StagingStore) -> dict[str, pa.Table]:
    """Every state table of the store, as staged."""
    return store.load_state().tables

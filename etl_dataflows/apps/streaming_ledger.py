"""Streaming Ledger (SL): deposits and transfers between accounts and assets.

State: ``accounts`` and ``assets`` (``id -> balance``), every record starting at 1,000,000.
A *deposit* (2 operations) tops up one account and one asset. A *transfer* (4 operations) debits a
source account and a source asset — each must cover its amount, or the whole transfer aborts — and
credits a destination account and asset. Outputs: the balances the transaction leaves at the source
and destination. Aborting transfers ask for 10^8, more than any balance can hold here.

Knobs: ``transfer_ratio`` (extra, default 0.5), plus the common ones; with ``udf_cost_ns`` every
operation's update pays that much busy work.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from etl_dataflows.apps.common import (
    App,
    AppKnobs,
    ZipfKeys,
    event_table,
    key_values,
    timestamps,
)
from etl_dataflows.batch import EngineBatch
from etl_dataflows.dataflow import Dataflow
from etl_dataflows.expressions import Expr, col, cost, old
from etl_dataflows.state import StateImage, rows_to_table

START_BALANCE = 1_000_000
ABORTING_AMOUNT = 100_000_000


def dataflow(knobs: AppKnobs) -> Dataflow:
    flow = Dataflow("streaming_ledger")
    accounts = flow.table("accounts", key={"id": "int64"}, columns={"balance": "int64"})
    assets = flow.table("assets", key={"id": "int64"}, columns={"balance": "int64"})
    flow.source(
        "events",
        schema={
            "transfer": "bool",
            "account": "int64",
            "asset": "int64",
            "to_account": "int64",
            "to_asset": "int64",
            "amount": "int64",
        },
    )

    def paid(expr: Expr) -> Expr:
        return cost(expr, knobs.udf_cost_ns) if knobs.udf_cost_ns else expr

    is_transfer, is_deposit = col("transfer"), ~col("transfer")
    amount = col("amount")
    t = flow.transact("ledger")
    deposit = t.update(
        accounts, "account", set={"balance": paid(old("balance") + amount)}, when=is_deposit
    )
    t.update(assets, "asset", set={"balance": paid(old("balance") + amount)}, when=is_deposit)
    debit = t.update(
        accounts,
        "account",
        set={"balance": paid(old("balance") - amount)},
        require=(old("balance") >= amount, "insufficient account balance"),
        when=is_transfer,
    )
    t.update(
        assets,
        "asset",
        set={"balance": paid(old("balance") - amount)},
        require=(old("balance") >= amount, "insufficient asset balance"),
        when=is_transfer,
    )
    credit = t.update(
        accounts, "to_account", set={"balance": paid(old("balance") + amount)}, when=is_transfer
    )
    t.update(assets, "to_asset", set={"balance": paid(old("balance") + amount)}, when=is_transfer)
    from etl_dataflows.expressions import coalesce

    t.emit(
        source_balance=coalesce(debit["balance"], deposit["balance"]),
        destination_balance=credit["balance"],
    )
    flow.sink("balances")
    return flow


def initial_state(knobs: AppKnobs) -> StateImage:
    flow = dataflow(knobs).build()
    ids = pa.array(key_values(knobs.keys, knobs.key_layout))
    balances = pa.array(np.full(knobs.keys, START_BALANCE, dtype=np.int64))
    tables = {}
    for name in ("accounts", "assets"):
        data = pa.table({"id": ids, "balance": balances})
        tables[name] = data.cast(rows_to_table(flow.tables[name], []).schema)
    return StateImage(tables, {"accounts": 1, "assets": 1})


def batches(knobs: AppKnobs) -> list[EngineBatch]:
    rng = np.random.default_rng(knobs.seed)
    keys = ZipfKeys(knobs.keys, knobs.theta, rng, knobs.key_layout)
    transfer_ratio = knobs.knob("transfer_ratio", 0.5)
    out = []
    for b in range(knobs.batches):
        n = knobs.batch_size
        transfer = rng.random(n) < transfer_ratio
        account, asset = keys.draw(n), keys.draw(n)
        to_account, to_asset = keys.draw(n), keys.draw(n)
        if knobs.multi_partition_ratio is not None:
            p = knobs.partitions
            home = account % p
            cross = rng.random(n) < knobs.multi_partition_ratio
            other = np.where(cross, (home + 1 + rng.integers(0, max(p - 1, 1), n)) % p, home)
            asset = keys.draw_in_partition(home, p)
            to_account = keys.draw_in_partition(other, p)
            to_asset = keys.draw_in_partition(other, p)
        amount = rng.integers(1, 1_000, n)
        aborting = rng.random(n) < knobs.abort_ratio
        transfer |= aborting
        amount = np.where(aborting, ABORTING_AMOUNT, amount)
        ts, pos = timestamps(b, n)
        columns = {
            "transfer": transfer,
            "account": account,
            "asset": asset,
            "to_account": to_account,
            "to_asset": to_asset,
            "amount": amount.astype(np.int64),
        }
        out.append(EngineBatch(b + 1, {"events": event_table(columns, ts, pos)}))
    return out


def operations(batch: EngineBatch) -> int:
    transfers = int(
        np.count_nonzero(batch.inputs["events"].column("transfer").to_numpy(zero_copy_only=False))
    )
    return 4 * transfers + 2 * (batch.num_events - transfers)


APP = App(
    name="sl",
    title="Streaming Ledger",
    dataflow=dataflow,
    initial_state=initial_state,
    batches=batches,
    operations=operations,
    defaults={"transfer_ratio": 0.5},
)

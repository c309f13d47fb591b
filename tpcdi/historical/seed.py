"""The incremental dataflow's starting state after the historical load (what
:meth:`staging.store.StagingStore.seed` loads): the working set of every state table and the
sequences past every surrogate key the warehouse holds."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from etl_dataflows.dataflow import CompiledDataflow
from etl_dataflows.state import StateImage, image_schema
from tpcdi.historical import sql_dims
from tpcdi.historical.inputs import HistoricalInputs


def seed_state(
    flow: CompiledDataflow,
    tables: dict[str, pa.Table],
    window_seed: pa.Table,
    inputs: HistoricalInputs,
) -> StateImage:
    """The incremental dataflow's state after the historical load: the working set of every
    state table (what later batches can read or change) and the sequences past every surrogate
    key the warehouse holds."""
    image = StateImage()
    tables = dict(tables)
    for name in ("dimtrade", "factcashbalances", "factwatches"):
        if name not in tables:
            tables[name] = image_schema(flow.tables[name]).empty_table()

    def current(name: str) -> pa.Table:
        return tables[name].filter(tables[name]["iscurrent"])

    def put(name: str, rows: pa.Table) -> None:
        schema = image_schema(flow.tables[name])
        image.tables[name] = rows.select(schema.names).cast(schema)

    for name, surrogate in (
        ("dimcustomer", "sk_customerid"),
        ("dimaccount", "sk_accountid"),
        ("dimsecurity", "sk_securityid"),
        ("dimbroker", "sk_brokerid"),
    ):
        put(name, current(name))
        top = pc.max(tables[name][surrogate]).as_py() or 0
        image.sequences[name] = int(top) + 1
    trades = tables["dimtrade"]
    open_trades = pc.invert(
        pc.fill_null(
            pc.is_in(trades["status"], value_set=pa.array(["Completed", "Canceled"])), False
        )
    )
    put("dimtrade", trades.filter(open_trades))
    put("factcashbalances", tables["factcashbalances"].slice(0, 0))
    watches = tables["factwatches"]
    put("factwatches", watches.filter(pc.is_null(watches["sk_dateid_dateremoved"])))
    put("prospect", tables["prospect"])
    cash = tables["factcashbalances"]
    last_cash = pa.table(
        {"accountid": cash["accountid"], "sk_dateid": cash["sk_dateid"], "cash": cash["cash"]}
    ).sort_by([("accountid", "ascending"), ("sk_dateid", "descending")])
    accounts = last_cash["accountid"].combine_chunks()
    previous = pa.concat_arrays([pa.array([None], pa.int64()), accounts[:-1]])
    # the newest row of each account (the first of its run); none at all without cash rows
    first = pc.fill_null(pc.not_equal(accounts, previous[: len(accounts)]), True)
    put("aux_cash", last_cash.filter(first).select(["accountid", "cash"]))
    customers = current("dimcustomer").filter(pc.is_valid(current("dimcustomer")["matchkey"]))
    matches = customers.group_by("matchkey").aggregate([("customerid", "max"), ("status", "list")])
    active = pa.array(
        [
            sum(1 for s in statuses if s == "Active")
            for statuses in matches["status_list"].to_pylist()
        ],
        pa.int64(),
    )
    put(
        "aux_customer_match",
        pa.table(
            {
                "matchkey": matches["matchkey"],
                "customerid": matches["customerid_max"],
                "active": active,
            }
        ),
    )
    prospects = tables["prospect"].filter(pc.is_valid(tables["prospect"]["matchkey"]))
    # the last prospect of the file per key (the order the incremental steps apply them in)
    ordered = prospects.append_column("_order", pa.array(range(prospects.num_rows), pa.int64()))
    latest = ordered.group_by("matchkey").aggregate([("_order", "max")])
    chosen = ordered.take(latest["_order_max"])
    put(
        "aux_prospect_match",
        chosen.select(["matchkey", "agencyid", "creditrating", "networth", "marketingnameplate"]),
    )
    n = window_seed.num_rows
    put(
        "aux_market_window",
        pa.table(
            {
                "symbol": window_seed["symbol"],
                "_entry": pa.array(range(1, n + 1), pa.int64()),
                "_at": pc.multiply(pc.cast(window_seed["dn"], pa.int64()), sql_dims.DAY_US),
                "high": window_seed["high"],
                "low": window_seed["low"],
            }
        ),
    )
    image.sequences["aux_market_window"] = n + 1
    return image

"""Checks of a staging area against its own answer keys and the specification's data rules.

:func:`recount` recomputes, from the source files alone, every answer-key value whose meaning the
files determine, so a data set (DIGen's or streamdi's) can be compared with its ``*_audit.csv``.
:func:`rule_violations` lists breaks of the rules a warehouse load relies on (clause 4.4.3.4:
"the Source Data is self-consistent"): references to customers, accounts, securities and
companies that do not exist yet, holdings of trades that did not complete, watches cancelled
before they were placed, prices outside the day's range, CDC sequence numbers that go down.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from tpcdi.readers import BatchData, read_batch, read_batch_date, read_file, staging_batches
from tpcdi.readers.finwire import finwire_files, read_finwire

Key = tuple[str, int, str]


def _count(mask: pa.Array | np.ndarray) -> int:
    return int(np.count_nonzero(np.asarray(mask)))


def _invalid_fees(trades: pa.Table) -> tuple[int, int]:
    done = trades.filter(pc.equal(trades["T_ST_ID"], "CMPT")).to_pandas()
    value = done["T_QTY"] * done["T_TRADE_PRICE"]
    return _count(done["T_COMM"] > value + 1e-9), _count(done["T_CHRG"] > value + 1e-9)


def _bad_tier(tiers: pa.Array) -> int:
    values = np.asarray(pc.fill_null(tiers, 0))
    return _count((values < 1) | (values > 3))


def _hundred_years_before(value: datetime.date) -> datetime.date:
    try:
        return value.replace(year=value.year - 100)
    except ValueError:  # 29 February: the 28th, as the dataflow's rule does
        return value.replace(year=value.year - 100, day=28)


def _dob_out(dobs: pa.Array, batch_date: datetime.date) -> tuple[int, int]:
    days = np.asarray(pc.cast(dobs, pa.int32()))
    limit = (_hundred_years_before(batch_date) - datetime.date(1970, 1, 1)).days
    today = (batch_date - datetime.date(1970, 1, 1)).days
    return _count(days < limit), _count(days > today)


def recount(root: Path) -> dict[Key, int]:
    """Answer-key values recomputed from the files of a staging area (``Batch1``..``BatchN``:
    DIGen's three, or a daily feed's)."""
    root = Path(root)
    keys: dict[Key, int] = {}
    previous_agencies: pa.Array | None = None
    for batch in staging_batches(root):
        folder = root / f"Batch{batch}"
        data = read_batch(folder, batch=batch)
        files = data.files
        batch_date = read_batch_date(folder / "BatchDate.txt")
        trades = files["Trade.txt"].table
        comm, charge = _invalid_fees(trades)
        new = len(trades) if batch == 1 else _count(pc.equal(trades["CDC_FLAG"], "I"))
        keys |= {
            ("DimTrade", batch, "T_Records"): len(trades),
            ("DimTrade", batch, "T_NEW"): new,
            ("DimTrade", batch, "T_CanceledTrades"): _count(pc.equal(trades["T_ST_ID"], "CNCL")),
            ("DimTrade", batch, "T_InvalidCommision"): comm,
            ("DimTrade", batch, "T_InvalidCharge"): charge,
            ("FactHoldings", batch, "HH_RECORDS"): files["HoldingHistory.txt"].num_rows,
            ("DimTradeHistory", batch, "CT_Records"): files["CashTransaction.txt"].num_rows,
            ("FactMarketHistory", batch, "DM_RECORDS"): files["DailyMarket.txt"].num_rows,
            ("FactWatches", batch, "WH_RECORDS"): files["WatchHistory.txt"].num_rows,
            ("FactWatches", batch, "WH_ACTIVE"): _count(
                pc.equal(files["WatchHistory.txt"].table["W_ACTION"], "ACTV")
            ),
            ("Prospect", batch, "P_RECORDS"): files["Prospect.csv"].num_rows,
        }
        agencies = files["Prospect.csv"].table["AgencyID"]
        fresh = (
            len(agencies)
            if previous_agencies is None
            else _count(pc.invert(pc.is_in(agencies, value_set=previous_agencies)))
        )
        keys[("Prospect", batch, "P_NEW")] = fresh
        previous_agencies = agencies
        if batch == 1:
            keys |= _historical_keys(data, batch_date)
            for path in finwire_files(folder):
                fw = read_finwire([path])
                for kind, dataset in (
                    ("CMP", "DimCompany"),
                    ("SEC", "DimSecurity"),
                    ("FIN", "Financial"),
                ):
                    keys[(dataset, 1, f"FW_{kind}:{path.name}")] = fw[kind].num_rows
        else:
            keys |= _incremental_keys(data, batch, batch_date)
    return keys


def _historical_keys(data: BatchData, batch_date: datetime.date) -> dict[Key, int]:
    files = data.files
    hr = files["HR.csv"].table
    actions = files["CustomerMgmt.xml"].table
    per_action = actions.group_by(["action_seq", "ActionType"]).aggregate([])
    kinds = pd.Series(per_action["ActionType"].to_pylist()).value_counts()
    new = actions.filter(pc.equal(actions["ActionType"], "NEW"))
    old, young = _dob_out(new["C_DOB"], batch_date)
    history = files["TradeHistory.txt"].table.to_pandas()
    types = files["Trade.txt"].table.select(["T_ID", "T_TT_ID"]).to_pandas()
    history = history.merge(types, left_on="TH_T_ID", right_on="T_ID", how="left")
    return {
        ("DimBroker", 1, "HR_BROKERS"): _count(
            pc.fill_null(pc.equal(hr["EmployeeJobCode"], 314), False)
        ),
        ("DimCustomer", 1, "C_NEW"): int(kinds.get("NEW", 0)),
        ("DimCustomer", 1, "C_UPDCUST"): int(kinds.get("UPDCUST", 0)),
        ("DimCustomer", 1, "C_INACT"): int(kinds.get("INACT", 0)),
        ("DimCustomer", 1, "C_TIER_INV"): _bad_tier(new["C_TIER"]),
        ("DimCustomer", 1, "C_DOB_TO"): old,
        ("DimCustomer", 1, "C_DOB_TY"): young,
        ("DimAccount", 1, "CA_ADDACCT"): int(kinds.get("ADDACCT", 0)),
        ("DimAccount", 1, "CA_UPDACCT"): int(kinds.get("UPDACCT", 0)),
        ("DimAccount", 1, "CA_CLOSEACCT"): int(kinds.get("CLOSEACCT", 0)),
        ("DimTradeHistory", 1, "TH_Records"): len(history),
        ("DimTradeHistory", 1, "TH_TLBTrades"): _count(history["T_TT_ID"] == "TLB"),
        ("DimTradeHistory", 1, "TH_TLSTrades"): _count(history["T_TT_ID"] == "TLS"),
        ("DimTradeHistory", 1, "TH_TMBTrades"): _count(history["T_TT_ID"] == "TMB"),
        ("DimTradeHistory", 1, "TH_TMSTrades"): _count(history["T_TT_ID"] == "TMS"),
        ("DimTradeHistory", 1, "TH_CanceledLTrades"): _count(history["TH_ST_ID"] == "CNCL"),
    }


def _incremental_keys(data: BatchData, batch: int, batch_date: datetime.date) -> dict[Key, int]:
    customers = data.files["Customer.txt"].table
    accounts = data.files["Account.txt"].table
    old, young = _dob_out(customers["C_DOB"], batch_date)

    def rows(table: pa.Table, flag: str, status_column: str, status: str | None) -> int:
        mask = pc.equal(table["CDC_FLAG"], flag)
        if status is not None:
            mask = pc.and_(mask, pc.equal(table[status_column], status))
        return _count(mask)

    return {
        ("DimCustomer", batch, "C_NEW"): rows(customers, "I", "C_ST_ID", None),
        ("DimCustomer", batch, "C_UPDCUST"): rows(customers, "U", "C_ST_ID", "ACTV"),
        ("DimCustomer", batch, "C_INACT"): rows(customers, "U", "C_ST_ID", "INAC"),
        ("DimCustomer", batch, "C_TIER_INV"): _bad_tier(customers["C_TIER"]),
        ("DimCustomer", batch, "C_DOB_TO"): old,
        ("DimCustomer", batch, "C_DOB_TY"): young,
        ("DimAccount", batch, "CA_ADDACCT"): rows(accounts, "I", "CA_ST_ID", None),
        ("DimAccount", batch, "CA_UPDACCT"): rows(accounts, "U", "CA_ST_ID", "ACTV"),
        ("DimAccount", batch, "CA_CLOSEACCT"): rows(accounts, "U", "CA_ST_ID", "INAC"),
    }


def answer_keys(root: Path) -> dict[Key, int]:
    """The answer keys of a staging area in :func:`recount`'s form (FINWIRE keys per file)."""
    from tpcdi.readers import read_file

    keys: dict[Key, int] = {}
    for path in sorted(Path(root).rglob("*_audit.csv")):
        table = read_file(path).table
        for row in table.to_pylist():
            if row["Value"] is None:
                continue
            attribute = row["Attribute"]
            if attribute.startswith("FW_") and not attribute.endswith("_DUP"):
                attribute = f"{attribute}:{path.name[: -len('_audit.csv')]}"
            keys[(row["DataSet"], row["BatchID"], attribute)] = int(row["Value"])
    return keys


def mismatches(root: Path) -> dict[Key, tuple[int | None, int]]:
    """``{key: (answer key, recount)}`` for every recounted key whose answer differs."""
    expected = answer_keys(root)
    return {
        key: (expected.get(key), value)
        for key, value in recount(root).items()
        if expected.get(key) != value
    }


def _first_seen(frames: list[pd.DataFrame], key: str, ts: str) -> pd.Series:
    merged = pd.concat([f[[key, ts]] for f in frames], ignore_index=True)
    return merged.groupby(key)[ts].min()


def _late(reference: pd.Series, frame: pd.DataFrame, key: str, ts: str) -> int:
    """Rows of ``frame`` whose ``key`` is unknown or first seen after the row's ``ts``."""
    seen = frame[key].map(reference)
    return _count(seen.isna() | (seen > frame[ts]))


def _incremental_frames(folder: Path, batch: int) -> dict[str, pd.DataFrame]:
    """The files of an incremental batch the rules look at (not Prospect.csv: a long feed would
    hold every day's full prospect list)."""
    names = (
        "Customer.txt", "Account.txt", "Trade.txt", "CashTransaction.txt", "HoldingHistory.txt",
        "DailyMarket.txt", "WatchHistory.txt",
    )  # fmt: skip
    return {n: read_file(folder / n, batch=batch).table.to_pandas() for n in names}


def rule_violations(root: Path) -> dict[str, int]:
    """``{rule: number of violating records}`` for the rules the data must keep (empty = none).

    Batch1 is read whole; the incremental batches one at a time, in order, each checked
    against what the batches before it created (a daily feed of any length)."""
    root = Path(root)
    batches = staging_batches(root)
    historical = read_batch(root / "Batch1", batch=1)
    frames1 = {n: r.table.to_pandas() for n, r in historical.files.items()}
    fw = historical.finwire
    assert fw is not None
    problems: dict[str, int] = {}

    def note(rule: str, count: int) -> None:
        if count:
            problems[rule] = problems.get(rule, 0) + count

    cmp_, sec, fin = (fw[k].to_pandas() for k in ("CMP", "SEC", "FIN"))
    company_by_cik = cmp_.groupby("CIK")["PTS"].min()
    company_by_name = cmp_.groupby("CompanyName")["PTS"].min()
    for name, table in (("SEC", sec), ("FIN", fin)):
        seen = table["CoCIK"].map(company_by_cik).fillna(table["CoName"].map(company_by_name))
        note(
            f"FINWIRE {name} names a company before its first CMP",
            _count(seen.isna() | (seen > table["PTS"])),
        )
    note(
        "FINWIRE two FIN records for one company and quarter",
        _count(fin.duplicated(["CoNameOrCIK", "Year", "Quarter"])),
    )
    eps = (fin["Earnings"] / fin["ShOut"]).round(2) - fin["EPS"]
    note("FINWIRE EPS inconsistent with earnings", _count(eps.abs() > 0.4))
    symbol_seen = sec.groupby("Symbol")["PTS"].min()

    actions = frames1["CustomerMgmt.xml"]
    customer_seen = actions[actions["ActionType"] == "NEW"].groupby("C_ID")["ActionTS"].min()
    note(
        "CustomerMgmt action before its customer's NEW",
        _late(customer_seen, actions, "C_ID", "ActionTS"),
    )
    opened = actions[actions["ActionType"].isin(["NEW", "ADDACCT"])]
    account_seen = opened.groupby("CA_ID")["ActionTS"].min()
    changed = actions[actions["ActionType"].isin(["UPDACCT", "CLOSEACCT"])]
    note(
        "CustomerMgmt account action before the account exists",
        _late(account_seen, changed, "CA_ID", "ActionTS"),
    )
    rows = actions[actions["ActionType"].isin(["NEW", "UPDCUST", "INACT"])].drop_duplicates(
        "action_seq"
    )
    note(
        "CustomerMgmt two customer changes on one day",
        _count(rows.assign(day=rows["ActionTS"].dt.date).duplicated(["C_ID", "day"])),
    )

    def market_rules(b: int, dm: pd.DataFrame) -> None:
        note(
            f"Batch{b} DailyMarket low <= close <= high broken",
            _count((dm["DM_LOW"] > dm["DM_CLOSE"]) | (dm["DM_CLOSE"] > dm["DM_HIGH"])),
        )
        seen = dm["DM_S_SYMB"].map(symbol_seen).dt.normalize()
        note(
            f"Batch{b} DailyMarket before the security exists",
            _count(seen.isna() | (seen > pd.to_datetime(dm["DM_DATE"]))),
        )

    # trades: the first event of each trade, from TradeHistory and then the daily files
    first_events = [
        frames1["TradeHistory.txt"].rename(columns={"TH_T_ID": "T_ID", "TH_DTS": "T_DTS"})
    ]
    trade_rows = [frames1["Trade.txt"]]
    holdings = [(1, frames1["HoldingHistory.txt"], frames1["Trade.txt"])]
    watches = [frames1["WatchHistory.txt"]]
    market_rules(1, frames1["DailyMarket.txt"])
    del frames1, historical
    for b in batches[1:]:
        folder = root / f"Batch{b}"
        start = pd.Timestamp(read_batch_date(folder / "BatchDate.txt"))
        frames = _incremental_frames(folder, b)
        cust, acct = frames["Customer.txt"], frames["Account.txt"]
        note(
            f"Batch{b} Customer.txt U of an unknown customer",
            _count((cust["CDC_FLAG"] == "U") & ~cust["C_ID"].isin(customer_seen.index)),
        )
        new_c = cust[cust["CDC_FLAG"] == "I"]
        customer_seen = pd.concat([customer_seen, pd.Series(start, index=new_c["C_ID"])])
        note(
            f"Batch{b} Account.txt of an unknown customer",
            _count(~acct["CA_C_ID"].isin(customer_seen.index)),
        )
        note(
            f"Batch{b} Account.txt U of an unknown account",
            _count((acct["CDC_FLAG"] == "U") & ~acct["CA_ID"].isin(account_seen.index)),
        )
        new_a = acct[acct["CDC_FLAG"] == "I"]
        account_seen = pd.concat([account_seen, pd.Series(start, index=new_a["CA_ID"])])
        for name, table in frames.items():
            if "CDC_DSN" in table and len(table) > 1:
                note(
                    f"Batch{b} {name} CDC_DSN not increasing",
                    _count(np.diff(table["CDC_DSN"].to_numpy()) <= 0),
                )
        trades = frames["Trade.txt"]
        first_events.append(trades[["T_ID", "T_DTS"]])
        trade_rows.append(trades.drop(columns=["CDC_FLAG", "CDC_DSN"]))
        holdings.append((b, frames["HoldingHistory.txt"], trades))
        watches.append(frames["WatchHistory.txt"])
        market_rules(b, frames["DailyMarket.txt"])

    trade_first = _first_seen(first_events, "T_ID", "T_DTS")
    every_trade = pd.concat(
        [t.drop(columns=["CDC_FLAG", "CDC_DSN"], errors="ignore") for t in trade_rows]
    )
    every_trade = every_trade.drop_duplicates("T_ID").assign(
        first=lambda t: t["T_ID"].map(trade_first)
    )
    note(
        "Trade on an account that does not exist yet",
        _late(account_seen, every_trade, "T_CA_ID", "first"),
    )
    note(
        "Trade of a security that does not exist yet",
        _late(symbol_seen, every_trade, "T_S_SYMB", "first"),
    )
    for b, hh, trades in holdings:
        done = set(trades.loc[trades["T_ST_ID"] == "CMPT", "T_ID"])
        note(
            f"Batch{b} holding of a trade not completed in the batch",
            _count(~hh["HH_T_ID"].isin(done)),
        )
        note(
            f"Batch{b} holding of an unknown trade",
            _count(~hh["HH_H_T_ID"].isin(trade_first.index)),
        )

    every_watch = pd.concat(
        [w.drop(columns=["CDC_FLAG", "CDC_DSN"], errors="ignore") for w in watches],
        ignore_index=True,
    )
    note(
        "Watch by a customer that does not exist yet",
        _late(customer_seen, every_watch, "W_C_ID", "W_DTS"),
    )
    note(
        "Watch of a security that does not exist yet",
        _late(symbol_seen, every_watch, "W_S_SYMB", "W_DTS"),
    )
    placed = every_watch[every_watch["W_ACTION"] == "ACTV"]
    note("Watch placed twice", _count(placed.duplicated(["W_C_ID", "W_S_SYMB"])))
    cancels = every_watch[every_watch["W_ACTION"] == "CNCL"].merge(
        placed, on=["W_C_ID", "W_S_SYMB"], how="left", suffixes=("", "_placed")
    )
    note(
        "Watch cancelled before it was placed",
        _count(cancels["W_DTS_placed"].isna() | (cancels["W_DTS_placed"] > cancels["W_DTS"])),
    )
    return problems

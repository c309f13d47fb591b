"""``generate``: a whole TPC-DI staging area (Batch1, the incremental batches and the answer
keys) at any scale factor.

DIGen's layout has two incremental batches (Batch2, Batch3); ``days=N`` writes N of them,
Batch2..Batch<N+1>, one day each: a continuous daily feed after the historical load, every day
with the specification's incremental files at DIGen's per-batch volumes and its own answer keys.
``days=2`` writes exactly what DIGen's layout holds.

Steps, each on its own random stream derived from the seed (so a change in one table never
changes another, and the same seed always writes the same bytes):

1. the model: employees, FINWIRE companies and securities, the Batch1 customer history, then
   for each incremental batch its customer and account records and the prospect list;
2. trades (which need every account), watches and daily prices;
3. the files of each batch, with its ``*_audit.csv`` counted from exactly the records written,
   then the top-level audit files.

The files are written as soon as their part of the model exists, a family of files per thread
(DailyMarket and FINWIRE once the securities exist, WatchHistory once the customers do, the
trade files on the calling thread after the trades), and the big files are formatted by a
compiled pass (:mod:`tpcdi.generator.lines`) that runs on two cores. A family draws only from its
own stream and numbers its own CDC records, so the bytes never depend on the threads' timing.
"""

from __future__ import annotations

import datetime
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from tpcdi.generator import finwire, lines, market, reference
from tpcdi.generator.customer_xml import HEAD, TAIL, actions_xml
from tpcdi.generator.customers import CustomerBase, history
from tpcdi.generator.incremental import IncrementalRecords, batch_records
from tpcdi.generator.people import AddressBook, Employees, employees
from tpcdi.generator.prospects import ProspectList, first_list, matching_active_customers, next_list
from tpcdi.generator.scale import BATCH1_DATE, BATCH1_END, FIRST_DAY, Calendar, Scale, at, day
from tpcdi.generator.trade_files import write_trades
from tpcdi.generator.trades import TradeNames, Trades, build
from tpcdi.generator.writer import AuditRow, Progress, StagingWriter

DAY = 86_400
#: Threads writing families of files beside the model (DailyMarket, reference files and
#: FINWIRE, WatchHistory); their formatting runs on the writer's own threads.
FILE_THREADS = 3
_STREAMS = (
    "hr",
    "finwire",
    "customers",
    "prospects",
    "incremental",
    "trades",
    "watches",
    "market",
    "addresses",
)


@dataclass
class GenerationReport:
    """What was written: records per (batch, file), the seconds it took, the parameters."""

    sf: float
    seed: int
    seconds: float
    records: dict[tuple[int, str], int] = field(default_factory=dict)
    days: int = 2

    @property
    def total_records(self) -> int:
        return sum(self.records.values())

    def batch_records(self, batch: int) -> int:
        return sum(n for (b, _), n in self.records.items() if b == batch)

    def as_dict(self) -> dict[str, object]:
        return {
            "sf": self.sf,
            "seed": self.seed,
            "seconds": round(self.seconds, 3),
            "total_records": self.total_records,
            "records_per_second": round(self.total_records / max(self.seconds, 1e-9)),
            "days": self.days,
            "batches": {b: self.batch_records(b) for b in range(1, self.days + 2)},
            "files": {f"Batch{b}/{name}": n for (b, name), n in sorted(self.records.items())},
        }


def estimated_records(scale: Scale, days: int = 2) -> int:
    """About how many records a data set at ``scale`` with ``days`` incremental days has (for
    the progress bar; DIGen's SF=3 has 19,900 records per day)."""
    return int(1_530_000 * scale.sf) + 112_767 + int((days - 2) * 6_633 * scale.sf)


def _streams(seed: int) -> dict[str, np.random.Generator]:
    return {name: np.random.default_rng([seed, k]) for k, name in enumerate(_STREAMS)}


def _rows(dataset: str, batch: int, values: dict[str, int]) -> list[AuditRow]:
    return [AuditRow(dataset, batch, name, value) for name, value in values.items()]


class _Generator:
    def __init__(
        self, out: Path, scale: Scale, calendar: Calendar, seed: int, progress: Progress
    ) -> None:
        self.scale = scale
        self.calendar = calendar
        self.rng = _streams(seed)
        self.book = AddressBook(self.rng["addresses"])
        self.w = StagingWriter(out, progress, calendar.batches)
        self.dsn = {"customer": 1000, "account": 1000}

    # -- model: each step draws from its own streams, in this order ----------------------
    def staff_and_market(self) -> None:
        """Employees, then FINWIRE's companies and securities (and the FINWIRE lines)."""
        self.staff: Employees = employees(self.rng["hr"], self.scale.employees)
        self.market = finwire.build(self.rng["finwire"], self.scale, self.book)
        self.watch_book = market.WatchBook(self.rng["watches"], len(self.market.symbol_created))

    def customers(self) -> None:
        """The Batch1 customer history, then each incremental batch's customer and account
        records and prospect list (each list's file written as soon as it is drawn)."""
        scale, rng = self.scale, self.rng
        self.base: CustomerBase = history(rng["customers"], scale, self.book, self.staff.broker_ids)
        self.actions_text = actions_xml(self.base)
        self.prospects: dict[int, ProspectList] = {
            1: first_list(rng["prospects"], scale, self.book, self.base)
        }
        self.new_prospects = {1: len(self.prospects[1])}
        self.matching = {1: matching_active_customers(self.prospects[1], self.base, BATCH1_END)}
        self.prospect_file(1)
        self.incremental: dict[int, IncrementalRecords] = {}
        for b in self.calendar.incremental:
            first_new = self.base.customers
            date = self.calendar.date(b)
            self.incremental[b] = batch_records(
                rng["incremental"], scale, self.book, self.base, date, self.staff.broker_ids,
                self.dsn,
            )  # fmt: skip
            new_ids = np.arange(first_new, self.base.customers)
            self.prospects[b], self.new_prospects[b] = next_list(
                rng["prospects"], scale, self.book, self.base, self.prospects[b - 1], new_ids, date
            )
            end = at(date) + DAY
            self.matching[b] = matching_active_customers(self.prospects[b], self.base, end)
            # written now: a long feed keeps one list in memory, not one per day
            self.prospect_file(b)
            del self.prospects[b - 1]

    def trade_model(self) -> None:
        """Every trade and its status events (they need every account and security)."""
        base, mk = self.base, self.market
        usable = np.minimum(base.account_closed, base.inactive[base.account_owner])
        symbol_order = np.argsort(mk.symbol_created, kind="stable")
        self.symbol_order = symbol_order
        symbol_usable = np.where(mk.symbol_active, np.iinfo(np.int64).max, np.iinfo(np.int64).min)
        self.trades: Trades = self._trades(usable, symbol_order, symbol_usable)
        broker_index = np.searchsorted(
            self.staff.broker_ids, base.account_broker[self.trades.account]
        )
        self.trade_names = TradeNames(mk.symbols, self.staff.broker_names, broker_index)

    def model(self) -> None:
        """The whole model, one step after the other (what :func:`generate` overlaps with
        writing files)."""
        self.staff_and_market()
        self.customers()
        self.trade_model()

    def _trades(
        self, usable: np.ndarray, symbol_order: np.ndarray, symbol_usable: np.ndarray
    ) -> Trades:
        trades = build(
            self.rng["trades"],
            self.scale,
            self.calendar,
            self.base.account_created,
            usable,
            self.market.symbol_created[symbol_order],
            symbol_usable[symbol_order],
        )
        trades.symbol = symbol_order[trades.symbol]
        return trades

    # -- files --------------------------------------------------------------------------
    def reference_files(self) -> None:
        w = self.w
        for name, columns in (
            ("Date.txt", reference.date_columns()),
            ("Time.txt", reference.time_columns()),
            ("Industry.txt", reference.industry_columns()),
            ("StatusType.txt", reference.status_type_columns()),
            ("TaxRate.txt", reference.tax_rate_columns()),
            ("TradeType.txt", reference.trade_type_columns()),
        ):
            w.delimited(1, name, columns)
            w.audit(1, name.split(".")[0], [])
        w.delimited(1, "HR.csv", self.staff.columns, ",")
        w.audit(1, "HR", _rows("DimBroker", 1, {"HR_BROKERS": len(self.staff.broker_ids)}))

    def batch_date(self, batch: int) -> None:
        self.w.lines(batch, "BatchDate.txt", pa.array([self.calendar.date(batch).isoformat()]))

    def customer_mgmt(self) -> None:
        self.w.lines(1, "CustomerMgmt.xml", self.actions_text, eol="", head=HEAD, tail=TAIL)
        del self.actions_text  # written once; hundreds of MB at SF 100
        counts = {a.kind: len(a) for a in self.base.actions}
        new = next(a for a in self.base.actions if a.kind == "NEW")
        assert new.people is not None and new.tier is not None
        batch_day = day(BATCH1_DATE)
        hundred = day(BATCH1_DATE.replace(year=BATCH1_DATE.year - 100))
        customer_rows = [a for a in self.base.actions if a.kind in ("NEW", "UPDCUST", "INACT")]
        keys = np.concatenate(
            [a.customer.astype(np.int64) * 1_000_000 + a.ts // DAY for a in customer_rows]
        )
        rows = _rows(
            "DimAccount",
            1,
            {
                "CA_ADDACCT": counts["ADDACCT"],
                "CA_CLOSEACCT": counts["CLOSEACCT"],
                "CA_UPDACCT": counts["UPDACCT"],
                "CA_ID_HIST": -1,
            },
        ) + _rows(
            "DimCustomer",
            1,
            {
                "C_NEW": counts["NEW"],
                "C_UPDCUST": counts["UPDCUST"],
                "C_ID_HIST": len(keys) - len(np.unique(keys)),
                "C_INACT": counts["INACT"],
                "C_DOB_TO": int((new.people.dob < hundred).sum()),
                "C_DOB_TY": int((new.people.dob > batch_day).sum()),
                "C_TIER_INV": int(((new.tier < 1) | (new.tier > 3)).sum()),
            },
        )
        self.w.audit(1, "CustomerMgmt", rows)

    def finwire_files(self) -> None:
        records = self.market.records()
        for q in range(finwire.QUARTERS):
            lo, hi = int(records.quarter_bounds[q]), int(records.quarter_bounds[q + 1])
            name = finwire.quarter_name(q)
            self.w.lines(1, name, records.lines.slice(lo, hi - lo))
            kinds = np.bincount(records.kinds[lo:hi], minlength=3)
            self.w.audit(
                1,
                name,
                [
                    AuditRow("DimSecurity", 1, "FW_SEC", int(kinds[1])),
                    AuditRow("DimSecurity", 1, "FW_SEC_DUP", -1),
                    AuditRow("DimCompany", 1, "FW_CMP", int(kinds[0])),
                    AuditRow("DimCompany", 1, "FW_CMP_DUP", -1),
                    AuditRow("Financial", 1, "FW_FIN", int(kinds[2])),
                    AuditRow("Financial", 1, "FW_FIN_DUP", -1),
                ],
            )

    def prospect_file(self, batch: int) -> None:
        plist = self.prospects[batch]
        self.w.delimited(batch, "Prospect.csv", plist.columns(), ",")
        self.w.audit(
            batch,
            "Prospect",
            _rows(
                "Prospect",
                batch,
                {
                    "P_C_MATCHING": self.matching[batch],
                    "P_RECORDS": len(plist),
                    "P_NEW": self.new_prospects[batch],
                },
            ),
        )

    def customer_files(self, batch: int) -> None:
        rec = self.incremental[batch]
        self.w.delimited(batch, "Customer.txt", rec.customer_columns)
        self.w.delimited(batch, "Account.txt", rec.account_columns)
        self.w.audit(
            batch,
            "Customer",
            _rows(
                "DimCustomer",
                batch,
                {
                    "C_NEW": rec.customers_new,
                    "C_UPDCUST": rec.customers_updated,
                    "C_ID_HIST": 0,
                    "C_INACT": rec.customers_inactivated,
                    "C_DOB_TO": rec.dob_too_old,
                    "C_DOB_TY": rec.dob_too_young,
                    "C_TIER_INV": rec.bad_tier,
                },
            ),
        )
        self.w.audit(
            batch,
            "Account",
            _rows(
                "DimAccount",
                batch,
                {
                    "CA_ADDACCT": rec.accounts_new,
                    "CA_CLOSEACCT": rec.accounts_closed,
                    "CA_UPDACCT": rec.accounts_updated,
                    "CA_ID_HIST": -1,
                },
            ),
        )

    def trade_files(self, batch: int) -> None:
        write_trades(self.w, self.trades, batch, self.trade_names, self._dsn)

    def _dsn(self, name: str, n: int) -> np.ndarray:
        start = self.dsn.setdefault(name, 1000)
        self.dsn[name] = start + n + 7
        return np.arange(start, start + n)

    def _with_cdc(self, name: str, fields: list[lines.Field]) -> list[lines.Field]:
        n = len(fields[0].values)
        return [lines.const("I", n), lines.ints(self._dsn(name, n)), *fields]

    def all_watch_files(self) -> None:
        """WatchHistory.txt of every batch, in batch order (the watch book remembers)."""
        for batch in self.calendar.batches:
            self.watch_files(batch)

    def watch_files(self, batch: int) -> None:
        base, mk = self.base, self.market
        watches = self.watch_book.batch(
            batch,
            self.calendar,
            self.scale,
            base.created,
            base.inactive,
            mk.symbol_created,
            mk.symbol_active,
        )

        def build(rows: np.ndarray) -> list[lines.Field]:
            fields = watches.fields(mk.symbols, rows)
            return fields if batch == 1 else self._with_cdc("watch", fields)

        self.w.formatted_rows(batch, "WatchHistory.txt", len(watches.ts), build)
        self.w.audit(
            batch,
            "WatchHistory",
            _rows(
                "FactWatches",
                batch,
                {
                    "WH_ACTIVE": int((~watches.cancel).sum()),
                    "WH_RECORDS": len(watches.ts),
                },
            ),
        )

    def daily_market_files(self) -> None:
        mk = self.market
        walk = market.PriceWalk.start(self.rng["market"], len(mk.symbol_created))
        symbol_day = mk.symbol_created // DAY
        for batch, days in market.market_days(self.calendar).items():
            parts = (
                self._with_cdc("market", fields) if batch != 1 else fields
                for fields in market.daily_market(
                    self.rng["market"], walk, days, mk.symbols, symbol_day, mk.symbol_active
                )
            )
            count = self.w.formatted(batch, "DailyMarket.txt", parts)
            self.w.audit(
                batch, "DailyMarket", _rows("FactMarketHistory", batch, {"DM_RECORDS": count})
            )

    def top_level(self, seed: int) -> None:
        for batch in self.calendar.batches:
            last = self.calendar.date(batch)
            first = FIRST_DAY if batch == 1 else last
            self.w.audit(
                None,
                f"Batch{batch}",
                [
                    AuditRow("Batch", batch, "FirstDay", date=first),
                    AuditRow("Batch", batch, "LastDay", date=last),
                ],
            )
        s, cal = self.scale, self.calendar
        self.w.audit(
            None,
            "Generator",
            [
                AuditRow("Generator", 1, "SF", dvalue=float(s.sf * 1000)),
                AuditRow("Generator", 1, "Seed", seed),
                AuditRow("Generator", 1, "FIRST_BATCH_DATE_START", date=BATCH1_DATE),
                AuditRow("Generator", 1, "NUMBER_OF_INCREMENTAL_BATCHES", dvalue=float(cal.days)),
                AuditRow("Generator", 1, "DateBeginDate", date=FIRST_DAY),
                AuditRow("Generator", 1, "DateEndDate", date=datetime.date(2021, 1, 1)),
                AuditRow("Generator", 1, "HREmployees", s.employees),
                AuditRow("Generator", 1, "CMNewCustomers", s.cm_new),
                AuditRow("Generator", 1, "FWCompanies", s.companies),
                AuditRow("Generator", 1, "FWSecurities", s.securities),
                AuditRow("Generator", 1, "TPositionsPerDay", dvalue=round(s.positions_per_day, 5)),
                AuditRow("Generator", 1, "WHWatches", s.watches),
                AuditRow("Generator", 1, "PRecords", s.prospects),
            ],
        )


def generate(
    out: Path, sf: float, *, seed: int = 0, days: int = 2, progress: bool = False
) -> GenerationReport:
    """Write a TPC-DI staging area for scale factor ``sf`` under ``out`` (created if needed):
    Batch1 and ``days`` daily incremental batches (DIGen's layout: 2), with their answer keys.

    Deterministic: the same ``sf``, ``seed`` and ``days`` write the same files. Raises
    :class:`~tpcdi.exceptions.GeneratorError` for a scale factor <= 0 or ``days`` outside
    1..:data:`~tpcdi.generator.scale.MAX_DAYS`.
    """
    started = time.perf_counter()
    scale = Scale(sf)
    calendar = Calendar(days)
    bar = Progress(estimated_records(scale, days), progress)
    gen = _Generator(Path(out), scale, calendar, seed, bar)
    try:
        # A family of files is written on its own thread as soon as its part of the model
        # exists, while the model goes on: each family draws only from its own random stream
        # and its own CDC sequence, so the bytes do not depend on how the threads interleave.
        with ThreadPoolExecutor(FILE_THREADS, "tpcdi-files") as files:
            gen.staff_and_market()
            jobs = [
                files.submit(gen.daily_market_files),
                files.submit(gen.reference_files),
                files.submit(gen.finwire_files),
            ]
            gen.customers()
            jobs.append(files.submit(gen.all_watch_files))
            gen.customer_mgmt()
            gen.trade_model()
            for batch in calendar.batches:
                gen.batch_date(batch)
                if batch != 1:
                    gen.customer_files(batch)
                gen.trade_files(batch)
            for job in jobs:
                job.result()
        gen.top_level(seed)
    finally:
        gen.w.close()
        bar.close()
    return GenerationReport(sf, seed, time.perf_counter() - started, dict(gen.w.records), days)

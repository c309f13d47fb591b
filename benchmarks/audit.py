"""``streamdi bench audit``: what the query side costs on a warehouse of TPC-DI size.

1. Build a synthetic warehouse with the row counts of DIGen's data at the scale factor (SF=3:
   DimTrade 391,406, FactMarketHistory 1,286,344, FactWatches 724,068, FactHoldings 362,768, …),
   in DuckDB with SQL (``range``), and copy it into PostgreSQL (embedded server, COPY) unless
   ``--no-postgres``. The data are shaped like the real ones (versions, dates, keys) but are not a
   correct TPC-DI load, so the verdicts are not the point: the timings are.
2. Per target: the batch validation (24 counts, one statement) and the whole audit, with its
   slowest checks; the answer keys are DIGen's SF=3 keys when ``../shared/tpcdi`` is there.

Writes JSON and a Markdown report (default ``<STREAMDI__STATE_DIR>/reports/bench-audit.*``).
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from cli.commands import EXIT_OK, Commands
from streamdi.settings import StreamdiSettings

#: DIGen row counts at SF=3 (reference/tpcdi.md section 2.5), scaled linearly by --sf.
SF3 = {
    "brokers": 4_293,
    "companies": 1_500,
    "securities": 2_400,
    "financials": 98_576,
    "customers": 6_440,
    "accounts": 14_600,
    "trades": 391_406,
    "holdings": 362_768,
    "cash": 300_000,
    "market_days": 536,
    "watches": 724_068,
    "prospects": 14_982,
}

_TABLES = """
CREATE TABLE statustype AS SELECT * FROM (VALUES ('ACTV', 'Active'), ('CMPT', 'Completed'),
  ('CNCL', 'Canceled'), ('PNDG', 'Pending'), ('SBMT', 'Submitted'), ('INAC', 'Inactive'))
  t(st_id, st_name);
CREATE TABLE tradetype AS SELECT * FROM (VALUES ('TMB', 'Market Buy', 0, 1),
  ('TMS', 'Market Sell', 1, 1), ('TSL', 'Stop Loss', 1, 1), ('TLS', 'Limit Sell', 1, 0),
  ('TLB', 'Limit Buy', 0, 0)) t(tt_id, tt_name, tt_is_sell, tt_is_mrkt);
CREATE TABLE taxrate AS SELECT 'T' || i AS tx_id, 'Tax ' || i AS tx_name,
  CAST(i / 1000.0 AS DOUBLE) AS tx_rate FROM range(1, 321) r(i);
CREATE TABLE industry AS SELECT lpad(CAST(i AS VARCHAR), 2, '0') AS in_id,
  'Industry ' || i AS in_name, 'S' || (i % 12) AS in_sc_id FROM range(1, 103) r(i);
CREATE TABLE dimdate AS SELECT CAST(strftime(d, '%Y%m%d') AS BIGINT) AS sk_dateid,
  CAST(d AS DATE) AS datevalue, strftime(d, '%B %d, %Y') AS datedesc,
  year(d) AS calendaryearid, CAST(year(d) AS VARCHAR) AS calendaryeardesc,
  year(d) * 10 + quarter(d) AS calendarqtrid, year(d) || ' Q' || quarter(d) AS calendarqtrdesc,
  year(d) * 100 + month(d) AS calendarmonthid, strftime(d, '%Y %B') AS calendarmonthdesc,
  year(d) * 100 + week(d) AS calendarweekid, year(d) || '-W' || week(d) AS calendarweekdesc,
  isodow(d) AS dayofweeknum, dayname(d) AS dayofweekdesc, year(d) AS fiscalyearid,
  CAST(year(d) AS VARCHAR) AS fiscalyeardesc, year(d) * 10 + quarter(d) AS fiscalqtrid,
  year(d) || ' Q' || quarter(d) AS fiscalqtrdesc, false AS holidayflag
  FROM range(DATE '1950-01-01', DATE '2021-01-01', INTERVAL 1 DAY) r(d);
CREATE TABLE dimtime AS SELECT (s // 3600) * 10000 + (s // 60 % 60) * 100 + s % 60 AS sk_timeid,
  make_time(s // 3600, s // 60 % 60, s % 60) AS timevalue, s // 3600 AS hourid,
  CAST(s // 3600 AS VARCHAR) AS hourdesc, s // 60 % 60 AS minuteid,
  CAST(s // 60 % 60 AS VARCHAR) AS minutedesc, s % 60 AS secondid,
  CAST(s % 60 AS VARCHAR) AS seconddesc, s BETWEEN 32400 AND 57600 AS markethoursflag,
  s BETWEEN 28800 AND 61200 AS officehoursflag FROM range(0, 86400) r(s);
CREATE TABLE dimbroker AS SELECT i AS sk_brokerid, i AS brokerid, 1 AS managerid,
  'First' || i AS firstname, 'Last' || i AS lastname, 'M' AS middleinitial, 'Main' AS branch,
  '1' AS office, '555-0100' AS phone, true AS iscurrent, 1 AS batchid,
  DATE '1950-01-01' AS effectivedate, DATE '9999-12-31' AS enddate
  FROM range(1, {brokers} + 1) r(i);
CREATE TABLE dimcompany AS SELECT i AS sk_companyid, 1000000 + i AS companyid,
  'Active' AS status, 'Company ' || i AS name, 'Industry ' || (1 + i % 102) AS industry,
  'AA' AS sprating, false AS islowgrade, 'Ceo ' || i AS ceo, i || ' Main St' AS addressline1,
  NULL AS addressline2, '10001' AS postalcode, 'Springfield' AS city, 'NY' AS stateprov,
  'Canada' AS country, 'a company' AS description, DATE '1990-01-01' AS foundingdate,
  true AS iscurrent, 1 AS batchid, DATE '1960-01-01' AS effectivedate,
  DATE '9999-12-31' AS enddate FROM range(1, {companies} + 1) r(i);
CREATE TABLE dimsecurity AS SELECT i AS sk_securityid, 'SYM' || i AS symbol, 'COMMON' AS issue,
  'Active' AS status, 'Security ' || i AS name, 'NYSE' AS exchangeid,
  1 + i % {companies} AS sk_companyid, 1000000 AS sharesoutstanding,
  DATE '2000-01-03' AS firsttrade, DATE '2000-01-03' AS firsttradeonexchange,
  CAST(1 + i % 5 AS DOUBLE) AS dividend, true AS iscurrent, 1 AS batchid,
  DATE '1960-01-01' AS effectivedate, DATE '9999-12-31' AS enddate
  FROM range(1, {securities} + 1) r(i);
CREATE TABLE financial AS SELECT 1 + i % {companies} AS sk_companyid,
  1967 + (i // {companies}) // 4 AS fi_year, (i // {companies}) % 4 + 1 AS fi_qtr,
  make_date(1967 + (i // {companies}) // 4, ((i // {companies}) % 4) * 3 + 1, 1)
    AS fi_qtr_start_date, 1000.0 AS fi_revenue, 100.0 AS fi_net_earn, 1.0 AS fi_basic_eps,
  0.9 AS fi_dilut_eps, 0.1 AS fi_margin, 10.0 AS fi_inventory, 5000.0 AS fi_assets,
  2000.0 AS fi_liability, 100 AS fi_out_basic, 110 AS fi_out_dilut
  FROM range(0, {financials}) r(i);
CREATE TABLE dimcustomer AS SELECT i AS sk_customerid, i AS customerid,
  '123-45-' || lpad(CAST(i % 10000 AS VARCHAR), 4, '0') AS taxid,
  CASE WHEN i % 15 = 0 THEN 'Inactive' ELSE 'Active' END AS status, 'Last' || i AS lastname,
  'First' || i AS firstname, 'Q' AS middleinitial, 'F' AS gender, 1 + i % 3 AS tier,
  DATE '1970-05-17' AS dob, i || ' Oak Ave' AS addressline1, NULL AS addressline2,
  '02134' AS postalcode, 'Boston' AS city, 'MA' AS stateprov,
  'United States of America' AS country, '+1 (617) 555-0101' AS phone1,
  '(617) 555-0102' AS phone2, '555-0103' AS phone3, 'a.b' || i || '@mail.com' AS email1,
  NULL AS email2, 'Tax 1' AS nationaltaxratedesc, 0.001 AS nationaltaxrate,
  'Tax ' || (1 + i % 320) AS localtaxratedesc, (1 + i % 320) / 1000.0 AS localtaxrate,
  NULL AS agencyid, NULL AS creditrating, NULL AS networth, NULL AS marketingnameplate,
  true AS iscurrent, CASE WHEN i > {customers} - 22 THEN 2 + i % 2 ELSE 1 END AS batchid,
  CASE WHEN i > {customers} - 22 THEN DATE '2017-07-08' + i % 2 ELSE DATE '2010-01-01' END
    AS effectivedate, DATE '9999-12-31' AS enddate FROM range(1, {customers} + 1) r(i);
CREATE TABLE dimaccount AS SELECT i AS sk_accountid, i AS accountid,
  1 + i % {brokers} AS sk_brokerid, 1 + i % ({customers} - 22) AS sk_customerid,
  'Active' AS status, 'Account ' || i AS accountdesc, i % 3 AS taxstatus, true AS iscurrent,
  1 AS batchid, DATE '2011-01-01' AS effectivedate, DATE '9999-12-31' AS enddate
  FROM range(1, {accounts} + 1) r(i);
CREATE TABLE dimtrade AS SELECT i AS tradeid, 1 + (1 + i % {accounts}) % {brokers} AS sk_brokerid,
  CAST(strftime(DATE '2012-07-07' + i % 1825, '%Y%m%d') AS BIGINT) AS sk_createdateid,
  93000 AS sk_createtimeid,
  CASE WHEN i % 20 <> 0 THEN CAST(strftime(DATE '2012-07-07' + i % 1825, '%Y%m%d') AS BIGINT) END
    AS sk_closedateid, CASE WHEN i % 20 <> 0 THEN 100000 END AS sk_closetimeid,
  CASE WHEN i % 20 <> 0 THEN 'Completed' ELSE 'Submitted' END AS status, 'Market Buy' AS type,
  true AS cashflag, 1 + i % {securities} AS sk_securityid,
  1 + (1 + i % {securities}) % {companies} AS sk_companyid, 100 AS quantity, 20.0 AS bidprice,
  1 + (1 + i % {accounts}) % ({customers} - 22) AS sk_customerid,
  1 + i % {accounts} AS sk_accountid, 'Trader' AS executedby, 20.5 AS tradeprice, 1.0 AS fee,
  1.0 AS commission, 1.0 AS tax, 1 AS batchid FROM range(1, {trades} + 1) r(i);
CREATE TABLE factholdings AS SELECT tradeid, tradeid AS currenttradeid, sk_customerid,
  sk_accountid, sk_securityid, sk_companyid, sk_closedateid AS sk_dateid,
  sk_closetimeid AS sk_timeid, tradeprice AS currentprice, 100 AS currentholding, 1 AS batchid
  FROM dimtrade WHERE sk_closedateid IS NOT NULL LIMIT {holdings};
CREATE TABLE factcashbalances AS SELECT 1 + (1 + i % {accounts}) % ({customers} - 22)
  AS sk_customerid, 1 + i % {accounts} AS sk_accountid,
  CAST(strftime(DATE '2012-07-07' + i // {accounts}, '%Y%m%d') AS BIGINT) AS sk_dateid,
  CAST(i AS DOUBLE) AS cash, 1 AS batchid FROM range(0, {cash}) r(i);
CREATE TABLE factmarkethistory AS SELECT s AS sk_securityid, 1 + s % {companies} AS sk_companyid,
  CAST(strftime(DATE '2017-07-06' - d, '%Y%m%d') AS BIGINT) AS sk_dateid, 5.0 AS peratio,
  (1 + s % 5) / (20.0 + s % 7 + d % 5 - 1) * 100 AS yield,
  20.0 + s % 7 + d % 5 AS fiftytwoweekhigh,
  CAST(strftime(DATE '2017-07-06' - d, '%Y%m%d') AS BIGINT) AS sk_fiftytwoweekhighdate,
  18.0 + s % 7 + d % 5 AS fiftytwoweeklow,
  CAST(strftime(DATE '2017-07-06' - d, '%Y%m%d') AS BIGINT) AS sk_fiftytwoweeklowdate,
  19.0 + s % 7 + d % 5 AS closeprice, 20.0 + s % 7 + d % 5 AS dayhigh,
  18.0 + s % 7 + d % 5 AS daylow, 1000 AS volume, 1 AS batchid
  FROM range(1, {securities} + 1) a(s), range(0, {market_days}) b(d);
CREATE TABLE factwatches AS SELECT 1 + i % ({customers} - 22) AS sk_customerid,
  1 + (i // ({customers} - 22)) % {securities} AS sk_securityid,
  CAST(strftime(DATE '2012-07-07' + i % 1500, '%Y%m%d') AS BIGINT) AS sk_dateid_dateplaced,
  CASE WHEN i % 5 = 0 THEN CAST(strftime(DATE '2012-07-07' + i % 1500 + 30, '%Y%m%d')
    AS BIGINT) END AS sk_dateid_dateremoved, 1 AS batchid FROM range(0, {watches}) r(i);
CREATE TABLE prospect AS SELECT 'AG' || i AS agencyid, 20170709 AS sk_recorddateid,
  20170707 AS sk_updatedateid, 1 AS batchid, false AS iscustomer, 'PLast' || i AS lastname,
  'PFirst' || i AS firstname, NULL AS middleinitial, 'F' AS gender, i || ' Lake Rd' AS addressline1,
  NULL AS addressline2, '02135' AS postalcode, 'Boston' AS city, 'MA' AS state,
  'Canada' AS country, '555-0199' AS phone, 60000 + i AS income, 1 AS numbercars,
  1 AS numberchildren, 'S' AS maritalstatus, 30 AS age, 700 AS creditrating, 'O' AS ownorrentflag,
  'Acme' AS employer, 1 AS numbercreditcards, 200000 AS networth, NULL AS marketingnameplate
  FROM range(1, {prospects} + 1) r(i);
"""


_RANGE = re.compile(r"range\(([0-9, +-]+)\) (\w)\((\w)\)")


def _integer_ranges(sql: str) -> str:
    """``range(a, b) r(i)`` as INTEGER rows (DuckDB's range yields BIGINT, and DATE + BIGINT does
    not exist)."""
    return _RANGE.sub(r"(SELECT CAST(range AS INTEGER) AS \3 FROM range(\1)) \2", sql)


def sizes(sf: float) -> dict[str, int]:
    """SF=3 row counts scaled to ``sf`` (market days fixed: the 52-week window needs a year)."""
    scaled = {k: max(1, round(v * sf / 3)) for k, v in SF3.items()}
    scaled["market_days"] = SF3["market_days"]
    scaled["securities"] = max(scaled["securities"], 2)
    scaled["customers"] = max(scaled["customers"], 100)
    return scaled


def build_duckdb(path: Path, sf: float) -> dict[str, int]:
    """The synthetic warehouse in a DuckDB file; returns the row count of each table."""
    from tpcdi.audit.connection import WarehouseConnection
    from tpcdi.audit.ddl import ensure_audit_tables
    from tpcdi.audit.validation import write_batch_validation

    with WarehouseConnection.duckdb(str(path)) as conn:
        ensure_audit_tables(conn)
        for statement in _integer_ranges(_TABLES.format(**sizes(sf))).split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.commit()
        tables = sorted(conn.existing_tables() - {"audit", "dimessages"})
        return {t: int(conn.scalar(f"SELECT count(*) FROM {t}")) for t in tables} | {
            "_validation_rows": len(write_batch_validation(conn, 0))
        }


def _pg_type(arrow_type: Any) -> str:
    """The PostgreSQL column type of an Arrow type."""
    import pyarrow as pa

    if pa.types.is_decimal(arrow_type):
        return f"NUMERIC({arrow_type.precision}, {arrow_type.scale})"
    for test, name in (
        (pa.types.is_boolean, "BOOLEAN"),
        (pa.types.is_integer, "BIGINT"),
        (pa.types.is_floating, "DOUBLE PRECISION"),
        (pa.types.is_date, "DATE"),
        (pa.types.is_time, "TIME"),
        (pa.types.is_timestamp, "TIMESTAMP"),
    ):
        if test(arrow_type):
            return name
    return "TEXT"


def copy_to_postgres(source: Path, target: Any) -> float:
    """Copy every table of the DuckDB warehouse into the PostgreSQL connection's schema (COPY in
    pieces of 200,000 rows); returns the seconds taken."""
    import duckdb

    started = time.perf_counter()
    target.execute(f"CREATE SCHEMA IF NOT EXISTS {target.qualified_schema()}")
    src = duckdb.connect(str(source), read_only=True)
    try:
        tables = [r[0] for r in src.execute("SHOW TABLES").fetchall()]
        for table in tables:
            reader = src.sql(f"SELECT * FROM {table}").to_arrow_reader(200_000)
            schema = reader.schema
            columns = ", ".join(f'"{f.name}" {_pg_type(f.type)}' for f in schema)
            target.execute(f"CREATE TABLE {target.table(table)} ({columns})")
            for batch in reader:
                import pyarrow as pa

                target.load_arrow(table, pa.Table.from_batches([batch]), schema.names)
        target.commit()
    finally:
        src.close()
    return time.perf_counter() - started


def measure(conn: Any, keys_dir: Path | None) -> dict[str, Any]:
    """Batch validation and the audit on one warehouse; their timings and slowest checks."""
    from tpcdi.audit.checks import run_audit
    from tpcdi.audit.keys import load_audit_files
    from tpcdi.audit.pcr import write_pcr
    from tpcdi.audit.validation import write_batch_validation
    from tpcdi.audit.visibility import write_visibility

    result: dict[str, Any] = {}
    if keys_dir is not None:
        t0 = time.perf_counter()
        result["answer_key_rows"] = load_audit_files(conn, keys_dir)
        result["answer_keys_s"] = round(time.perf_counter() - t0, 3)
    write_pcr(conn, 0)
    timings = []
    for batch in (1, 2, 3):
        t0 = time.perf_counter()
        write_batch_validation(conn, batch)
        timings.append(time.perf_counter() - t0)
        write_pcr(conn, batch)
        write_visibility(conn, 1 if batch == 1 else 2, batch)
    result["validation_s"] = round(min(timings), 3)
    audit = run_audit(conn)
    result["audit_s"] = round(audit.seconds, 2)
    result["checks"] = len(audit.checks)
    result["ok"], result["fail"] = audit.ok, audit.fail
    slowest = sorted(audit.checks, key=lambda c: c.seconds, reverse=True)[:10]
    result["slowest"] = [{"name": c.name, "seconds": round(c.seconds, 3)} for c in slowest]
    return result


def render(results: dict[str, Any]) -> str:
    lines = [
        f"# TPC-DI query side on a synthetic SF={results['sf']:g} warehouse",
        "",
        f"Built in DuckDB in {results['build_s']:.1f} s: "
        + ", ".join(f"{t} {n:,}" for t, n in results["rows"].items() if not t.startswith("_")),
        "",
        "The data are shaped like TPC-DI's but are not a correct load: OK/FAIL counts are "
        "reported for completeness; the timings are the point.",
        "",
        "| target | validation (24 counts) s | audit s | checks | OK | FAIL |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, r in results["targets"].items():
        lines.append(
            f"| {name} | {r['validation_s']:.3f} | {r['audit_s']:.2f} | {r['checks']} | "
            f"{r['ok']} | {r['fail']} |"
        )
    for name, r in results["targets"].items():
        lines += ["", f"Slowest checks on {name}:", ""]
        lines += [f"- {c['name']}: {c['seconds']:.3f} s" for c in r["slowest"]]
    if "postgres_copy_s" in results:
        lines += ["", f"Copy into PostgreSQL (COPY): {results['postgres_copy_s']:.1f} s."]
    return "\n".join(lines) + "\n"


def _run(args: argparse.Namespace, settings: StreamdiSettings) -> int:
    from cli.tpcdi_audit import open_warehouse
    from tpcdi.datasets import locate_digen

    keys = Path(args.data) if args.data else locate_digen(settings.tpcdi)
    workdir = Path(tempfile.mkdtemp(prefix="bench-audit-"))
    path = workdir / "warehouse.duckdb"
    print(f"building a synthetic SF={args.sf:g} warehouse in {path} …", flush=True)
    t0 = time.perf_counter()
    rows = build_duckdb(path, args.sf)
    results: dict[str, Any] = {
        "sf": args.sf,
        "rows": rows,
        "build_s": round(time.perf_counter() - t0, 2),
        "targets": {},
    }
    print("measuring on DuckDB …", flush=True)
    with open_warehouse(settings, "duckdb", duckdb_path=str(path)) as conn:
        results["targets"]["duckdb"] = measure(conn, keys)
    if not args.no_postgres:
        schema = f"bench_audit_{uuid.uuid4().hex[:8]}"
        with open_warehouse(settings, "postgres", dsn=args.postgres, schema=schema) as pg:
            print("copying into PostgreSQL …", flush=True)
            results["postgres_copy_s"] = round(copy_to_postgres(path, pg), 2)
            print("measuring on PostgreSQL …", flush=True)
            try:
                results["targets"]["postgres"] = measure(pg, keys)
            finally:
                pg.rollback()
                pg.execute(f"DROP SCHEMA {pg.qualified_schema()} CASCADE")
                pg.commit()
    path.unlink(missing_ok=True)
    out = Path(args.out) if args.out else settings.streamdi.state_dir / "reports"
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench-audit.json").write_text(json.dumps(results, indent=2) + "\n")
    report = render(results)
    (out / "bench-audit.md").write_text(report)
    print(report)
    print(f"wrote {out / 'bench-audit.json'} and {out / 'bench-audit.md'}")
    return EXIT_OK


def register(benches: Commands) -> None:
    bench = benches.add_parser(
        "audit",
        help="batch validation and audit timings on a synthetic TPC-DI-sized warehouse",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    bench.add_argument("--sf", type=float, default=3.0, help="scale factor (default 3)")
    bench.add_argument("--data", help="staging area whose answer keys to load (default DIGen's)")
    bench.add_argument("--no-postgres", action="store_true", help="DuckDB only")
    bench.add_argument("--postgres", metavar="DSN", help="PostgreSQL (default: embedded)")
    bench.add_argument("--out", help="report directory (default <state_dir>/reports)")
    bench.set_defaults(handler=_run)

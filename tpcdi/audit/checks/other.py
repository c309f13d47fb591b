"""Financial, Prospect, the tables the incremental updates leave alone, and NOT NULL columns.

Financial (4.5.14)
* row count = FW_FIN (historical load Validation count); SK_CompanyID a DimCompany row;
  FI_QTR in 1..4 (3.2.14); FI_QTR_START_DATE the first day of FI_YEAR's quarter FI_QTR;
  FI_YEAR within Batch 1's window; one row per company and quarter (4.5.14.1 note); EPS, diluted
  EPS and margin consistent with earnings, shares and revenue (to 0.4: the fields were copied to
  the right columns).

Prospect (4.5.15, 4.6.14)
* row count — after batch b, the Validation count = P_NEW of batches 1..b (a new AgencyID inserts
  a row, a known one updates it); AgencyID unique; BatchID values 1..B (every batch);
* status messages — each batch writes 'Inserted rows' = P_NEW (4.5.15.2, 4.6.14.2) and the
  incremental updates also 'Source rows' = P_RECORDS and 'Updated rows' (at most the rows that
  were not new);
* date keys — SK_RecordDateID and SK_UpdateDateID are batch dates, the update no later than the
  record date, and BatchID between the update's batch and the record's batch;
* IsCustomer — true exactly when a current, Active DimCustomer has the same names and address
  upper-cased (4.5.15.1, 4.6.14.1, kept current by 4.6.4.3);
* MarketingNameplate — the tags HighValue, Expenses, Boomer, MoneyAlert, Spender, Inherited
  whose conditions hold, in that order, joined by '+'; NULL when none does;
* Country from DIGen's domain.

Static tables (4.6.2, 4.6.3, 4.6.5, 4.6.6, 4.6.12, 4.6.13, 4.6.15-4.6.17): DimBroker, DimCompany,
DimSecurity, DimDate, DimTime, Financial, Industry, StatusType, TaxRate, TradeType hold the same
non-zero number of rows after each batch.

<T> required fields — 3.2, 3.4.2: no NULL in a column clause 3.2 declares Not NULL.
"""

from __future__ import annotations

from tpcdi.audit.checks.base import (
    AuditContext,
    Check,
    MissingInput,
    Outcome,
    batch_ids,
    compare,
    per_batch,
    violations,
)
from tpcdi.audit.checks.dimensions import PERSON_COLUMNS
from tpcdi.audit.schema import NOT_NULL

STATIC_TABLES: tuple[str, ...] = (
    "DimBroker",
    "DimCompany",
    "DimSecurity",
    "DimDate",
    "DimTime",
    "Financial",
    "Industry",
    "StatusType",
    "TaxRate",
    "TradeType",
)

NAMEPLATE = (
    "NULLIF(rtrim("
    "CASE WHEN networth > 1000000 OR income > 200000 THEN 'HighValue+' ELSE '' END || "
    "CASE WHEN numberchildren > 3 OR numbercreditcards > 5 THEN 'Expenses+' ELSE '' END || "
    "CASE WHEN age > 45 THEN 'Boomer+' ELSE '' END || "
    "CASE WHEN income < 50000 OR creditrating < 600 OR networth < 100000 "
    "THEN 'MoneyAlert+' ELSE '' END || "
    "CASE WHEN numbercars > 3 OR numbercreditcards > 7 THEN 'Spender+' ELSE '' END || "
    "CASE WHEN age < 25 AND networth > 1000000 THEN 'Inherited+' ELSE '' END, '+'), '')"
)


def _financial_rows(ctx: AuditContext) -> Outcome:
    recorded = ctx.validations.count(1, "Financial")
    return compare(recorded, "=", ctx.keys.total("Financial", "FW_FIN"), "(FW_FIN)")


def _financial_years(ctx: AuditContext) -> Outcome:
    first, last = ctx.keys.window(1)
    bad = ctx.number(
        "SELECT count(*) FROM {financial} WHERE fi_year < ? OR fi_year > ?",
        [first.year, last.year],
    )
    return bad == 0, f"{bad} rows with FI_YEAR outside {first.year}..{last.year} (expected 0)"


def _prospect_rows(ctx: AuditContext) -> Outcome:
    def judge(batch: int) -> Outcome:
        recorded = ctx.validations.count(batch, "Prospect")
        return compare(recorded, "=", ctx.keys.upto("Prospect", "P_NEW", batch), "(P_NEW up to b)")

    return per_batch(ctx.batches, judge)


def _prospect_messages(ctx: AuditContext) -> Outcome:
    found: dict[tuple[int, str], list[str | None]] = {}
    for batch, text, data in ctx.rows(
        "SELECT batchid, messagetext, messagedata FROM {dimessages} "
        "WHERE messagetype = 'Status' AND messagesource = 'Prospect'"
    ):
        found.setdefault((int(batch), str(text)), []).append(data)

    def one(batch: int, text: str) -> int:
        values = found.get((batch, text), [])
        if len(values) != 1:
            raise MissingInput(f"{len(values)} {text!r} messages (expected 1)")
        try:
            return int(str(values[0]).strip())
        except ValueError:
            raise MissingInput(f"{text!r} message holds {values[0]!r}") from None

    def judge(batch: int) -> Outcome:
        try:
            inserted = one(batch, "Inserted rows")
            new = ctx.keys.value("Prospect", "P_NEW", batch)
            ok, detail = compare(inserted, "=", new, "inserted (P_NEW)")
            if batch == 1:
                return ok, detail
            source = one(batch, "Source rows")
            records = ctx.keys.value("Prospect", "P_RECORDS", batch)
            ok2, detail2 = compare(source, "=", records, "source rows (P_RECORDS)")
            updated = one(batch, "Updated rows")
            ok3 = 0 <= updated <= records - new
            detail3 = f"{updated} updated (expected 0..{records - new})"
            return ok and ok2 and ok3, f"{detail}, {detail2}, {detail3}"
        except MissingInput as exc:
            return False, str(exc)

    return per_batch(ctx.batches, judge)


def _batch_dates_sql(ctx: AuditContext, alias: str) -> str:
    """A ``FROM`` item ``alias(batchid, day)``: each batch's date (its LastDay)."""
    rows = ", ".join(f"({b}, DATE '{ctx.keys.window(b)[1]}')" for b in ctx.batches)
    return f"(VALUES {rows}) AS {alias}(batchid, day)"


def _prospect_dates(ctx: AuditContext) -> Outcome:
    days = [ctx.keys.window(b)[1] for b in ctx.batches]
    rows, bad = ctx.rows(
        "SELECT count(*), count(*) FILTER (WHERE rb.batchid IS NULL OR ub.batchid IS NULL "
        "OR ub.batchid > p.batchid OR p.batchid > rb.batchid) "
        "FROM {prospect} p LEFT JOIN {dimdate} r ON r.sk_dateid = p.sk_recorddateid "
        "LEFT JOIN {dimdate} u ON u.sk_dateid = p.sk_updatedateid "
        f"LEFT JOIN {_batch_dates_sql(ctx, 'rb')} ON rb.day = r.datevalue "
        f"LEFT JOIN {_batch_dates_sql(ctx, 'ub')} ON ub.day = u.datevalue"
    )[0]
    bad = int(bad or 0)
    shown = ", ".join(str(d) for d in days) if len(days) <= 3 else f"{days[0]}..{days[-1]}"
    return bad == 0, (
        f"{bad} of {rows} prospects whose record/update dates are not batch dates "
        f"({shown}) with update <= BatchID <= record (expected 0)"
    )


def _static_tables(ctx: AuditContext) -> Outcome:
    changed: list[str] = []
    compared = 0
    for source in STATIC_TABLES:
        counts: list[int] = []
        for batch in ctx.batches:
            try:
                counts.append(ctx.validations.count(batch, source))
            except MissingInput:
                continue
        if not counts:
            continue
        compared += 1
        if len(set(counts)) > 1 or counts[0] == 0:
            shown = counts if len(counts) <= 3 else f"values {sorted(set(counts))}"
            changed.append(f"{source} {shown}")
    span = f"batches 1..{ctx.last}"
    if changed:
        return False, f"row counts over {span} changed or zero: " + "; ".join(changed)
    return True, f"{compared} tables with the same non-zero row count after {span}"


def required_fields(spec_name: str, columns: tuple[str, ...]) -> Check:
    table = "{" + spec_name.lower() + "}"

    def run(ctx: AuditContext) -> Outcome:
        counts = ctx.rows(
            "SELECT count(*), "
            + ", ".join(f"count(*) FILTER (WHERE {c} IS NULL)" for c in columns)
            + f" FROM {table}"
        )[0]
        nulls = {c: int(n or 0) for c, n in zip(columns, counts[1:], strict=True) if n}
        if nulls:
            listed = ", ".join(f"{c} {n}" for c, n in nulls.items())
            return False, f"NULLs in Not NULL columns of {counts[0]} rows: {listed}"
        return True, f"0 NULLs in {len(columns)} Not NULL columns of {counts[0]} rows"

    return Check(f"{spec_name} required fields", "3.2, 3.4.2", run)


#: Prospects whose IsCustomer is not whether a current Active customer is the same person: a
#: left join to the distinct person keys of those customers, which both warehouses hash. (As a
#: correlated ``EXISTS`` inside the comparison, PostgreSQL scanned DimCustomer once per prospect:
#: quadratic, hours at SF 100.)
_ISCUSTOMER_DISAGREES = (
    "SELECT count(*) FROM {prospect} p LEFT JOIN (SELECT DISTINCT "
    + ", ".join(f"upper(coalesce(c.{col}, '')) AS {col}" for col in PERSON_COLUMNS)
    + " FROM {dimcustomer} c WHERE c.iscurrent AND c.status = 'Active') m ON "
    + " AND ".join(f"upper(coalesce(p.{col}, '')) = m.{col}" for col in PERSON_COLUMNS)
    + f" WHERE p.iscustomer <> (m.{PERSON_COLUMNS[0]} IS NOT NULL)"
)

CHECKS: tuple[Check, ...] = (
    Check("Financial row count", "4.5.14", _financial_rows),
    violations(
        "Financial SK_CompanyID",
        "4.5.14.2",
        "SELECT count(*) FROM {financial} f WHERE NOT EXISTS "
        "(SELECT 1 FROM {dimcompany} c WHERE c.sk_companyid = f.sk_companyid)",
        "rows whose SK_CompanyID is no DimCompany row",
    ),
    violations(
        "Financial FI_QTR",
        "3.2.14",
        "SELECT count(*) FROM {financial} WHERE fi_qtr NOT IN (1, 2, 3, 4)",
        "rows with FI_QTR outside 1..4",
    ),
    violations(
        "Financial FI_QTR_START_DATE",
        "3.2.14, 4.5.14.2",
        "SELECT count(*) FROM {financial} WHERE extract(year FROM fi_qtr_start_date) <> fi_year "
        "OR extract(month FROM fi_qtr_start_date) <> (fi_qtr - 1) * 3 + 1 "
        "OR extract(day FROM fi_qtr_start_date) <> 1",
        "rows whose FI_QTR_START_DATE is not the first day of their quarter",
    ),
    Check("Financial FI_YEAR", "4.5.14", _financial_years),
    violations(
        "Financial EPS",
        "4.5.14.2",
        "SELECT count(*) FROM {financial} WHERE "
        # NUMERIC: PostgreSQL has no round(double precision, integer)
        "abs(round(CAST(fi_net_earn / nullif(fi_out_basic, 0) AS NUMERIC(38, 6)), 2) "
        "- fi_basic_eps) > 0.4 "
        "OR abs(round(CAST(fi_net_earn / nullif(fi_out_dilut, 0) AS NUMERIC(38, 6)), 2) "
        "- fi_dilut_eps) > 0.4 "
        "OR abs(round(CAST(fi_net_earn / nullif(fi_revenue, 0) AS NUMERIC(38, 6)), 2) "
        "- fi_margin) > 0.4",
        "rows whose EPS, diluted EPS or margin disagree with earnings (by more than 0.4)",
    ),
    violations(
        "Financial one row per company quarter",
        "4.5.14.1",
        "SELECT count(*) FROM (SELECT c.companyid, f.fi_year, f.fi_qtr FROM {financial} f "
        "JOIN {dimcompany} c ON c.sk_companyid = f.sk_companyid "
        "GROUP BY c.companyid, f.fi_year, f.fi_qtr HAVING count(*) > 1) x",
        "company quarters with more than one row",
    ),
    Check("Prospect row count", "4.5.15, 4.6.14", _prospect_rows),
    Check("Prospect status messages", "4.5.15.2, 4.6.14.2", _prospect_messages),
    violations(
        "Prospect distinct keys",
        "4.5.15.1, 4.6.14.1",
        "SELECT count(*) - count(DISTINCT agencyid) FROM {prospect}",
        "repeated AgencyIDs",
    ),
    batch_ids("Prospect BatchID values", "4.4.2", "prospect"),
    Check("Prospect date keys", "4.5.15.1, 4.6.14.1", _prospect_dates),
    violations(
        "Prospect IsCustomer",
        "4.5.15.1, 4.6.14.1, 4.6.4.3",
        _ISCUSTOMER_DISAGREES,
        "prospects whose IsCustomer disagrees with a current Active customer match",
    ),
    violations(
        "Prospect MarketingNameplate",
        "4.5.15.1, 4.6.14.1",
        f"SELECT count(*) FROM {{prospect}} WHERE marketingnameplate IS DISTINCT FROM {NAMEPLATE}",
        "prospects whose MarketingNameplate is not the tags their fields earn",
    ),
    violations(
        "Prospect Country",
        "2.2.2.12",
        "SELECT count(*) FROM {prospect} WHERE country NOT IN "
        "('United States of America', 'Canada')",
        "prospects with a Country outside DIGen's (United States of America, Canada)",
    ),
    Check("Static tables unchanged", "4.6.2-4.6.17", _static_tables),
    *(required_fields(name, columns) for name, columns in NOT_NULL.items()),
)

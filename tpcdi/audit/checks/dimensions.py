"""Rules of the individual dimensions (beyond the history-tracking ones of :mod:`.history`).

DimBroker (4.5.2, 4.6.2)
* row count = HR_BROKERS; EffectiveDate = the earliest date of DimDate.

DimAccount (4.5.1, 4.6.1)
* row count per batch >= the answer keys' minimum: batch 1 C_NEW + CA_ADDACCT + CA_CLOSEACCT +
  CA_UPDACCT + C_UPDCUST + C_INACT - C_ID_HIST - CA_ID_HIST (every action makes at least one
  account version); batches 2, 3 CA_ADDACCT + CA_CLOSEACCT + CA_UPDACCT - CA_ID_HIST;
* SK_CustomerID / SK_BrokerID — 4.4.1.6.1, 4.5.1.3: each version lies within the date range of
  the customer (broker) version it references;
* current customer — 4.4.1.6.1, 4.6.1.3: a current account references its customer's current
  version (a customer change re-versions its accounts);
* inactive customers — 4.5.1.3 (INACT), 4.6.1.3: an inactive customer's current accounts are
  inactive;
* Status in the StatusType names Active/Inactive (4.6.1.4); TaxStatus in 0, 1, 2 (3.2.1).

DimCustomer (4.5.4, 4.6.4)
* row count per batch >= C_NEW + C_INACT + C_UPDCUST - C_ID_HIST;
* inactive customers: the batch's Validation count = C_INACT summed over batches 1..b;
* tier alerts per batch = C_TIER_INV (4.5.4.4, 4.6.4.4); DOB alerts per batch = C_DOB_TO +
  C_DOB_TY (4.5.4.5, 4.6.4.5);
* Status Active/Inactive; Gender M/F/U (4.5.4.3: other values become U); TaxID copied in
  DIGen's C_TAX_ID shape;
* phone numbers in one of the three shapes of 4.5.4.3 ('+c (a) l[e]', '(a) l[e]', 'l[e]');
  e-mail addresses look like addresses;
* tax rates: (LocalTaxRateDesc, LocalTaxRate) and the national pair are a TaxRate row (4.5.4.3);
* demographics: a current customer with an AgencyID matches that prospect (names and address
  upper-cased) with equal CreditRating, NetWorth and MarketingNameplate (4.5.4.3, 4.6.4.3).

DimCompany (4.5.3)
* row count <= FW_CMP (unchanged CMP records are not recorded); Status Active/Inactive; SPrating
  null or a valid S&P rating, isLowGrade null exactly when SPrating is, else false iff the rating
  starts with A or BBB; Industry an Industry name; a company name belongs to one company;
  Country from DIGen's domain; every 'Invalid SPRating' alert names a company with a version
  whose SPrating was nulled (4.5.3.3).

DimSecurity (4.5.6)
* row count >= FW_SEC (every SEC record is a version); SK_CompanyID within the referenced company
  version (4.4.1.6.1); Status Active/Inactive; Issue and ExchangeID from DIGen's domains.
"""

from __future__ import annotations

from tpcdi.audit.checks.base import (
    AuditContext,
    Check,
    Outcome,
    batch_set,
    compare,
    per_batch,
    violations,
)
from tpcdi.audit.validation import INACTIVE_CUSTOMERS

STATUS_VALUES = "('Active', 'Inactive')"
SP_RATINGS = (
    "AAA", "AA+", "AA", "AA-", "A+", "A", "A-", "BBB+", "BBB", "BBB-", "BB+", "BB", "BB-",
    "B+", "B", "B-", "CCC+", "CCC", "CCC-", "CC", "C", "D",
)  # fmt: skip
PHONE = r"(\+[0-9]+ \([0-9]+\) |\([0-9]+\) )?[0-9][-0-9]*"


def _sql_list(values: tuple[str, ...]) -> str:
    return "(" + ", ".join("'" + v.replace("'", "''") + "'" for v in values) + ")"


def contained(name: str, clause: str, child: str, fk: str, parent: str, parent_sk: str) -> Check:
    """Every ``child`` version references a ``parent`` version whose date range contains its own."""
    return violations(
        name,
        clause,
        f"SELECT count(*) FROM {{{child}}} a WHERE NOT EXISTS (SELECT 1 FROM {{{parent}}} p "
        f"WHERE p.{parent_sk} = a.{fk} AND p.effectivedate <= a.effectivedate "
        "AND a.enddate <= p.enddate)",
        f"versions whose {fk} is no {parent} version covering their dates",
    )


def _broker_rows(ctx: AuditContext) -> Outcome:
    rows = ctx.number("SELECT count(*) FROM {dimbroker}")
    return compare(rows, "=", ctx.keys.value("DimBroker", "HR_BROKERS", 1), "(HR_BROKERS)")


def _broker_effective(ctx: AuditContext) -> Outcome:
    first, wrong = ctx.rows(
        "SELECT min(d.datevalue), (SELECT count(*) FROM {dimbroker} b "
        "WHERE b.effectivedate IS DISTINCT FROM (SELECT min(datevalue) FROM {dimdate})) "
        "FROM {dimdate} d"
    )[0]
    return int(wrong) == 0, f"{int(wrong)} brokers not effective from DimDate's first day {first}"


def _account_rows(ctx: AuditContext) -> Outcome:
    counts = batch_set(ctx, "dimaccount")
    k = ctx.keys

    def judge(batch: int) -> Outcome:
        minimum = (
            k.value("DimAccount", "CA_ADDACCT", batch)
            + k.value("DimAccount", "CA_CLOSEACCT", batch)
            + k.value("DimAccount", "CA_UPDACCT", batch)
            - k.value("DimAccount", "CA_ID_HIST", batch)
        )
        if batch == 1:
            minimum += (
                k.value("DimCustomer", "C_NEW", 1)
                + k.value("DimCustomer", "C_UPDCUST", 1)
                + k.value("DimCustomer", "C_INACT", 1)
                - k.value("DimCustomer", "C_ID_HIST", 1)
            )
        return compare(counts.get(batch, 0), ">=", minimum, "(minimum from the answer keys)")

    return per_batch(ctx.batches, judge)


def _customer_rows(ctx: AuditContext) -> Outcome:
    counts = batch_set(ctx, "dimcustomer")
    k = ctx.keys

    def judge(batch: int) -> Outcome:
        minimum = (
            k.value("DimCustomer", "C_NEW", batch)
            + k.value("DimCustomer", "C_INACT", batch)
            + k.value("DimCustomer", "C_UPDCUST", batch)
            - k.value("DimCustomer", "C_ID_HIST", batch)
        )
        label = "(C_NEW + C_INACT + C_UPDCUST - C_ID_HIST)"
        return compare(counts.get(batch, 0), ">=", minimum, label)

    return per_batch(ctx.batches, judge)


def _inactive_customers(ctx: AuditContext) -> Outcome:
    def judge(batch: int) -> Outcome:
        recorded = ctx.validations.count(batch, "DimCustomer", INACTIVE_CUSTOMERS)
        expected = ctx.keys.upto("DimCustomer", "C_INACT", batch)
        return compare(recorded, "=", expected, "(C_INACT up to the batch)")

    return per_batch(ctx.batches, judge)


def alert_count(
    name: str, clause: str, text: str, attributes: tuple[tuple[str, str], ...]
) -> Check:
    """Per batch, the number of ``text`` Alerts equals the sum of the answer-key ``attributes``."""
    label = "(" + " + ".join(a for _, a in attributes) + ")"

    def run(ctx: AuditContext) -> Outcome:
        counts = {
            int(b): int(n)
            for b, n in ctx.rows(
                "SELECT batchid, count(*) FROM {dimessages} WHERE messagetype = 'Alert' "
                "AND messagetext = ? GROUP BY batchid",
                [text],
            )
        }

        def judge(batch: int) -> Outcome:
            expected = sum(ctx.keys.value(d, a, batch) for d, a in attributes)
            return compare(counts.get(batch, 0), "=", expected, label)

        ok, detail = per_batch(ctx.batches, judge)
        stray = {b: n for b, n in counts.items() if b not in ctx.batches}
        if stray:
            return False, detail + f"; alerts in other batches: {stray}"
        return ok, detail

    return Check(name, clause, run)


def phone_check() -> Check:
    def run(ctx: AuditContext) -> Outcome:
        conditions = " OR ".join(
            f"(phone{n} IS NOT NULL AND NOT {ctx.conn.full_match(f'phone{n}', PHONE)})"
            for n in (1, 2, 3)
        )
        rows, bad = ctx.rows(
            f"SELECT count(*), count(*) FILTER (WHERE {conditions}) FROM {{dimcustomer}}"
        )[0]
        bad = int(bad or 0)
        shapes = "'+c (a) l', '(a) l' or 'l'"
        return bad == 0, f"{bad} of {rows} versions with a phone not shaped {shapes}"

    return Check("DimCustomer phone numbers", "4.5.4.3, 4.6.4.3", run)


def _tax_pair(kind: str) -> str:
    return (
        f"NOT EXISTS (SELECT 1 FROM {{taxrate}} t WHERE t.tx_name = c.{kind}taxratedesc "
        f"AND abs(t.tx_rate - c.{kind}taxrate) < 0.000005)"
    )


#: The fields that make a prospect and a customer the same person (4.6.4.3), compared without
#: case, a null as the empty string.
PERSON_COLUMNS = ("lastname", "firstname", "addressline1", "addressline2", "postalcode")
SAME_PERSON = " AND ".join(
    f"upper(coalesce(p.{col}, '')) = upper(coalesce(c.{col}, ''))" for col in PERSON_COLUMNS
)

CHECKS: tuple[Check, ...] = (
    Check("DimBroker row count", "4.5.2", _broker_rows),
    Check("DimBroker EffectiveDate", "4.5.2", _broker_effective),
    Check("DimAccount row count", "4.5.1, 4.6.1", _account_rows),
    contained(
        "DimAccount SK_CustomerID",
        "4.4.1.6.1, 4.5.1.3",
        "dimaccount",
        "sk_customerid",
        "dimcustomer",
        "sk_customerid",
    ),
    contained(
        "DimAccount SK_BrokerID",
        "4.5.1.3",
        "dimaccount",
        "sk_brokerid",
        "dimbroker",
        "sk_brokerid",
    ),
    violations(
        "DimAccount current customer",
        "4.4.1.6.1, 4.6.1.3",
        "SELECT count(*) FROM {dimaccount} a JOIN {dimcustomer} c "
        "ON c.sk_customerid = a.sk_customerid WHERE a.iscurrent AND NOT c.iscurrent",
        "current accounts referencing an expired customer version",
    ),
    violations(
        "DimAccount inactive customers",
        "4.5.1.3, 4.6.1.3",
        "SELECT count(*) FROM {dimaccount} a JOIN {dimcustomer} c "
        "ON c.sk_customerid = a.sk_customerid WHERE a.iscurrent AND c.iscurrent "
        "AND c.status = 'Inactive' AND a.status IS DISTINCT FROM 'Inactive'",
        "current accounts of inactive customers not inactive",
    ),
    violations(
        "DimAccount Status",
        "4.6.1.4",
        f"SELECT count(*) FROM {{dimaccount}} WHERE status NOT IN {STATUS_VALUES}",
        "versions with a Status other than Active/Inactive",
    ),
    violations(
        "DimAccount TaxStatus",
        "3.2.1",
        "SELECT count(*) FROM {dimaccount} WHERE taxstatus NOT IN (0, 1, 2)",
        "versions with a TaxStatus other than 0, 1, 2",
    ),
    Check("DimCustomer row count", "4.5.4, 4.6.4", _customer_rows),
    Check("DimCustomer inactive customers", "4.5.4.3, 4.6.4.3, 7.4", _inactive_customers),
    alert_count(
        "DimCustomer tier alerts",
        "4.5.4.4, 4.6.4.4",
        "Invalid customer tier",
        (("DimCustomer", "C_TIER_INV"),),
    ),
    alert_count(
        "DimCustomer DOB alerts",
        "4.5.4.5, 4.6.4.5",
        "DOB out of range",
        (("DimCustomer", "C_DOB_TO"), ("DimCustomer", "C_DOB_TY")),
    ),
    violations(
        "DimCustomer Status",
        "4.6.4.3",
        f"SELECT count(*) FROM {{dimcustomer}} WHERE status NOT IN {STATUS_VALUES}",
        "versions with a Status other than Active/Inactive",
    ),
    violations(
        "DimCustomer Gender",
        "4.5.4.3, 4.6.4.3",
        "SELECT count(*) FROM {dimcustomer} WHERE gender IS NULL OR gender NOT IN ('M', 'F', 'U')",
        "versions with a Gender other than M, F, U",
    ),
    violations(
        "DimCustomer TaxID",
        "2.2.2.4, 2.2.2.5",
        "SELECT count(*) FROM {dimcustomer} WHERE taxid NOT LIKE '___-__-____'",
        "versions whose TaxID is not shaped like DIGen's C_TAX_ID (nnn-nn-nnnn)",
    ),
    phone_check(),
    violations(
        "DimCustomer email addresses",
        "4.5.4.3, 4.6.4.3",
        "SELECT count(*) FROM {dimcustomer} WHERE (email1 IS NOT NULL AND email1 NOT LIKE "
        "'%_@_%._%') OR (email2 IS NOT NULL AND email2 NOT LIKE '%_@_%._%')",
        "versions with an e-mail address not shaped name@domain.tld",
    ),
    violations(
        "DimCustomer tax rates",
        "4.5.4.3, 4.6.4.3",
        f"SELECT count(*) FROM {{dimcustomer}} c WHERE {_tax_pair('national')} "
        f"OR {_tax_pair('local')}",
        "versions whose national or local tax rate and description are no TaxRate row",
    ),
    violations(
        "DimCustomer demographics",
        "4.5.4.3, 4.6.4.3",
        "SELECT count(*) FROM {dimcustomer} c WHERE c.iscurrent AND c.agencyid IS NOT NULL "
        "AND NOT EXISTS (SELECT 1 FROM {prospect} p WHERE p.agencyid = c.agencyid AND "
        f"{SAME_PERSON} AND p.creditrating IS NOT DISTINCT FROM c.creditrating "
        "AND p.networth IS NOT DISTINCT FROM c.networth "
        "AND p.marketingnameplate IS NOT DISTINCT FROM c.marketingnameplate)",
        "current customers with an AgencyID whose demographics are not that prospect's",
    ),
    Check(
        "DimCompany row count",
        "4.5.3.1",
        lambda ctx: compare(
            ctx.number("SELECT count(*) FROM {dimcompany}"),
            "<=",
            ctx.keys.total("DimCompany", "FW_CMP"),
            "(FW_CMP)",
        ),
    ),
    violations(
        "DimCompany Status",
        "4.5.3.2",
        f"SELECT count(*) FROM {{dimcompany}} WHERE status NOT IN {STATUS_VALUES}",
        "versions with a Status other than Active/Inactive",
    ),
    violations(
        "DimCompany SPrating",
        "4.5.3.3",
        f"SELECT count(*) FROM {{dimcompany}} WHERE sprating NOT IN {_sql_list(SP_RATINGS)}",
        "versions with an SPrating that is not a valid S&P rating",
    ),
    violations(
        "DimCompany isLowGrade",
        "4.5.3.2, 4.5.3.3",
        "SELECT count(*) FROM {dimcompany} WHERE (sprating IS NULL) <> (islowgrade IS NULL) "
        "OR islowgrade <> (NOT (sprating LIKE 'A%' OR sprating LIKE 'BBB%'))",
        "versions whose isLowGrade does not follow their SPrating",
    ),
    violations(
        "DimCompany Industry",
        "4.5.3.2",
        "SELECT count(*) FROM {dimcompany} c WHERE NOT EXISTS "
        "(SELECT 1 FROM {industry} i WHERE i.in_name = c.industry)",
        "versions whose Industry is no Industry name",
    ),
    violations(
        "DimCompany distinct names",
        "4.5.6.2, 4.5.14.2",
        "SELECT count(*) FROM (SELECT name FROM {dimcompany} GROUP BY name "
        "HAVING count(DISTINCT companyid) > 1) n",
        "names shared by different companies",
    ),
    violations(
        "DimCompany Country",
        "2.2.2.8",
        "SELECT count(*) FROM {dimcompany} WHERE country NOT IN "
        "('United States of America', 'Canada', '')",
        "versions with a Country outside DIGen's (United States of America, Canada)",
    ),
    violations(
        "DimCompany SPrating alerts",
        "4.5.3.3",
        "SELECT count(*) FROM {dimessages} m WHERE m.messagetype = 'Alert' "
        "AND m.messagetext = 'Invalid SPRating' AND NOT EXISTS (SELECT 1 FROM {dimcompany} c "
        "WHERE c.sprating IS NULL AND ltrim(CAST(c.companyid AS VARCHAR), '0') = "
        "ltrim(trim(replace(split_part(m.messagedata, ',', 1), 'CO_ID =', '')), '0'))",
        "'Invalid SPRating' alerts naming no company with a nulled SPrating",
    ),
    Check(
        "DimSecurity row count",
        "4.5.6.1",
        lambda ctx: compare(
            ctx.number("SELECT count(*) FROM {dimsecurity}"),
            ">=",
            ctx.keys.total("DimSecurity", "FW_SEC"),
            "(FW_SEC)",
        ),
    ),
    contained(
        "DimSecurity SK_CompanyID",
        "4.4.1.6.1, 4.5.6.2",
        "dimsecurity",
        "sk_companyid",
        "dimcompany",
        "sk_companyid",
    ),
    violations(
        "DimSecurity Status",
        "4.5.6.2",
        f"SELECT count(*) FROM {{dimsecurity}} WHERE status NOT IN {STATUS_VALUES}",
        "versions with a Status other than Active/Inactive",
    ),
    violations(
        "DimSecurity Issue",
        "2.2.2.8",
        "SELECT count(*) FROM {dimsecurity} WHERE issue NOT IN "
        "('COMMON', 'PREF_A', 'PREF_B', 'PREF_C', 'PREF_D')",
        "versions with an Issue outside DIGen's (COMMON, PREF_A..PREF_D)",
    ),
    violations(
        "DimSecurity ExchangeID",
        "2.2.2.8",
        "SELECT count(*) FROM {dimsecurity} WHERE exchangeid NOT IN "
        "('NYSE', 'NASDAQ', 'AMEX', 'PCX')",
        "versions with an ExchangeID outside DIGen's (NYSE, NASDAQ, AMEX, PCX)",
    ),
)

"""Defects injected one at a time into the tiny warehouse, each with the checks it must fail and
the numbers the failing check's detail must state. Shared by the DuckDB and PostgreSQL tests.

Where one defect necessarily breaks more than one rule (two current versions also make a
current version end before 9999-12-31), every rule it breaks is listed; no other check may fail.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.unit.tpcdi.audit.tiny_dw import EOT, Spec, dk

D = datetime.date


def row(spec: Spec, batch: int | str, table: str, **match: Any) -> dict[str, Any]:
    """The one row of ``table`` inserted by ``batch`` whose fields equal ``match``."""
    found = [
        r
        for r in spec.inserts[batch][table]  # type: ignore[index]
        if all(r[k] == v for k, v in match.items())
    ]
    assert len(found) == 1, f"{table} {match}: {len(found)} rows"
    return found[0]


def drop(spec: Spec, batch: int, table: str, **match: Any) -> None:
    spec.inserts[batch][table].remove(row(spec, batch, table, **match))


def add_copy(spec: Spec, batch: int, table: str, match: dict[str, Any], **changes: Any) -> None:
    spec.inserts[batch][table].append({**row(spec, batch, table, **match), **changes})


def drop_message(spec: Spec, batch: int, text: str) -> None:
    spec.messages[batch] = [m for m in spec.messages[batch] if m[2] != text]


def edit(batch: int | str, table: str, match: dict[str, Any], **changes: Any) -> Mutation:
    def mutate(spec: Spec) -> None:
        row(spec, batch, table, **match).update(changes)

    return mutate


def tamper(sql: str, *, after: bool = False) -> Mutation:
    def mutate(spec: Spec) -> None:
        (spec.tamper_after if after else spec.tamper).append(sql)

    return mutate


def key(dataset: str, batch: int, attribute: str, value: int | None) -> Mutation:
    def mutate(spec: Spec) -> None:
        if value is None:
            del spec.keys[(dataset, batch, attribute)]
        else:
            spec.keys[(dataset, batch, attribute)] = value

    return mutate


def both(*mutations: Mutation) -> Mutation:
    def mutate(spec: Spec) -> None:
        for m in mutations:
            m(spec)

    return mutate


Mutation = Callable[[Spec], None]


@dataclass(frozen=True)
class Defect:
    id: str
    mutate: Mutation
    fails: frozenset[str]
    #: (check name, substring its detail must contain)
    details: tuple[tuple[str, str], ...]


def _d(name: str, mutate: Mutation, fails: set[str], *details: tuple[str, str]) -> Defect:
    return Defect(name, mutate, frozenset(fails), details)


def _set(**fields: Any) -> Mutation:
    def mutate(spec: Spec) -> None:
        for name, value in fields.items():
            setattr(spec, name, value)

    return mutate


def _extra_message(batch: int, source: str, text: str, kind: str, data: str) -> Mutation:
    def mutate(spec: Spec) -> None:
        spec.messages[batch].append((batch, source, text, kind, data))

    return mutate


def _drop_messages(batch: int, text: str) -> Mutation:
    return lambda spec: drop_message(spec, batch, text)


def _drop_financial(spec: Spec) -> None:
    for k in [k for k in spec.keys if k[0] == "Financial"]:
        del spec.keys[k]


DEFECTS: tuple[Defect, ...] = (
    _d(
        "overlapping_versions",
        lambda s: add_copy(
            s,
            1,
            "dimcustomer",
            {"sk_customerid": 2},
            sk_customerid=99,
            effectivedate=D(2016, 5, 1),
            enddate=D(2016, 9, 1),
            iscurrent=False,
        ),
        {"DimCustomer no overlapping versions"},
        ("DimCustomer no overlapping versions", "1 versions overlapping"),
    ),
    _d(
        "two_current_rows",
        tamper("UPDATE {dimcustomer} SET iscurrent = true WHERE sk_customerid = 1"),
        {"DimCustomer one current version", "DimCustomer IsCurrent"},
        ("DimCustomer one current version", "1 natural keys without exactly one current"),
        ("DimCustomer IsCurrent", "1 versions whose IsCurrent disagrees"),
    ),
    _d(
        "fact_row_count",
        lambda s: drop(s, 3, "factmarkethistory", sk_securityid=3),
        {"FactMarketHistory row count", "FactMarketHistory rows per batch"},
        ("FactMarketHistory row count", "batch 3: 1 != 2 (DM_RECORDS)"),
        ("FactMarketHistory rows per batch", "batch 3: 1 != 2"),
    ),
    _d(
        "missing_pcr",
        _set(skip_pcr={2}),
        {"DImessages phase complete records"},
        ("DImessages phase complete records", "batch 2: 0"),
    ),
    _d(
        "effective_date_before_window",
        edit(1, "dimcompany", {"sk_companyid": 3}, effectivedate=D(2015, 12, 31)),
        {"DimCompany EffectiveDate window"},
        ("DimCompany EffectiveDate window", "batch 1: 1 of 3 outside 2016-01-01..2017-07-07"),
    ),
    _d(
        "trade_outside_its_batch_window",
        tamper("UPDATE {dimtrade} SET batchid = 2 WHERE tradeid = 1002"),
        {"DimTrade date window"},
        ("DimTrade date window", "batch 2: 1 of 3 with dates outside 2017-07-08..2017-07-08"),
    ),
    _d(
        "dob_alert_missing",
        _drop_messages(1, "DOB out of range"),
        {"DimCustomer DOB alerts"},
        ("DimCustomer DOB alerts", "batch 1: 0 != 1 (C_DOB_TO + C_DOB_TY)"),
    ),
    _d(
        "commission_alert_extra",
        _extra_message(
            2, "DimTrade", "Invalid trade commission", "Alert", "T_ID = 1004, T_COMM = 1.00"
        ),
        {"DimTrade commission alerts"},
        ("DimTrade commission alerts", "batch 2: 1 != 0 (T_InvalidCommision)"),
    ),
    _d(
        "end_date_gap",
        edit(1, "dimaccount", {"sk_accountid": 1}, enddate=D(2016, 4, 30)),
        {"DimAccount EndDate alignment"},
        ("DimAccount EndDate alignment", "1 expired versions"),
    ),
    _d(
        "no_end_of_time",
        edit(1, "dimsecurity", {"sk_securityid": 3}, enddate=D(2018, 1, 1)),
        # a version that ends must end where another begins: alignment breaks too
        {"DimSecurity end of time", "DimSecurity IsCurrent", "DimSecurity EndDate alignment"},
        ("DimSecurity end of time", "1 natural keys without exactly one version ending"),
    ),
    _d(
        "zero_length_version",
        lambda s: add_copy(
            s,
            1,
            "dimcompany",
            {"sk_companyid": 1},
            sk_companyid=0,
            effectivedate=D(2016, 6, 1),
            enddate=D(2016, 6, 1),
        ),
        {"DimCompany consolidation"},
        ("DimCompany consolidation", "1 versions effective and ended the same day"),
    ),
    _d(
        "duplicate_surrogate_key",
        both(
            lambda s: add_copy(s, 1, "dimbroker", {"sk_brokerid": 2}, brokerid=102),
            key("DimBroker", 1, "HR_BROKERS", 3),
        ),
        {"DimBroker distinct surrogate keys"},
        ("DimBroker distinct surrogate keys", "1 repeated surrogate keys"),
    ),
    _d(
        "batch_id_out_of_range",
        edit(1, "dimcompany", {"sk_companyid": 3}, batchid=4),
        {"DimCompany BatchID values"},
        ("DimCompany BatchID values", "BatchIDs [1, 4] (expected [1])"),
    ),
    _d(
        "dangling_fact_key",
        edit(2, "factwatches", {"sk_customerid": 4}, sk_securityid=77),
        {
            "Batch joined row counts",
            "FactWatches SK_SecurityID",
            "Data visibility joined row counts",
        },
        ("Batch joined row counts", "FactWatches batch 2: 2 joined != 3 rows"),
        ("FactWatches SK_SecurityID", "1 rows whose sk_securityid"),
    ),
    _d(
        "fifty_two_week_low_too_old",
        edit(
            3,
            "factmarkethistory",
            {"sk_securityid": 3},
            fiftytwoweeklow=8,
            sk_fiftytwoweeklowdate=dk(D(2016, 7, 1)),
        ),
        {"FactMarketHistory 52-week dates"},
        ("FactMarketHistory 52-week dates", "1 rows whose 52-week high or low date"),
    ),
    _d(
        "fifty_two_week_high_wrong_day",
        edit(
            2, "factmarkethistory", {"sk_securityid": 2}, sk_fiftytwoweekhighdate=dk(D(2017, 7, 7))
        ),
        {"FactMarketHistory 52-week values"},
        ("FactMarketHistory 52-week values", "1 rows whose 52-week high/low"),
    ),
    _d(
        "close_above_day_high",
        edit(
            3,
            "factmarkethistory",
            {"sk_securityid": 2},
            closeprice=27,
            **{"yield": round(2 / 27 * 100, 2)},
        ),
        {"FactMarketHistory 52-week range"},
        ("FactMarketHistory 52-week range", "1 rows not ordered"),
    ),
    _d(
        "yield_wrong",
        edit(1, "factmarkethistory", {"sk_securityid": 2, "closeprice": 20}, **{"yield": 11.0}),
        {"FactMarketHistory Yield"},
        ("FactMarketHistory Yield", "1 rows whose Yield"),
    ),
    _d(
        "no_earnings_alerts_missing",
        both(*(_drop_messages(b, "No earnings for company") for b in (1, 2, 3))),
        {"FactMarketHistory no-earnings alerts"},
        ("FactMarketHistory no-earnings alerts", "1 securities with a NULL PERatio and no alert"),
    ),
    _d(
        "phone_country_code_without_area",
        edit(3, "dimcustomer", {"sk_customerid": 5}, phone1="+1 555-0101"),
        {"DimCustomer phone numbers"},
        ("DimCustomer phone numbers", "1 of 6 versions"),
    ),
    _d(
        "gender_not_mfu",
        edit(3, "dimcustomer", {"sk_customerid": 5}, gender="X"),
        {"DimCustomer Gender"},
        ("DimCustomer Gender", "1 versions with a Gender"),
    ),
    _d(
        "nameplate_out_of_order",
        edit(1, "prospect", {"agencyid": "AG1"}, marketingnameplate="Boomer+HighValue"),
        {"Prospect MarketingNameplate"},
        ("Prospect MarketingNameplate", "1 prospects"),
    ),
    _d(
        "iscustomer_wrong",
        edit(1, "prospect", {"agencyid": "AG1"}, iscustomer=True),
        {"Prospect IsCustomer"},
        ("Prospect IsCustomer", "1 prospects whose IsCustomer"),
    ),
    _d(
        "prospect_update_date_not_a_batch_date",
        edit(1, "prospect", {"agencyid": "AG1"}, sk_updatedateid=dk(D(2016, 7, 1))),
        {"Prospect date keys"},
        ("Prospect date keys", "1 of 3 prospects"),
    ),
    _d(
        "prospect_updated_rows_message_missing",
        lambda s: s.messages.__setitem__(2, [m for m in s.messages[2] if m[2] != "Updated rows"]),
        {"Prospect status messages"},
        ("Prospect status messages", "batch 2: 0 'Updated rows' messages (expected 1)"),
    ),
    _d(
        "validation_row_missing",
        _set(skip_validation={(2, "FactWatches", "Inactive watches")}),
        {"DImessages validation rows", "FactWatches watch records"},
        ("DImessages validation rows", "batch 2: 23 (missing FactWatches/Inactive watches)"),
    ),
    _d(
        "warehouse_not_empty_at_batch_0",
        _set(reference_at_init=True),
        {"DImessages initial condition"},
        ("DImessages initial condition", "6 non-zero Validation rows at batch 0"),
    ),
    _d(
        "validation_after_its_pcr",
        _set(late_validation={2}),
        {"DImessages phase order"},
        ("DImessages phase order", "batch 2 validation at 2024-01-01 12:00:20.500000"),
    ),
    _d(
        "no_visibility_2",
        _set(skip_visibility_2=True),
        {"Data visibility schedule"},
        ("Data visibility schedule", "no Visibility_2 between the first Visibility_1 and CT3"),
    ),
    _d(
        "visibility_count_decreased",
        _extra_message(2, "FactWatches", "Row count", "Visibility_2", "1"),
        {"Data visibility row counts"},
        ("Data visibility row counts", "FactWatches: 1 decreases"),
    ),
    _d(
        "trade_broker_not_its_account_broker",
        edit(2, "dimtrade", {"tradeid": 1004}, sk_brokerid=2),
        {"DimTrade account keys"},
        ("DimTrade account keys", "1 trades whose SK_CustomerID or SK_BrokerID"),
    ),
    _d(
        "trade_company_not_its_security_company",
        edit(3, "dimtrade", {"tradeid": 1005}, sk_companyid=3),
        {"DimTrade security keys"},
        ("DimTrade security keys", "1 trades whose SK_CompanyID"),
    ),
    _d(
        "completed_trade_without_close_date",
        edit(2, "dimtrade", {"tradeid": 1004}, sk_closedateid=None, sk_closetimeid=None),
        {"DimTrade closed trades", "FactHoldings CurrentTradeID"},
        ("DimTrade closed trades", "1 trades whose close date/time disagree"),
    ),
    _d(
        "canceled_count_off",
        edit(1, "dimtrade", {"tradeid": 1000}, status="Canceled"),
        {"DimTrade canceled trades"},
        ("DimTrade canceled trades", "2 != 1 (T_CanceledTrades)"),
    ),
    _d(
        "holding_price_not_its_trade_price",
        edit(2, "factholdings", {"currenttradeid": 1004}, currentprice=12.0),
        {"FactHoldings CurrentTradeID"},
        ("FactHoldings CurrentTradeID", "1 holdings"),
    ),
    _d(
        "customer_local_tax_rate_wrong",
        edit(3, "dimcustomer", {"sk_customerid": 5}, localtaxrate=0.11),
        {"DimCustomer tax rates"},
        ("DimCustomer tax rates", "1 versions"),
    ),
    _d(
        "customer_demographics_not_the_prospect_s",
        edit(3, "dimcustomer", {"sk_customerid": 5}, creditrating=999),
        {"DimCustomer demographics"},
        ("DimCustomer demographics", "1 current customers"),
    ),
    _d(
        "null_in_not_null_column",
        edit(3, "dimtrade", {"tradeid": 1005}, executedby=None),
        {"DimTrade required fields"},
        ("DimTrade required fields", "executedby 1"),
    ),
    _d(
        "static_table_changed",
        lambda s: s.inserts[2].__setitem__(
            "industry", [{"in_id": "03", "in_name": "Mining", "in_sc_id": "MIN"}]
        ),
        {"Static tables unchanged"},
        ("Static tables unchanged", "Industry [2, 3, 3]"),
    ),
    _d(
        "changed_after_the_last_validation",
        tamper("DELETE FROM {factcashbalances} WHERE sk_accountid = 3", after=True),
        {"Validation matches the warehouse"},
        ("Validation matches the warehouse", "FactCashBalances/Row count: recorded 4, now 3"),
    ),
    _d(
        "inactive_customer_with_active_account",
        edit(3, "dimaccount", {"sk_accountid": 9}, status="Active"),
        {"DimAccount inactive customers"},
        ("DimAccount inactive customers", "1 current accounts of inactive customers"),
    ),
    _d(
        "account_not_re_versioned_with_its_customer",
        tamper("UPDATE {dimaccount} SET sk_customerid = 4 WHERE sk_accountid = 9"),
        {"DimAccount current customer", "DimAccount SK_CustomerID"},
        ("DimAccount current customer", "1 current accounts referencing an expired customer"),
    ),
    _d(
        "inactive_customers_off",
        tamper("UPDATE {dimcustomer} SET status = 'Inactive' WHERE sk_customerid = 5"),
        {"DimCustomer inactive customers", "DimAccount inactive customers", "Prospect IsCustomer"},
        ("DimCustomer inactive customers", "batch 3: 3 != 2 (C_INACT up to the batch)"),
    ),
    _d(
        "invalid_sp_rating",
        edit(1, "dimcompany", {"sk_companyid": 2}, sprating="XYZ"),
        {"DimCompany SPrating"},
        ("DimCompany SPrating", "1 versions with an SPrating"),
    ),
    _d(
        "sp_rating_alert_for_a_rated_company",
        _extra_message(
            1, "DimCompany", "Invalid SPRating", "Alert", "CO_ID = 0000001001, CO_SP_RATE = QQ"
        ),
        {"DimCompany SPrating alerts"},
        ("DimCompany SPrating alerts", "1 'Invalid SPRating' alerts"),
    ),
    _d(
        "malformed_alert",
        _extra_message(1, "DimTrade", "Invalid trade fee", "Alert", "T_ID=1002"),
        {"DImessages alert messages", "DimTrade fee alerts"},
        ("DImessages alert messages", "1 of 2 'Invalid trade fee' alerts"),
    ),
    _d(
        "answer_key_missing",
        key("DimBroker", 1, "HR_BROKERS", None),
        # HR_BROKERS is the DimBroker data set's only key
        {"DimBroker row count", "Audit table data sets"},
        ("DimBroker row count", "answer key DimBroker/HR_BROKERS batch 1 missing"),
    ),
    _d(
        "answer_keys_of_a_data_set_missing",
        _drop_financial,
        {"Audit table data sets", "Financial row count"},
        ("Audit table data sets", "missing: Financial"),
    ),
    _d(
        "account_minimum_from_keys",
        key("DimAccount", 2, "CA_UPDACCT", 5),
        {"DimAccount row count"},
        ("DimAccount row count", "batch 2: 2 < 6"),
    ),
    _d(
        "two_cash_rows_for_an_account_day",
        lambda s: add_copy(s, 1, "factcashbalances", {"sk_accountid": 2}, cash=1.0),
        {"FactCashBalances one row per account and day"},
        ("FactCashBalances one row per account and day", "1 (account, day) pairs"),
    ),
    _d(
        "two_open_watches",
        both(
            lambda s: add_copy(s, 3, "factwatches", {"sk_customerid": 5}),
            key("FactWatches", 3, "WH_ACTIVE", 2),
            key("FactWatches", 3, "WH_RECORDS", 3),
        ),
        {"FactWatches one open watch"},
        ("FactWatches one open watch", "1 (customer, security) pairs"),
    ),
    _d(
        "quarter_start_date_wrong",
        edit(1, "financial", {"fi_qtr": 3}, fi_qtr_start_date=D(2016, 7, 2)),
        {"Financial FI_QTR_START_DATE"},
        ("Financial FI_QTR_START_DATE", "1 rows"),
    ),
    _d(
        "tax_id_not_shaped_like_digen_s",
        edit(3, "dimcustomer", {"sk_customerid": 5}, taxid="12345678"),
        {"DimCustomer TaxID"},
        ("DimCustomer TaxID", "1 versions whose TaxID"),
    ),
    _d(
        "eps_and_diluted_eps_swapped_with_margin",
        edit(1, "financial", {"fi_qtr": 1}, fi_basic_eps=0.1, fi_margin=1.0),
        {"Financial EPS"},
        ("Financial EPS", "1 rows whose EPS"),
    ),
    _d(
        "broker_effective_after_first_day",
        edit(1, "dimbroker", {"sk_brokerid": 2}, effectivedate=D(2016, 2, 1)),
        {"DimBroker EffectiveDate"},
        ("DimBroker EffectiveDate", "1 brokers not effective from DimDate's first day 2016-01-01"),
    ),
)

assert len({d.id for d in DEFECTS}) == len(DEFECTS)
assert EOT.year == 9999

"""The dimension steps of the incremental TPC-DI dataflow, in their order: Prospect, DimCustomer
(with the cascade to DimAccount), DimAccount."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from etl_dataflows import coalesce, col, if_else, lit, old
from etl_dataflows.expressions import Expr
from tpcdi.incremental import rules
from tpcdi.incremental.builder import (
    ALERT_COLUMNS,
    NULL,
    FlowBuilder,
    alert_rows,
    display_name,
    problem_text,
    text_of,
    years_before,
)
from tpcdi.incremental.changes import CHANGE_COLUMNS


def add_prospects(b: FlowBuilder) -> None:
    """Prospect.csv (4.6.14): insert or update, IsCustomer, and the re-versioning of the matching
    customer on a demographic change (4.4.1.6.2).

    Every batch carries the whole prospect list, and on a day of a feed almost every row is the
    one already saved: such a row only gets the batch's SK_RecordDateID and BatchID (a two-column
    update). Whether a row changed is one comparison of its fields as one string
    (:func:`rules.prospect_values`, kept in the state as ``prospectvalues``); only a new or
    changed row takes the full update and the IsCustomer and customer work after it.

    Three steps, so that the work per row is what the row needs:

    1. ``seen_prospect`` (compiled; every row): a row the state already holds, whose key no other
       row of the batch has, gets the two-column update; every other row goes on. Such a row
       commutes with the rest of the batch (nothing else reads or writes its key), so taking it
       first is taking it in its place.
    2. ``apply_prospect`` (compiled; new, changed and repeated rows): the full logic, which still
       compares each row with the state as it is then.
    3. ``reversion_prospect_customer`` (interpreted: history tables; rows whose demographics
       changed and that match a customer): the customer's new version and its accounts.
    """
    flow = b.flow
    kind_rows = b.kind_rows
    batchid = b.batchid
    sk_batch = b.sk_batch
    dimcustomer = b.tables.dimcustomer
    dimaccount = b.tables.dimaccount
    prospect = b.tables.prospect
    aux_customer_match = b.tables.aux_customer_match
    aux_prospect_match = b.tables.aux_prospect_match
    prospect_fields = list(rules.PROSPECT_FIELDS)
    prospect_in = {
        "AgencyID": "string",
        "batchid": "int64",
        "line": "int64",
        **{src: CHANGE_COLUMNS[src] for _, src in prospect_fields},
        "sk_batchdate": "int64",
        "matchkey": "string",
        "marketingnameplate": "string",
        "prospect_values": "string",
        "repeated": "bool",
    }

    def prepare_prospect(t: pa.Table) -> pa.Table:
        out = {name: t.column(name) for name in prospect_in if name in t.column_names}
        out["sk_batchdate"] = rules.sk_dateid(t.column("batchdate"))
        out["matchkey"] = rules.matchkey(
            t.column("FirstName"),
            t.column("LastName"),
            t.column("AddressLine1"),
            t.column("AddressLine2"),
            t.column("PostalCode"),
        )
        out["marketingnameplate"] = rules.nameplate(
            networth=t.column("NetWorth"),
            income=t.column("Income"),
            children=t.column("NumberChildren"),
            cards=t.column("NumberCreditCards"),
            age=t.column("Age"),
            credit=t.column("CreditRating"),
            cars=t.column("NumberCars"),
        )
        out["prospect_values"] = rules.prospect_values(
            [t.column(src) for _, src in prospect_fields]
        )
        out["repeated"] = rules.repeated(t.column("AgencyID"))
        return pa.table(out)

    kind_rows("Prospect")
    flow.map("prospect_prepared", prepare_prospect, schema=prospect_in)
    seen = flow.transact("seen_prospect", input="prospect_prepared")
    held = seen.read(prospect, "AgencyID")
    same = coalesce(held["prospectvalues"] == col("prospect_values"), False) & ~col("repeated")
    seen.update(
        prospect,
        "AgencyID",
        set={"sk_recorddateid": sk_batch, "batchid": batchid},
        if_missing="skip",
        when=same,
    )
    seen.emit(include_input=True, when=~same)
    p = flow.transact("apply_prospect", input="seen_prospect")
    key = col("matchkey")
    has_key = key.not_null()
    saved = p.read(prospect, "AgencyID")
    # new (no saved row), or a field differs from the saved one
    changed = coalesce(saved["prospectvalues"] != col("prospect_values"), True)
    p.update(
        prospect,
        "AgencyID",
        set={
            "sk_recorddateid": sk_batch,
            "sk_updatedateid": sk_batch,
            "batchid": batchid,
            "iscustomer": has_key & coalesce(saved["iscustomer"], False),
            **{dst: col(src) for dst, src in prospect_fields},
            "marketingnameplate": col("marketingnameplate"),
            "matchkey": key,
            "prospectvalues": col("prospect_values"),
        },
        if_missing="insert",
        when=changed,
    )
    p.update(
        prospect,
        "AgencyID",
        set={"sk_recorddateid": sk_batch, "batchid": batchid},
        if_missing="skip",
        when=~changed,
    )
    # only a new key (a new prospect, or a changed name or address) needs IsCustomer looked up;
    # only changed demographics need the latest-prospect index and the matching customer updated
    # (if_else evaluates its branch only when taken: a repeated row skips the comparisons)
    worked = changed & has_key
    rekeyed = if_else(worked, coalesce(saved["matchkey"] != key, True), lit(False))
    demographics = if_else(
        worked,
        differs(saved["agencyid"], col("AgencyID"))
        | differs(saved["creditrating"], col("CreditRating"))
        | differs(saved["networth"], col("NetWorth"))
        | differs(saved["marketingnameplate"], col("marketingnameplate"))
        | differs(saved["matchkey"], key),
        lit(False),
    )
    matched = p.read(aux_customer_match, key, when=rekeyed | demographics)
    p.update(
        prospect,
        "AgencyID",
        set={"iscustomer": coalesce(matched["active"], 0) > 0},
        when=rekeyed,
    )
    p.update(
        aux_prospect_match,
        key,
        set={
            "agencyid": col("AgencyID"),
            "creditrating": col("CreditRating"),
            "networth": col("NetWorth"),
            "marketingnameplate": col("marketingnameplate"),
        },
        if_missing="insert",
        when=demographics,
    )
    # The matching customer's re-versioning reads and writes history tables (interpreted): it is
    # a step of its own, right after this one, fed only the rows whose demographics changed and
    # that match a customer, so this step (every prospect of every batch) runs compiled. Between
    # the two nothing else touches DimCustomer or DimAccount, and each runs its rows in the same
    # order, so the effect is the one of doing both in one transaction per row.
    owner = matched["customerid"]
    p.emit(
        owner=owner,
        AgencyID=col("AgencyID"),
        CreditRating=col("CreditRating"),
        NetWorth=col("NetWorth"),
        marketingnameplate=col("marketingnameplate"),
        batchid=col("batchid"),
        when=demographics & owner.not_null(),
    )
    r = flow.transact("reversion_prospect_customer", input="apply_prospect")
    current = r.read(dimcustomer, "owner")
    demographics_change = coalesce(current.found, False) & (
        differs(current["agencyid"], col("AgencyID"))
        | differs(current["creditrating"], col("CreditRating"))
        | differs(current["networth"], col("NetWorth"))
        | differs(current["marketingnameplate"], col("marketingnameplate"))
    )
    reversioned = r.update(
        dimcustomer,
        "owner",
        set={
            "agencyid": col("AgencyID"),
            "creditrating": col("CreditRating"),
            "networth": col("NetWorth"),
            "marketingnameplate": col("marketingnameplate"),
            "batchid": batchid,
        },
        when=demographics_change,
    )
    r.update_where(
        dimaccount,
        "customerid",
        col("owner"),
        set={"sk_customerid": reversioned["sk_customerid"], "batchid": batchid},
        when=demographics_change,
    )


def differs(saved: Expr, new: Expr) -> Expr:
    """Whether two values differ, a null equal to a null only (a state value compared in a
    kernel: ``!=``, and which side is null)."""
    return coalesce(saved != new, saved.is_null() != new.is_null())


def add_customers(b: FlowBuilder) -> None:
    """Customer.txt (4.6.4): SCD2 with the latest prospect demographics, IsCustomer of the
    prospects concerned, and the cascade to every current account of the customer (4.6.1.3)."""
    flow = b.flow
    ref = b.ref
    alerts = b.alerts
    kind_rows = b.kind_rows
    batchid = b.batchid
    dimcustomer = b.tables.dimcustomer
    dimaccount = b.tables.dimaccount
    prospect = b.tables.prospect
    aux_customer_match = b.tables.aux_customer_match
    aux_prospect_match = b.tables.aux_prospect_match
    customer_fields = [
        ("taxid", "C_TAX_ID"),
        ("lastname", "C_L_NAME"),
        ("firstname", "C_F_NAME"),
        ("middleinitial", "C_M_NAME"),
        ("tier", "C_TIER"),
        ("dob", "C_DOB"),
        ("addressline1", "C_ADLINE1"),
        ("addressline2", "C_ADLINE2"),
        ("postalcode", "C_ZIPCODE"),
        ("city", "C_CITY"),
        ("stateprov", "C_STATE_PROV"),
        ("country", "C_CTRY"),
        ("email1", "C_EMAIL_1"),
        ("email2", "C_EMAIL_2"),
    ]
    customer_in = {
        "C_ID": "int64",
        "batchid": "int64",
        "batchdate": "date",
        "line": "int64",
        **{src: CHANGE_COLUMNS[src] for _, src in customer_fields},
        "status_name": "string",
        "gender": "string",
        "phone1": "string",
        "phone2": "string",
        "phone3": "string",
        "nationaltaxratedesc": "string",
        "nationaltaxrate": "float64",
        "localtaxratedesc": "string",
        "localtaxrate": "float64",
        "matchkey": "string",
    }
    tax_names = {k: v[0] for k, v in ref.tax_rates.items()}
    tax_values = {k: v[1] for k, v in ref.tax_rates.items()}

    def prepare_customer(t: pa.Table) -> pa.Table:
        out = {name: t.column(name) for name in customer_in if name in t.column_names}
        out["status_name"] = rules.lookup(t.column("C_ST_ID"), ref.status_names, pa.string())
        out["gender"] = rules.gender(t.column("C_GNDR"))
        for n in (1, 2, 3):
            out[f"phone{n}"] = rules.phone(
                t.column(f"C_CTRY_{n}"),
                t.column(f"C_AREA_{n}"),
                t.column(f"C_LOCAL_{n}"),
                t.column(f"C_EXT_{n}"),
            )
        out["nationaltaxratedesc"] = rules.lookup(t.column("C_NAT_TX_ID"), tax_names, pa.string())
        out["nationaltaxrate"] = rules.lookup(t.column("C_NAT_TX_ID"), tax_values, pa.float64())
        out["localtaxratedesc"] = rules.lookup(t.column("C_LCL_TX_ID"), tax_names, pa.string())
        out["localtaxrate"] = rules.lookup(t.column("C_LCL_TX_ID"), tax_values, pa.float64())
        out["matchkey"] = rules.matchkey(
            t.column("C_F_NAME"),
            t.column("C_L_NAME"),
            t.column("C_ADLINE1"),
            t.column("C_ADLINE2"),
            t.column("C_ZIPCODE"),
        )
        return pa.table(out)

    kind_rows("Customer")
    flow.map("customer_prepared", prepare_customer, schema=customer_in)

    def bad_tier(t: pa.Table) -> pa.Array:
        return pc.invert(rules.known(pc.cast(t.column("C_TIER"), pa.string()), ["1", "2", "3"]))

    def bad_dob(t: pa.Table) -> pa.Array:
        dob = pc.cast(pc.cast(t.column("C_DOB"), pa.date32()), pa.int32())
        today = pc.cast(pc.cast(t.column("batchdate"), pa.date32()), pa.int32())
        limit = pa.array(
            [years_before(d, 100) for d in t.column("batchdate").to_pylist()], pa.int32()
        )
        return pc.fill_null(pc.or_(pc.less(dob, limit), pc.greater(dob, today)), False)

    flow.filter("customer_bad_tier", bad_tier, input="customer_prepared")
    alerts.append(
        flow.map(
            "customer_tier_alerts",
            lambda t: alert_rows(
                t,
                "DimCustomer",
                "Invalid customer tier",
                pc.binary_join_element_wise(
                    "C_ID = ",
                    text_of(t.column("C_ID")),
                    ", C_TIER = ",
                    text_of(t.column("C_TIER")),
                    "",
                ),
            ),
            schema=ALERT_COLUMNS,
        )
    )
    flow.filter("customer_bad_dob", bad_dob, input="customer_prepared")
    alerts.append(
        flow.map(
            "customer_dob_alerts",
            lambda t: alert_rows(
                t,
                "DimCustomer",
                "DOB out of range",
                pc.binary_join_element_wise(
                    "C_ID = ",
                    text_of(t.column("C_ID")),
                    ", C_DOB = ",
                    text_of(t.column("C_DOB")),
                    "",
                ),
            ),
            schema=ALERT_COLUMNS,
        )
    )

    c = flow.transact("apply_customer", input="customer_prepared")
    new_key = col("matchkey")
    demo = c.read(aux_prospect_match, new_key, when=new_key.not_null())
    cust = c.update(
        dimcustomer,
        "C_ID",
        set={
            **{dst: col(src) for dst, src in customer_fields},
            "status": col("status_name"),
            "gender": col("gender"),
            "phone1": col("phone1"),
            "phone2": col("phone2"),
            "phone3": col("phone3"),
            "nationaltaxratedesc": col("nationaltaxratedesc"),
            "nationaltaxrate": col("nationaltaxrate"),
            "localtaxratedesc": col("localtaxratedesc"),
            "localtaxrate": col("localtaxrate"),
            "agencyid": demo["agencyid"],
            "creditrating": demo["creditrating"],
            "networth": demo["networth"],
            "marketingnameplate": demo["marketingnameplate"],
            "batchid": batchid,
            "matchkey": new_key,
            **({"displayname": display_name("C_F_NAME", "C_L_NAME")} if b.version >= 2 else {}),
        },
        if_missing="insert",
    )
    old_key = cust.before("matchkey")
    was_active = coalesce(cust.before("status") == "Active", False)
    is_active = coalesce(col("status_name") == "Active", False)
    left = c.update(
        aux_customer_match,
        old_key,
        set={
            "active": old("active") - if_else(was_active, 1, 0),
            "customerid": if_else(old("customerid") == col("C_ID"), NULL, old("customerid")),
        },
        if_missing="skip",
        when=cust.found & old_key.not_null(),
    )
    joined = c.update(
        aux_customer_match,
        new_key,
        set={"active": old("active") + if_else(is_active, 1, 0), "customerid": col("C_ID")},
        if_missing="insert",
        when=new_key.not_null(),
    )
    c.update_where(
        prospect,
        "matchkey",
        old_key,
        set={"iscustomer": coalesce(left["active"], 0) > 0},
        when=cust.found & old_key.not_null() & coalesce(old_key != new_key, True),
    )
    c.update_where(
        prospect,
        "matchkey",
        new_key,
        set={"iscustomer": coalesce(joined["active"], 0) > 0},
        when=new_key.not_null(),
    )
    c.update_where(
        dimaccount,
        "customerid",
        col("C_ID"),
        set={
            "sk_customerid": cust["sk_customerid"],
            "status": if_else(col("status_name") == "Inactive", "Inactive", old("status")),
            "batchid": batchid,
        },
    )


def add_accounts(b: FlowBuilder) -> None:
    """Account.txt (4.6.1): SCD2 with the current broker and customer keys."""
    flow = b.flow
    ref = b.ref
    kind_rows = b.kind_rows
    problems = b.problems
    batchid = b.batchid
    dimcustomer = b.tables.dimcustomer
    dimaccount = b.tables.dimaccount
    dimbroker = b.tables.dimbroker
    account_in = {
        "CA_ID": "int64",
        "CA_B_ID": "int64",
        "CA_C_ID": "int64",
        "CA_NAME": "string",
        "CA_TAX_ST": "int64",
        "status_name": "string",
        "batchid": "int64",
        "line": "int64",
    }

    def prepare_account(t: pa.Table) -> pa.Table:
        out = {name: t.column(name) for name in account_in if name in t.column_names}
        out["status_name"] = rules.lookup(t.column("CA_ST_ID"), ref.status_names, pa.string())
        return pa.table(out)

    kind_rows("Account")
    flow.map("account_prepared", prepare_account, schema=account_in)
    a = flow.transact("apply_account", input="account_prepared")
    broker = a.read(dimbroker, "CA_B_ID")
    owner_row = a.read(dimcustomer, "CA_C_ID")
    refs = broker.found & owner_row.found
    a.update(
        dimaccount,
        "CA_ID",
        set={
            "sk_brokerid": broker["sk_brokerid"],
            "sk_customerid": owner_row["sk_customerid"],
            # 4.6.1.3: the accounts of an inactive customer are inactive (DIGen sends an
            # occasional ACTV account update for a customer that is already inactive)
            "status": if_else(owner_row["status"] == "Inactive", "Inactive", col("status_name")),
            "accountdesc": col("CA_NAME"),
            "taxstatus": col("CA_TAX_ST"),
            "batchid": batchid,
            "customerid": col("CA_C_ID"),
        },
        if_missing="insert",
        when=refs,
    )
    about = problem_text(
        ("CA_ID = ", "CA_ID"), (", CA_B_ID = ", "CA_B_ID"), (", CA_C_ID = ", "CA_C_ID")
    )
    a.emit(
        about.columns(),
        batchid=batchid,
        line=col("line"),
        problem=if_else(refs, lit(None), "Unknown broker or customer"),
    )
    problems("apply_account", "Account", about)

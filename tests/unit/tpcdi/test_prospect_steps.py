"""Prospect.csv in the incremental dataflow: ``seen_prospect`` takes unchanged rows whose key is
unique in the engine batch ahead of the rest, ``apply_prospect`` the others. The result must be
the one of taking every row in stream order with the specification's rule (a new or changed row
replaces the saved one and gets both date keys; an unchanged one only SK_RecordDateID and
BatchID), also when an engine batch spans days and a prospect changes and changes back within it;
and the local executor must equal the serial oracle batch by batch."""

from __future__ import annotations

import datetime
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from etl_dataflows.executors.local import LocalExecutor
from etl_dataflows.testing import RunResult, assert_same_results, make_batch, run_in_memory
from tpcdi.incremental import build_flow
from tpcdi.incremental.changes import MICROS_PER_DAY
from tpcdi.incremental.rules import repeated, sk_dateid

START = datetime.date(2017, 7, 8)

prospect = st.fixed_dictionaries(
    {
        "AgencyID": st.sampled_from(["A1", "A2", "A3", "A4"]),
        "LastName": st.sampled_from(["Ames", "Bell"]),
        "CreditRating": st.none() | st.sampled_from([600, 700]),
    }
)
# a day is a list of prospect rows; an engine batch is a list of days
days = st.lists(st.lists(prospect, min_size=1, max_size=6), min_size=1, max_size=3)


def events(batches: list[list[list[dict[str, Any]]]]) -> list[list[dict[str, Any]]]:
    """The ``changes`` events of each engine batch: day d is BatchID d + 2, dated START + d."""
    out = []
    day = 0
    for batch in batches:
        rows = []
        for records in batch:
            date = START + datetime.timedelta(days=day)
            micros = (date - datetime.date(1970, 1, 1)).days * MICROS_PER_DAY
            for line, record in enumerate(records, start=1):
                rows.append(
                    {
                        **record,
                        "kind": "Prospect",
                        "batchid": day + 2,
                        "batchdate": date,
                        "line": line,
                        "FirstName": "Ann",
                        "AddressLine1": "1 Main St",
                        "PostalCode": "10001",
                        "_ts": micros,
                        "_pos": (day + 2) * 10**10 + line,
                    }
                )
            day += 1
        out.append(rows)
    return out


def model(batches: list[list[dict[str, Any]]]) -> dict[str, tuple[Any, ...]]:
    """AgencyID -> (LastName, CreditRating, SK_RecordDateID, SK_UpdateDateID, BatchID), every
    row taken in stream order."""
    saved: dict[str, tuple[Any, ...]] = {}
    for rows in batches:
        for row in rows:
            sk = sk_dateid(pa.array([row["batchdate"]], pa.date32()))[0].as_py()
            values = (row["LastName"], row["CreditRating"])
            held = saved.get(row["AgencyID"])
            if held is None or held[:2] != values:
                saved[row["AgencyID"]] = (*values, sk, sk, row["batchid"])
            else:
                saved[row["AgencyID"]] = (*values, sk, held[3], row["batchid"])
    return saved


def saved(result: RunResult) -> dict[str, tuple[Any, ...]]:
    """The prospect table a run left, as :func:`model` gives it."""
    return {
        r["agencyid"]: (
            r["lastname"],
            r["creditrating"],
            r["sk_recorddateid"],
            r["sk_updatedateid"],
            r["batchid"],
        )
        for r in result.final_state.tables["prospect"].to_pylist()
    }


def test_repeated_marks_every_row_of_a_value_seen_twice() -> None:
    got = repeated(pa.chunked_array([["a", "b"], ["a", None, None, "c"]]))
    assert got.to_pylist() == [True, False, True, False, False, False]


def test_the_prospect_steps_are_compiled() -> None:
    analysis = LocalExecutor(build_flow()).explain()
    assert analysis["seen_prospect"].compiled
    assert analysis["apply_prospect"].compiled


@settings(max_examples=30, deadline=None)
@given(st.lists(days, min_size=1, max_size=3))
def test_prospects_as_taken_in_stream_order(batches: list[list[list[dict[str, Any]]]]) -> None:
    flow = build_flow().build()
    rows = events(batches)
    made = [make_batch(flow, i, changes=batch) for i, batch in enumerate(rows, start=1)]
    serial = run_in_memory(flow, made, executor="serial")
    local = run_in_memory(flow, made, executor="local")
    assert_same_results(serial, local)
    assert saved(local) == model(rows)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.lists(prospect, min_size=1, max_size=6), min_size=1, max_size=4), st.data())
def test_prospects_when_days_are_cut_anywhere(
    day_rows: list[list[dict[str, Any]]], data: st.DataObject
) -> None:
    """The same rows cut into engine batches at any position, a day's rows split across
    batches (``streamdi tpcdi run`` cuts an update larger than its batch cap that way)."""
    flow = build_flow().build()
    stream = [row for day in events([[day] for day in day_rows]) for row in day]
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(stream) - 1)), max_size=len(stream))))
    pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    pieces = [piece for piece in pieces if piece]
    made = [make_batch(flow, i, changes=piece) for i, piece in enumerate(pieces, start=1)]
    serial = run_in_memory(flow, made, executor="serial")
    local = run_in_memory(flow, made, executor="local")
    assert_same_results(serial, local)
    assert saved(local) == model([stream])


def _day(day: int) -> dict[str, Any]:
    date = START + datetime.timedelta(days=day)
    micros = (date - datetime.date(1970, 1, 1)).days * MICROS_PER_DAY
    return {"batchid": day + 2, "batchdate": date, "_ts": micros}


PERSON = {
    "FirstName": "Ann",
    "LastName": "Ames",
    "AddressLine1": "1 Main St",
    "PostalCode": "10001",
}
CUSTOMER = {"C_F_NAME": "Ann", "C_L_NAME": "Ames", "C_ADLINE1": "1 Main St", "C_ZIPCODE": "10001"}


def prospect_row(day: int, line: int, **values: Any) -> dict[str, Any]:
    row = {"kind": "Prospect", "line": line, "AgencyID": "A1", **PERSON, **values, **_day(day)}
    return {**row, "_pos": (day + 2) * 10**10 + line}


def customer_row(day: int, line: int) -> dict[str, Any]:
    row = {"kind": "Customer", "line": line, "C_ID": 7, "C_TIER": 1, **CUSTOMER, **_day(day)}
    return {**row, "_pos": (day + 2) * 10**10 + 10**8 + line}


def test_a_changed_prospect_reversions_its_customer() -> None:
    """Day 0: the prospect, then a customer with the same name and address (who takes its
    demographics). Day 1: the prospect's credit rating changes (a new customer version with it);
    day 2: only its income changes (not a demographic DimCustomer holds: no new version)."""
    flow = build_flow().build()
    batches = [
        [prospect_row(0, 1, CreditRating=600, Income=1), customer_row(0, 1)],
        [prospect_row(1, 1, CreditRating=700, Income=1)],
        [prospect_row(2, 1, CreditRating=700, Income=2)],
    ]
    made = [make_batch(flow, i, changes=rows) for i, rows in enumerate(batches, start=1)]
    serial = run_in_memory(flow, made, executor="serial")
    local = run_in_memory(flow, made, executor="local")
    assert_same_results(serial, local)
    versions = sorted(
        local.final_state.tables["dimcustomer"].to_pylist(), key=lambda r: r["sk_customerid"]
    )
    assert [(v["agencyid"], v["creditrating"], v["iscurrent"]) for v in versions] == [
        ("A1", 600, False),
        ("A1", 700, True),
    ]

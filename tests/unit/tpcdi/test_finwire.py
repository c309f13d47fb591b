"""FINWIRE fixed-width records: CMP, SEC and FIN, a company by CIK or by name, rejects."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from tpcdi.readers import read_batch_finwire
from tpcdi.readers.registry import FINWIRE_RECORDS


def fixed(
    kind: str, values: dict[str, str], pts: str = "19670101-154842", company: str | None = None
) -> str:
    """A record of ``kind``: text right-padded, numbers left-padded, per the registry widths."""
    parts = [pts, kind]
    for field in FINWIRE_RECORDS[kind]:
        if field.name == "CoNameOrCIK":
            assert company is not None
            parts.append(company if company.isdigit() else company.ljust(60))
            continue
        value = values.get(field.name, "")
        text_field = field.type.__str__() == "string"
        parts.append(value.ljust(field.width) if text_field else value.rjust(field.width))
    return "".join(parts)


CMP = {
    "CompanyName": "Acme Widgets",
    "CIK": "0000000042",
    "Status": "ACTV",
    "IndustryID": "AA",
    "SPrating": "AA+",
    "FoundingDate": "19500102",
    "AddrLine1": "1 Main St",
    "PostalCode": "12345",
    "City": "Akron",
    "StateProvince": "OH",
    "Country": "",
    "CEOname": "Jo Smith",
    "Description": "widgets",
}
SEC = {
    "Symbol": "ACME",
    "IssueType": "COMMON",
    "Status": "ACTV",
    "Name": "Acme common",
    "ExID": "NYSE",
    "ShOut": "1000000",
    "FirstTradeDate": "19600101",
    "FirstTradeExchg": "19610101",
    "Dividend": "1.25",
}
FIN = {
    "Year": "1967",
    "Quarter": "2",
    "QtrStartDate": "19670401",
    "PostingDate": "19670402",
    "Revenue": "1000000.00",
    "Earnings": "-12.50",
    "EPS": "0.01",
    "DilutedEPS": "0.01",
    "Margin": "0.10",
    "Inventory": "5.00",
    "Assets": "6.00",
    "Liabilities": "7.00",
    "ShOut": "100",
    "DilutedShOut": "110",
}


def test_records_by_type_with_company_by_cik_or_name(tmp_path: Path) -> None:
    (tmp_path / "FINWIRE1967Q2").write_text(
        "\r\n".join(
            [
                fixed("SEC", SEC, "19670427-161251", company="Acme Widgets"),
                fixed("FIN", FIN, "19670501-000000", company="0000000042"),
            ]
        )
        + "\r\n"
    )
    # trailing blanks cut off a CMP line are restored
    (tmp_path / "FINWIRE1967Q1").write_text(fixed("CMP", CMP).rstrip() + "\r\n")
    result = read_batch_finwire(tmp_path, line_numbers=True)
    assert result.rejects.num_rows == 0
    company = result["CMP"].to_pylist()[0]
    assert company["CIK"] == 42 and company["CompanyName"] == "Acme Widgets"
    assert company["Country"] is None and company["AddrLine2"] is None
    assert company["FoundingDate"] == datetime.date(1950, 1, 2)
    assert company["PTS"] == datetime.datetime(1967, 1, 1, 15, 48, 42)
    security = result["SEC"].to_pylist()[0]
    assert (security["CoName"], security["CoCIK"]) == ("Acme Widgets", None)
    assert security["ShOut"] == 1_000_000 and security["Dividend"] == pytest.approx(1.25)
    financial = result["FIN"].to_pylist()[0]
    assert (financial["CoName"], financial["CoCIK"]) == (None, 42)
    assert financial["Earnings"] == pytest.approx(-12.5) and financial["Quarter"] == 2
    assert (financial["file"], financial["_line"]) == ("FINWIRE1967Q2", 2)


def test_files_are_read_in_year_and_quarter_order(tmp_path: Path) -> None:
    for name, pts in (("FINWIRE1968Q1", "19680101-000000"), ("FINWIRE1967Q4", "19671001-000000")):
        (tmp_path / name).write_text(fixed("CMP", CMP, pts) + "\r\n")
    files = read_batch_finwire(tmp_path)["CMP"].column("file").to_pylist()
    assert files == ["FINWIRE1967Q4", "FINWIRE1968Q1"]


def test_bad_records_are_rejected(tmp_path: Path) -> None:
    good = fixed("CMP", CMP)
    lines = [
        good,
        good + "EXTRA",  # longer than a CMP record
        good.replace("CMP", "XYZ", 1),  # unknown record type
        fixed("SEC", {**SEC, "ShOut": "12x"}, company="0000000042"),
        fixed("FIN", {**FIN, "QtrStartDate": "19671340"}, company="0000000042"),
        fixed("SEC", {**SEC, "Symbol": ""}, company="0000000042"),
        "19670101-996000CMP" + good[18:],
    ]
    (tmp_path / "FINWIRE1967Q1").write_text("\r\n".join(lines) + "\r\n")
    result = read_batch_finwire(tmp_path)
    assert result["CMP"].num_rows == 1
    reasons = {r["line"]: r["reason"] for r in result.rejects.to_pylist()}
    assert sorted(reasons) == [2, 3, 4, 5, 6, 7]
    assert reasons[2].startswith("CMP record of 548 characters")
    assert reasons[3] == "unknown record type 'XYZ'"
    assert reasons[4].startswith("ShOut: cannot read")
    assert reasons[5].startswith("QtrStartDate: cannot read")
    assert reasons[6] == "required field empty: Symbol"
    assert reasons[7].startswith("PTS: cannot read")
    assert {r["file"] for r in result.rejects.to_pylist()} == {"FINWIRE1967Q1"}

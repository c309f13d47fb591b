"""Pipe-delimited and CSV sources: typed columns, CDC columns, CRLF, and rejected lines."""

from __future__ import annotations

import datetime
from pathlib import Path

import pyarrow as pa
import pytest

from tpcdi.exceptions import SourceNotFound, UnknownSourceFile
from tpcdi.readers import iter_file, read_audit, read_batch_date, read_file, source_file

TRADE_B1 = (
    "0|2012-07-07 00:02:34|CMPT|TMB|0|AAAA|2939|9.57|0|3160|10.02|58.95|27.31|1611.19\r\n"
    "1|2012-07-07 00:14:35|PNDG|TLB|1|BBBB|10|1.54|11|Jo Smith||||\r\n"
)


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(text.encode())
    return path


def test_historical_trade_file_is_typed_with_nulls_for_empty_fields(tmp_path: Path) -> None:
    path = write(tmp_path / "Batch1", "Trade.txt", TRADE_B1)
    result = read_file(path)
    assert result.rejects.num_rows == 0
    assert result.table.schema == source_file("Trade.txt").schema(1)
    rows = result.table.to_pylist()
    assert rows[0]["T_DTS"] == datetime.datetime(2012, 7, 7, 0, 2, 34)
    assert rows[0]["T_IS_CASH"] is False and rows[1]["T_IS_CASH"] is True
    assert rows[0]["T_TAX"] == pytest.approx(1611.19)
    assert rows[1]["T_TRADE_PRICE"] is None and rows[1]["T_EXEC_NAME"] == "Jo Smith"


def test_incremental_batch_has_cdc_columns_first(tmp_path: Path) -> None:
    line = "U|1488405|372101|2017-07-08 00:57:49|SBMT|TLS|0|AAAA|5225|4.06|428|990||||\r\n"
    result = read_file(write(tmp_path / "Batch2", "Trade.txt", line))
    assert result.table.column_names[:3] == ["CDC_FLAG", "CDC_DSN", "T_ID"]
    assert result.table.to_pylist()[0]["CDC_DSN"] == 1488405
    # the same line read as Batch1 data has two fields too many
    rejected = read_file(tmp_path / "Batch2" / "Trade.txt", batch=1).rejects.to_pylist()
    assert rejected[0]["reason"] == "expected 14 fields, found 16"


def test_lf_and_missing_final_terminator_are_read(tmp_path: Path) -> None:
    path = write(
        tmp_path, "TradeHistory.txt", "0|2012-07-07 00:01:13|SBMT\n0|2012-07-07 00:02:34|CMPT"
    )
    table = read_file(path).table
    assert table.column("TH_ST_ID").to_pylist() == ["SBMT", "CMPT"]


def test_bad_lines_are_rejected_with_line_reason_and_text_and_the_rest_is_kept(
    tmp_path: Path,
) -> None:
    text = (
        "0|2012-07-07 00:01:13|SBMT\r\n"
        "1|2012-07-07 00:01:14\r\n"  # too few fields
        "x2|2012-07-07 00:01:15|CMPT\r\n"  # bad integer
        "3|2012-13-07 00:01:16|CMPT\r\n"  # bad timestamp
        "4||CMPT\r\n"  # required field empty
        "\r\n"  # empty line
        "5|2012-07-07 00:01:17|CNCL\r\n"
    )
    result = read_file(write(tmp_path, "TradeHistory.txt", text), line_numbers=True)
    assert result.table.column("TH_T_ID").to_pylist() == [0, 5]
    assert result.table.column("_line").to_pylist() == [1, 7]
    rejects = {r["line"]: r for r in result.rejects.to_pylist()}
    assert sorted(rejects) == [2, 3, 4, 5, 6]
    assert rejects[2]["reason"] == "expected 3 fields, found 2"
    assert rejects[2]["text"] == "1|2012-07-07 00:01:14"
    assert rejects[3]["reason"].startswith("TH_T_ID: cannot read 'x2'")
    assert rejects[4]["reason"].startswith("TH_DTS: cannot read '2012-13-07 00:01:16'")
    assert rejects[5]["reason"] == "required field empty: TH_DTS"
    assert rejects[6]["reason"] == "empty line"
    assert {r["file"] for r in rejects.values()} == {"TradeHistory.txt"}


def test_chunked_reading_keeps_order_and_line_numbers(tmp_path: Path) -> None:
    lines = [f"{i}|2012-07-07 00:00:{i % 60:02d}|SBMT" for i in range(500)]
    lines[123] = "broken"
    lines[377] = "9|not a time|SBMT"
    path = write(tmp_path, "TradeHistory.txt", "\r\n".join(lines) + "\r\n")
    whole = read_file(path, line_numbers=True)
    pieces = list(iter_file(path, line_numbers=True, chunk_bytes=256))
    assert len(pieces) > 10
    assert pa.concat_tables([p.table for p in pieces]).equals(whole.table)
    assert sorted(r["line"] for p in pieces for r in p.rejects.to_pylist()) == [124, 378]
    assert whole.table.num_rows == 498
    assert whole.table.column("_line").to_pylist() == [
        i + 1 for i in range(500) if i not in (123, 377)
    ]


def test_csv_quoting_and_prospect_types(tmp_path: Path) -> None:
    line = (
        "Gab455,Gabriel,suzanna,,m,10168 crystal hills east,,35816,Warwick,CO,"
        'United States of America,1-843-331-7144,85788,1,2,M,71,836,O,"Toys ""R"" Us",0,604158\r\n'
    )
    row = read_file(write(tmp_path / "Batch1", "Prospect.csv", line)).table.to_pylist()[0]
    assert (
        row["Employer"] == 'Toys "R" Us' and row["Income"] == 85788 and row["MiddleInitial"] is None
    )


def test_date_and_time_flags_accept_true_false_and_0_1(tmp_path: Path) -> None:
    text = "000000|00:00:00|00|00|00|00:00|00|00:00:00|false|0\r\n093000|09:30:00|09|09|30|09:30|00|09:30:00|true|1\r\n"
    table = read_file(write(tmp_path, "Time.txt", text)).table
    assert table.column("MarketHoursFlag").to_pylist() == [False, True]
    assert table.column("OfficeHoursFlag").to_pylist() == [False, True]
    assert table.column("TimeValue").to_pylist() == [datetime.time(0, 0), datetime.time(9, 30)]


def test_batch_date_and_audit_keys(tmp_path: Path) -> None:
    write(tmp_path / "Batch2", "BatchDate.txt", "2017-07-08\r\n")
    assert read_batch_date(tmp_path / "Batch2" / "BatchDate.txt") == datetime.date(2017, 7, 8)
    write(
        tmp_path,
        "Batch2_audit.csv",
        "DataSet, BatchID ,Date , Attribute , Value, DValue\r\nBatch,2,2017-07-08,FirstDay,,\r\n",
    )
    write(
        tmp_path / "Batch2",
        "Trade_audit.csv",
        "DataSet, BatchID ,Date , Attribute , Value, DValue\r\n"
        "DimTrade,2,,T_NEW,214,\r\nGenerator,1,,SF,,3000.0\r\n",
    )
    audit = read_audit(tmp_path).to_pylist()
    assert {(r["DataSet"], r["Attribute"], r["Value"], r["DValue"]) for r in audit} == {
        ("Batch", "FirstDay", None, None),
        ("DimTrade", "T_NEW", 214, None),
        ("Generator", "SF", None, 3000.0),
    }
    assert next(r for r in audit if r["Attribute"] == "FirstDay")["Date"] == datetime.date(
        2017, 7, 8
    )


def test_unknown_and_missing_files_are_errors(tmp_path: Path) -> None:
    with pytest.raises(UnknownSourceFile):
        read_file(write(tmp_path, "Other.txt", "x\r\n"))
    with pytest.raises(SourceNotFound):
        read_file(tmp_path / "Trade.txt")

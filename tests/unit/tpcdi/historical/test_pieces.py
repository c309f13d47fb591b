"""The historical load's facts in bounded pieces: Parquet in, filtered and conformed Arrow
pieces of at most the piece size out, the largest one recorded; the big sources streamed to
Parquet as they are read, rejects kept."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from migration.schema import WarehouseLayout
from tpcdi.historical.inputs import spill_file
from tpcdi.historical.pieces import FactOutput, PieceLog, conform, load_fact
from tpcdi.incremental import build_flow
from tpcdi.warehouse.exceptions import WarehouseMismatch
from tpcdi.warehouse.warehouse import Warehouse

COLUMNS = {"accountid": "int64", "sk_accountid": "int64", "cash": "float64", "batchid": "int64"}


def spark_like_output(folder: Path, rows: int, files: int = 3) -> Path:
    """Part files as Spark writes them: more columns than the warehouse's, int32 where the
    warehouse has int64, every fifth row without its surrogate key."""
    folder.mkdir(parents=True)
    per = rows // files
    for f in range(files):
        ids = list(range(f * per, (f + 1) * per))
        pq.write_table(
            pa.table(
                {
                    "accountid": pa.array(ids, pa.int32()),
                    "sk_accountid": pa.array([None if i % 5 == 0 else i + 1 for i in ids]),
                    "cash": pa.array([i / 4 for i in ids], pa.float64()),
                    "batchid": pa.array([1] * len(ids), pa.int32()),
                    "sk_dateid": pa.array([20200101] * len(ids), pa.int64()),
                    "sk_customerid": pa.array([7] * len(ids), pa.int64()),
                    "_line": pa.array([i + 1 for i in ids], pa.int64()),
                }
            ),
            folder / f"part-{f:05d}.snappy.parquet",
            row_group_size=1000,
        )
    (folder / "_SUCCESS").write_bytes(b"")
    return folder


def test_pieces_are_bounded_filtered_and_conformed(tmp_path: Path) -> None:
    path = spark_like_output(tmp_path / "factcashbalances_all", 30_000)
    output = FactOutput("factcashbalances", path, COLUMNS, ("sk_accountid",))
    pieces = list(output.pieces(rows=4096))
    assert pieces and all(0 < p.num_rows <= 4096 for p in pieces)
    assert all(p.schema.names == list(COLUMNS) for p in pieces)
    assert all(p.schema.field("accountid").type == pa.int64() for p in pieces)
    ids = sorted(i for p in pieces for i in p["accountid"].to_pylist())
    assert ids == [i for i in range(30_000) if i % 5 != 0]


def test_a_missing_column_is_refused_by_name() -> None:
    with pytest.raises(WarehouseMismatch, match="sk_dateid"):
        conform(pa.table({"accountid": [1]}), {"accountid": "int64", "sk_dateid": "int64"})


def test_the_load_appends_every_piece_and_names_the_largest(tmp_path: Path) -> None:
    flow = build_flow().build()
    layout = WarehouseLayout(flow, "tpcdi")
    path = spark_like_output(tmp_path / "factcashbalances_all", 9_000)
    columns = dict(COLUMNS, sk_dateid="int64", sk_customerid="int64")
    with Warehouse(layout, ["duckdb"], duckdb_path=tmp_path / "dw.duckdb") as warehouse:
        warehouse.reset()
        log = PieceLog()
        output = FactOutput("factcashbalances", path, columns, ("sk_accountid",))
        loaded = load_fact(warehouse, output, log)
        assert loaded == 9000 - 1800 == warehouse.count("factcashbalances")
    assert log.tables["factcashbalances"]["rows"] == loaded
    assert log.largest["table"] == "factcashbalances" and 0 < log.largest["rows"] <= loaded
    assert log.as_json()["largest"] == log.largest


def test_a_big_source_streams_to_parquet_with_its_rejects(tmp_path: Path) -> None:
    batch1 = tmp_path / "Batch1"
    batch1.mkdir()
    lines = [f"{i}|2012-07-07|{i % 7}|100.5\r\n" for i in range(5000)]
    lines[10] = "bad|line\r\n"
    (batch1 / "CashTransaction.txt").write_text("".join(lines), newline="")
    out = tmp_path / "CashTransaction.parquet"
    rows, rejects = spill_file(batch1 / "CashTransaction.txt", out, line_numbers=True)
    assert rows == 4999 and rejects.num_rows == 1
    assert rejects["line"].to_pylist() == [11]
    written = pq.read_table(out)
    assert written.num_rows == 4999 and "_line" in written.column_names
    con = duckdb.connect()
    assert con.execute(f"SELECT max(_line) FROM read_parquet('{out}')").fetchone() == (5000,)


def test_the_load_ends_with_the_file_settled_in_a_new_instance(tmp_path: Path) -> None:
    """:meth:`Warehouse.settle` closes the load's connection, opens the file again and
    checkpoints it there: the database instance is a new one (what the load attached is gone),
    the rows loaded before are read through it, and the file was written after the load's last
    commit. Without a DuckDB target there is nothing to settle."""
    flow = build_flow().build()
    layout = WarehouseLayout(flow, "tpcdi")
    path = spark_like_output(tmp_path / "factcashbalances_all", 3_000)
    columns = dict(COLUMNS, sk_dateid="int64", sk_customerid="int64")
    dw = tmp_path / "dw.duckdb"
    with Warehouse(layout, ["duckdb"], duckdb_path=dw) as warehouse:
        warehouse.reset()
        output = FactOutput("factcashbalances", path, columns, ("sk_accountid",))
        loaded = load_fact(warehouse, output, PieceLog())
        loading = warehouse.duckdb()
        loading.execute("ATTACH ':memory:' AS probe")  # attachments belong to the instance
        loading.execute("CHECKPOINT")
        before = dw.stat().st_mtime_ns
        seconds = warehouse.settle()
        assert seconds is not None and seconds >= 0
        assert warehouse.duckdb() is not loading
        attached = warehouse.duckdb().execute("SELECT database_name FROM duckdb_databases()")
        assert "probe" not in {row[0] for row in attached.fetchall()}  # a new instance
        assert dw.stat().st_mtime_ns > before
        assert warehouse.count("factcashbalances") == loaded
    unreachable = Warehouse(layout, ["postgres"], postgres_dsn="postgresql://nobody@127.0.0.1:1/x")
    assert unreachable.settle() is None

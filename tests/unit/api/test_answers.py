"""Every column type DuckDB can answer with becomes JSON: an answer never fails to render."""

from __future__ import annotations

import json

import duckdb

from api.answers import json_rows

EVERY_KIND = """
SELECT INTERVAL 1 DAY AS interval, TIME '12:00:01' AS time, uuid() AS uuid, [1, 2] AS list,
       {'a': 1} AS struct, '\\x00'::BLOB AS blob, TIMESTAMP '2024-01-01 00:00:00' AS ts,
       TIMESTAMPTZ '2024-01-01 00:00:00+00' AS tstz, DATE '2024-01-02' AS date,
       'a'::ENUM('a', 'b') AS enum, MAP {'k': 1} AS map, 1::HUGEINT AS huge, '101'::BIT AS bit,
       'nan'::FLOAT AS nan, 'inf'::DOUBLE AS inf, [1.5, 'nan'::DOUBLE] AS nans,
       18446744073709551615::UBIGINT AS ubig, 1.25::DECIMAL(10, 2) AS dec, NULL::TIME AS null_time,
       TIMETZ '12:00:00+01' AS timetz
"""


def test_every_kind_of_column_renders_as_json() -> None:
    with duckdb.connect() as connection:
        table = connection.sql(EVERY_KIND).to_arrow_table()
    [row] = json_rows(table)
    text = json.dumps(row, allow_nan=False)  # strict JSON: no NaN, no unknown types
    values = dict(zip(table.column_names, json.loads(text), strict=True))
    assert values["interval"] == {"months": 0, "days": 1, "nanoseconds": 0}
    assert values["time"] == "12:00:01"
    assert values["list"] == [1, 2] and values["struct"] == {"a": 1}
    assert values["blob"] == "00" and values["enum"] == "a"
    assert values["ts"].startswith("2024-01-01T00:00:00") and values["date"] == "2024-01-02"
    assert values["nan"] is None and values["inf"] is None and values["nans"] == [1.5, None]
    assert values["ubig"] == 18446744073709551615 and values["dec"] == 1.25
    assert values["null_time"] is None and len(values["uuid"]) == 36

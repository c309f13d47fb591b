"""DImessages rows of the historical load: alerts, rejected source lines and status rows, and the
split of a fact table into the rows whose references resolved and alerts for the others (file,
line and the record's keys), so a record is never dropped silently."""

from __future__ import annotations

import datetime

import pyarrow as pa
import pyarrow.compute as pc

from tpcdi.historical.inputs import HistoricalInputs

#: The BatchID of the historical load (clause 4.4.2).
BATCH_ID = 1


def message_rows(
    rows: list[pa.Table], kind: str, at: datetime.datetime, batch_id: int = BATCH_ID
) -> pa.Table:
    """DImessages rows from tables of ``messagesource``, ``messagetext``, ``messagedata``."""
    parts = [r.select(["messagesource", "messagetext", "messagedata"]) for r in rows if r.num_rows]
    if not parts:
        data = pa.table(
            {n: pa.array([], pa.string()) for n in ("messagesource", "messagetext", "messagedata")}
        )
    else:
        data = pa.concat_tables([p.cast(parts[0].schema) for p in parts])
    n = data.num_rows
    return pa.table(
        {
            "messagedateandtime": pa.array([at] * n, pa.timestamp("us")),
            "batchid": pa.array([batch_id] * n, pa.int64()),
            "messagesource": data["messagesource"],
            "messagetext": data["messagetext"],
            "messagetype": pa.array([kind] * n, pa.string()),
            "messagedata": data["messagedata"],
        }
    )


def split_dangling(
    table: pa.Table, required: list[str], source: str, file: str, text: str, data: pa.Array
) -> tuple[pa.Table, pa.Table]:
    """Split ``table`` into the rows whose ``required`` columns are all set and alerts for the
    others (``data`` describes each row; the file and line are appended)."""
    ok = pc.is_valid(table[required[0]])
    for column in required[1:]:
        ok = pc.and_(ok, pc.is_valid(table[column]))
    bad = pc.invert(ok)
    lines = pc.cast(table["_line"].filter(bad), pa.string())
    where = pc.binary_join_element_wise(
        pc.cast(data.filter(bad), pa.string()), f" ({file} line ", lines, ")", ""
    )
    n = len(where)
    alerts = pa.table(
        {
            "messagesource": pa.array([source] * n, pa.string()),
            "messagetext": pa.array([text] * n, pa.string()),
            "messagedata": where,
        }
    )
    return table.filter(ok), alerts


def reject_rows(inputs: HistoricalInputs) -> pa.Table:
    r = inputs.rejects
    data = pc.utf8_slice_codeunits(
        pc.binary_join_element_wise(
            "line ", pc.cast(r["line"], pa.string()), ": ", r["reason"], ""
        ),
        0,
        100,
    )
    return pa.table(
        {
            "messagesource": r["file"],
            "messagetext": pa.array(["Rejected record"] * r.num_rows),
            "messagedata": data,
        }
    )

"""Phase Complete Records (clauses 7.2.3.5, 7.2.4.2, 7.2.5.3, 7.5.1).

A PCR is the DImessages row with MessageType ``PCR`` written when a phase's batch validation has
completed; its MessageDateAndTime is the phase's completion timestamp CT_BatchID, from which the
metric's elapsed times are computed (:mod:`tpcdi.audit.metric`).
"""

from __future__ import annotations

import datetime

from tpcdi.audit.connection import WarehouseConnection

PCR = "PCR"
PCR_SOURCE = "Phase Complete Record"
PCR_TEXT = "Batch Complete"


def write_pcr(
    conn: WarehouseConnection, batch_id: int, when: datetime.datetime | None = None
) -> datetime.datetime:
    """Write the PCR of phase ``batch_id`` at ``when`` (default: now, local time) and commit.
    Returns the timestamp written (CT_batch_id)."""
    if batch_id < 0:
        raise ValueError(f"batch_id must be >= 0, got {batch_id}")
    stamp = when or datetime.datetime.now()
    conn.execute(
        "INSERT INTO {dimessages} (messagedateandtime, batchid, messagesource, messagetext, "
        "messagetype, messagedata) VALUES (?, ?, ?, ?, ?, NULL)",
        [stamp, batch_id, PCR_SOURCE, PCR_TEXT, PCR],
    )
    conn.commit()
    return stamp


def completion_times(conn: WarehouseConnection) -> dict[int, datetime.datetime]:
    """CT per BatchID: the MessageDateAndTime of each batch's PCR (the latest, if a batch has
    more than one; the audit reports that as a failure)."""
    rows = conn.query(
        "SELECT batchid, max(messagedateandtime) FROM {dimessages} "
        "WHERE messagetype = 'PCR' GROUP BY batchid"
    )
    return {int(b): t for b, t in rows}

"""The ``audit`` and ``dimessages`` tables (clauses 3.2.19 and 3.2.8), created when missing.

The production path creates the whole warehouse; the query side only needs these two, so
:func:`ensure_audit_tables` makes them when they are absent (``CREATE ... IF NOT EXISTS``) and
leaves existing ones untouched. Types are the specification's, with one exception:
``audit.dvalue`` is ``DOUBLE PRECISION`` rather than SNUM(15,5), because DIGen's
``Generator_audit.csv`` holds values (``ONE_YEAR_IN_MILLISECONDS`` = 31557600000.0) that need 16
digits at that scale.
"""

from __future__ import annotations

from tpcdi.audit.connection import WarehouseConnection

AUDIT_DDL = """
CREATE TABLE IF NOT EXISTS {audit} (
    dataset VARCHAR(20) NOT NULL,
    batchid INTEGER,
    "date" DATE,
    attribute VARCHAR(50) NOT NULL,
    "value" BIGINT,
    dvalue DOUBLE PRECISION
)
"""

DIMESSAGES_DDL = """
CREATE TABLE IF NOT EXISTS {dimessages} (
    messagedateandtime TIMESTAMP NOT NULL,
    batchid INTEGER NOT NULL,
    messagesource VARCHAR(30),
    messagetext VARCHAR(50) NOT NULL,
    messagetype VARCHAR(12) NOT NULL,
    messagedata VARCHAR(100)
)
"""


def ensure_audit_tables(conn: WarehouseConnection) -> None:
    """Create the warehouse schema (if named), ``audit`` and ``dimessages`` unless they exist;
    commits."""
    if conn.schema:
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {conn.qualified_schema()}")
    conn.execute(AUDIT_DDL)
    conn.execute(DIMESSAGES_DDL)
    conn.commit()

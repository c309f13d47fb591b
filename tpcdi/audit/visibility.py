"""The data visibility queries of clause 7.3, written as ``Visibility_1`` / ``Visibility_2`` rows.

Appendix C is not in the specification's text, so the rows are derived from clause 7.3 and from
what the audit does with them (clause 3.4.7.2: once committed, data stays visible, so the counts
never go down):

* ``Visibility_1``: ``Row count`` of every table the incremental updates change, and ``Row count
  joined`` of the four fact tables (the joins of the batch validation); run within five minutes
  of the start of Incremental Update 1 (7.3.3) and once more at the start of the audit (7.2.6.5);
* ``Visibility_2``: the ``Row count`` rows only; run at most five minutes apart from the first
  Visibility_1 to the end of Incremental Update 2 (7.3.4-7.3.6).

Clause 7.3.7: run them on a connection of their own, not the one the DI system writes with.
"""

from __future__ import annotations

import datetime
from typing import Literal

from tpcdi.audit.connection import WarehouseConnection
from tpcdi.audit.schema import table_name
from tpcdi.audit.validation import (
    JOINED_FACTS,
    ROW_COUNT,
    ROW_COUNT_JOINED,
    ValidationRow,
    insert_messages,
    require_tables,
)

VisibilityQuery = Literal[1, 2]

#: Tables the incremental updates change (clause 4.6), whose counts the visibility queries watch.
VISIBILITY_TABLES: tuple[str, ...] = (
    "DimAccount",
    "DimCustomer",
    "DimTrade",
    "FactCashBalances",
    "FactHoldings",
    "FactMarketHistory",
    "FactWatches",
    "Prospect",
)


def message_type(query: VisibilityQuery) -> str:
    return f"Visibility_{query}"


def count_visibility(conn: WarehouseConnection, query: VisibilityQuery) -> list[ValidationRow]:
    """The numbers of one visibility query, read in one statement."""
    if query not in (1, 2):
        raise ValueError(f"visibility query is 1 or 2, got {query!r}")
    parts = [(name, ROW_COUNT, "{" + table_name(name) + "}") for name in VISIBILITY_TABLES]
    if query == 1:
        parts += [(name, ROW_COUNT_JOINED, joined) for name, joined in JOINED_FACTS.items()]
    require_tables(conn, [*VISIBILITY_TABLES, "DimBroker", "DimCompany", "DimDate",
                          "DimSecurity", "DimTime", "DImessages"])  # fmt: skip
    sql = " UNION ALL ".join(
        f"SELECT {i} AS pos, count(*) AS n FROM {source}" for i, (_, _, source) in enumerate(parts)
    )
    counts = dict(conn.query(sql))
    return [ValidationRow(s, t, int(counts[i])) for i, (s, t, _) in enumerate(parts)]


def write_visibility(
    conn: WarehouseConnection,
    query: VisibilityQuery,
    batch_id: int,
    when: datetime.datetime | None = None,
) -> list[ValidationRow]:
    """Run visibility query ``query`` (1 or 2) and record its rows as ``Visibility_<query>``
    messages of ``batch_id`` at ``when`` (default: now); commits. Returns the rows."""
    rows = count_visibility(conn, query)
    insert_messages(conn, batch_id, message_type(query), rows, when or datetime.datetime.now())
    conn.commit()
    return rows

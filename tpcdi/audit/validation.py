"""The batch validation of clause 7.4: 24 ``Validation`` rows in DImessages at the end of a phase.

The specification's text does not carry Appendix B itself (only its file name), so the rows are
derived from clause 7.4, clause 3.2 and the audit's use of them, with the MessageSource /
MessageText spellings the official audit looks up:

* 18 ``Row count`` rows, one per warehouse table (``VALIDATION_TABLES``, MessageSource = the
  specification's table name);
* 4 ``Row count joined`` rows: each fact table inner-joined to every dimension row it references
  by surrogate key (clause 3.2), the account's broker included where the fact names an account;
  equal to ``Row count`` when referential integrity holds;
* ``DimCustomer`` / ``Inactive customers``: current customer rows whose Status is ``Inactive``
  (the StatusType name, clause 4.6.4.3);
* ``FactWatches`` / ``Inactive watches``: watches with a removal date.

All 24 numbers come from one ``SELECT`` (one snapshot), then one ``INSERT`` writes them with the
phase's BatchID (clause 4.4.2) and commits.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from tpcdi.audit.connection import WarehouseConnection
from tpcdi.audit.exceptions import WarehouseTablesMissing
from tpcdi.audit.schema import VALIDATION_TABLES, table_name

ROW_COUNT = "Row count"
ROW_COUNT_JOINED = "Row count joined"
INACTIVE_CUSTOMERS = "Inactive customers"
INACTIVE_WATCHES = "Inactive watches"
VALIDATION = "Validation"


@dataclass(frozen=True)
class ValidationRow:
    """One Validation message: MessageSource, MessageText and the count (MessageData)."""

    source: str
    text: str
    count: int


#: ``FROM`` clauses of the joined fact counts (clause 3.2: every surrogate key a fact holds).
JOINED_FACTS: dict[str, str] = {
    "FactCashBalances": (
        "{factcashbalances} f"
        " JOIN {dimaccount} a ON f.sk_accountid = a.sk_accountid"
        " JOIN {dimcustomer} c ON f.sk_customerid = c.sk_customerid"
        " JOIN {dimbroker} b ON a.sk_brokerid = b.sk_brokerid"
        " JOIN {dimdate} d ON f.sk_dateid = d.sk_dateid"
    ),
    "FactHoldings": (
        "{factholdings} f"
        " JOIN {dimaccount} a ON f.sk_accountid = a.sk_accountid"
        " JOIN {dimcustomer} c ON f.sk_customerid = c.sk_customerid"
        " JOIN {dimbroker} b ON a.sk_brokerid = b.sk_brokerid"
        " JOIN {dimdate} d ON f.sk_dateid = d.sk_dateid"
        " JOIN {dimtime} t ON f.sk_timeid = t.sk_timeid"
        " JOIN {dimcompany} m ON f.sk_companyid = m.sk_companyid"
        " JOIN {dimsecurity} s ON f.sk_securityid = s.sk_securityid"
    ),
    "FactMarketHistory": (
        "{factmarkethistory} f"
        " JOIN {dimdate} d ON f.sk_dateid = d.sk_dateid"
        " JOIN {dimcompany} m ON f.sk_companyid = m.sk_companyid"
        " JOIN {dimsecurity} s ON f.sk_securityid = s.sk_securityid"
    ),
    "FactWatches": (
        "{factwatches} f"
        " JOIN {dimcustomer} c ON f.sk_customerid = c.sk_customerid"
        " JOIN {dimdate} dp ON f.sk_dateid_dateplaced = dp.sk_dateid"
        " JOIN {dimsecurity} s ON f.sk_securityid = s.sk_securityid"
    ),
}

#: The 24 (MessageSource, MessageText, FROM/WHERE) of one batch validation, in order.
VALIDATION_QUERIES: tuple[tuple[str, str, str], ...] = (
    *((name, ROW_COUNT, "{" + table_name(name) + "}") for name in VALIDATION_TABLES),
    *((name, ROW_COUNT_JOINED, joined) for name, joined in JOINED_FACTS.items()),
    ("DimCustomer", INACTIVE_CUSTOMERS, "{dimcustomer} WHERE iscurrent AND status = 'Inactive'"),
    ("FactWatches", INACTIVE_WATCHES, "{factwatches} WHERE sk_dateid_dateremoved IS NOT NULL"),
)

#: Every (MessageSource, MessageText) pair one batch validation writes.
VALIDATION_PAIRS: frozenset[tuple[str, str]] = frozenset((s, t) for s, t, _ in VALIDATION_QUERIES)


def require_tables(conn: WarehouseConnection, spec_names: tuple[str, ...] | list[str]) -> None:
    """Raise :class:`WarehouseTablesMissing` naming every table of ``spec_names`` that is absent."""
    missing = conn.missing_tables([table_name(n) for n in spec_names])
    if missing:
        raise WarehouseTablesMissing(conn.schema, missing)


def count_validation(conn: WarehouseConnection) -> list[ValidationRow]:
    """The 24 validation numbers of the warehouse as it is now, read in one statement."""
    require_tables(conn, [*VALIDATION_TABLES, "DImessages"])
    selects = [
        f"SELECT {i} AS pos, count(*) AS n FROM {source}"
        for i, (_, _, source) in enumerate(VALIDATION_QUERIES)
    ]
    rows = dict(conn.query(" UNION ALL ".join(selects)))
    return [
        ValidationRow(source, text, int(rows[i]))
        for i, (source, text, _) in enumerate(VALIDATION_QUERIES)
    ]


def insert_messages(
    conn: WarehouseConnection,
    batch_id: int,
    message_type: str,
    rows: list[ValidationRow],
    when: datetime.datetime,
) -> None:
    """Insert ``rows`` into DImessages as ``message_type`` messages of ``batch_id`` in one
    statement (no commit)."""
    values = ", ".join(["(?, ?, ?, ?, ?, ?)"] * len(rows))
    params: list[object] = []
    for row in rows:
        params += [when, batch_id, row.source, row.text, message_type, str(row.count)]
    conn.execute(
        "INSERT INTO {dimessages} (messagedateandtime, batchid, messagesource, messagetext, "
        f"messagetype, messagedata) VALUES {values}",
        params,
    )


def write_batch_validation(
    conn: WarehouseConnection, batch_id: int, when: datetime.datetime | None = None
) -> list[ValidationRow]:
    """Write the 24 Validation rows of phase ``batch_id`` (0 = initialization, 1 = historical
    load, 2 and 3 = incremental updates) into DImessages, timestamped ``when`` (default: now,
    local time), and commit. Returns the rows written.

    Raises :class:`~tpcdi.audit.exceptions.WarehouseTablesMissing` when a warehouse table does
    not exist, and ``ValueError`` for a negative ``batch_id``.
    """
    if batch_id < 0:
        raise ValueError(f"batch_id must be >= 0, got {batch_id}")
    rows = count_validation(conn)
    insert_messages(conn, batch_id, VALIDATION, rows, when or datetime.datetime.now())
    conn.commit()
    return rows

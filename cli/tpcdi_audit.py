"""``streamdi tpcdi audit``: run the automated audit against a warehouse and print each check.

* ``--target duckdb`` (default): the DuckDB file ``--duckdb PATH`` or ``MIGRATION__DUCKDB_PATH``;
* ``--target postgres``: ``--postgres DSN``, else ``POSTGRES__DSN``, else the embedded server;
* ``--schema NAME``: the warehouse schema (default ``MIGRATION__SCHEMA_NAME``, else the
  connection's default schema);
* ``--data DIR``: first load the answer keys of this staging area into ``audit`` (clause
  7.2.6.2), creating ``audit`` and ``dimessages`` if missing;
* ``--json PATH`` also writes the verdicts as JSON; ``--failures-only`` prints only FAILs.

Exit code 0 when every check is OK, 1 when one fails or the warehouse cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from cli.commands import EXIT_FAILED, EXIT_OK, write_json
from streamdi.settings import StreamdiSettings


def open_warehouse(
    settings: StreamdiSettings,
    target: str,
    *,
    duckdb_path: str | None = None,
    dsn: str | None = None,
    schema: str | None = None,
) -> Any:
    """A :class:`~tpcdi.audit.connection.WarehouseConnection` to the configured warehouse."""
    from tpcdi.audit.connection import WarehouseConnection

    schema = schema or settings.migration.schema_name
    if target == "duckdb":
        path = Path(duckdb_path) if duckdb_path else settings.warehouse_path
        return WarehouseConnection.duckdb(str(path), schema=schema)
    if dsn is None:
        from migration.migrator import postgres_connection

        dsn = postgres_connection(settings)[0]
    return WarehouseConnection.postgres(dsn, schema=schema)


def _audit(args: argparse.Namespace, settings: StreamdiSettings) -> int:
    from tpcdi.audit.checks import format_audit, run_audit
    from tpcdi.audit.ddl import ensure_audit_tables
    from tpcdi.audit.keys import load_audit_files
    from tpcdi.exceptions import SourceNotFound
    from warehouse.exceptions import WarehouseError

    try:
        conn = open_warehouse(
            settings, args.target, duckdb_path=args.duckdb, dsn=args.postgres, schema=args.schema
        )
    except WarehouseError as exc:
        print(f"streamdi tpcdi audit: {exc}", file=sys.stderr)
        return EXIT_FAILED
    with conn:
        try:
            if args.data:
                ensure_audit_tables(conn)
                loaded = load_audit_files(conn, Path(args.data))
                print(f"loaded {loaded} answer-key rows from {args.data}")
            result = run_audit(conn)
        except (WarehouseError, SourceNotFound) as exc:
            print(f"streamdi tpcdi audit: {exc}", file=sys.stderr)
            return EXIT_FAILED
    if args.json:
        write_json(result.as_dict(), args.json)
    if args.json != "-":
        print(format_audit(result, only_failures=args.failures_only))
    return EXIT_OK if result.passed else EXIT_FAILED


def register_audit(sub: Any) -> None:
    """Add ``audit`` to the ``streamdi tpcdi`` subcommands."""
    audit = sub.add_parser(
        "audit",
        help="run the automated audit (clause 7.2.6) against a DuckDB or PostgreSQL warehouse",
        description="Check the warehouse against the specification's rules and the answer keys; "
        "each check prints OK or FAIL with the numbers it compared.",
    )
    audit.add_argument("--target", choices=("duckdb", "postgres"), default="duckdb")
    audit.add_argument("--duckdb", metavar="PATH", help="DuckDB warehouse file")
    audit.add_argument("--postgres", metavar="DSN", help="PostgreSQL DSN or URL")
    audit.add_argument("--schema", help="schema holding the warehouse tables")
    audit.add_argument("--data", metavar="DIR", help="load this staging area's answer keys first")
    audit.add_argument("--json", metavar="PATH", help="also write the verdicts as JSON ('-')")
    audit.add_argument("--failures-only", action="store_true", help="print only failed checks")
    audit.set_defaults(handler=_audit)

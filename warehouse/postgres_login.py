"""The PostgreSQL login user queries run as: a non-superuser that may only read the warehouse.

PostgreSQL has functions that run SQL given as text (``ts_stat``, ``query_to_xml``...), so SQL
that got past the query service's parser must still find nothing to take: the *session* user of
every connection that runs user SQL is this login, never the migration's user (``SET ROLE`` under
a superuser session is no fence: ``set_config('role', session_user, true)`` takes it back).

Two ways to get it, in this order:

* ``API__POSTGRES_READER_DSN``: a login the operator made; streamdi only grants it ``SELECT`` on
  the warehouse's tables (and on tables created later, with ``ALTER DEFAULT PRIVILEGES``) when the
  migration's user may, then verifies it.
* otherwise streamdi manages a login role (``API__POSTGRES_READER_ROLE``) with the migration's
  user (:func:`managed_login`, needs a user that may create roles; the embedded server's
  ``postgres`` may): ``LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS
  NOINHERIT``, a fresh random password each start (kept in memory only; the embedded server
  trusts its Unix socket, an external one checks it), no membership in any role (removed if
  found), read-only by default with ``statement_timeout``, ``work_mem``, ``temp_file_limit`` and
  ``idle_in_transaction_session_timeout`` set on the role, ``USAGE`` on the warehouse's schemas and
  ``SELECT`` on its tables, now and later.

Either way :func:`verify_login`, connected as the login itself, refuses it
(:class:`~warehouse.exceptions.ReaderLoginRefused`, saying what to fix) when it is a superuser or
may create roles or databases, replicate or bypass row security, is a member of any role (so
``SET ROLE`` leads nowhere), may execute the server-file and large-object functions, or cannot read
a warehouse table. Nothing falls back to running user SQL as the migration's user.

What "the warehouse" is comes in as a :class:`ReaderGrants` value (its schemas, its data schemas,
its tables), which the warehouse's owner (``migration``) builds from its layout; this module knows
no layout. Connections are :func:`warehouse.postgres_reads.connect`'s (DSN plus the TLS
parameters), names are quoted with :func:`warehouse.base.quote_identifier`.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg2
import psycopg2.errors

from warehouse.base import quote_identifier
from warehouse.exceptions import ReaderLoginRefused, WarehouseUnavailable, first_line
from warehouse.postgres_reads import close_quietly, connect

logger = logging.getLogger(__name__)

#: Functions a reader must not be able to execute (server files, large objects).
SERVER_FUNCTIONS = (
    "pg_read_file(text)",
    "pg_read_binary_file(text)",
    "pg_ls_dir(text)",
    "pg_stat_file(text)",
    "lo_import(text)",
    "lo_export(oid, text)",
)


@dataclass(frozen=True)
class ReaderLogin:
    """How to connect as the reader: ``psycopg2.connect(dsn, **params)``."""

    dsn: str
    params: dict[str, str] = field(repr=False)
    role: str
    managed: bool


@dataclass(frozen=True)
class RoleLimits:
    """Settings streamdi puts on a role it manages."""

    statement_timeout_ms: int
    work_mem: str = "64MB"
    temp_file_limit: str = "1GB"
    connection_limit: int = 16


@dataclass(frozen=True)
class ReaderGrants:
    """What the reader login may read, as names the warehouse's owner (``migration``) gives.

    ``schemas`` get ``USAGE``; ``data_schemas`` get ``SELECT`` on every table, now and on tables
    created later; ``tables`` (``(schema, table)`` pairs, unquoted) are every table the reader
    reads, which :func:`verify_login` checks it can read; those outside ``data_schemas`` (the
    ledger's) get ``SELECT`` one by one, so the login reads nothing else there."""

    schemas: tuple[str, ...]
    data_schemas: tuple[str, ...]
    tables: tuple[tuple[str, str], ...]

    def qualified_tables(self) -> list[str]:
        """Every table of :attr:`tables` as a quoted ``schema.table`` name."""
        return [_qualified(schema, table) for schema, table in self.tables]


def _qualified(schema: str, table: str) -> str:
    return f"{quote_identifier(schema)}.{quote_identifier(table)}"


@contextmanager
def _connection(dsn: str, params: dict[str, str], *, autocommit: bool = False) -> Iterator[Any]:
    """A connection of :func:`warehouse.postgres_reads.connect` (``WarehouseUnavailable`` when
    the server cannot be reached), closed on exit."""
    con = connect(dsn, params)
    try:
        con.autocommit = autocommit
        yield con
    finally:
        close_quietly(con)


def _grant_reads(cur: Any, grants: ReaderGrants, role: str) -> None:
    """``USAGE`` on the schemas and ``SELECT`` on the reader's tables, now and for tables the
    connected user creates later in the data schemas."""
    data_schemas = ", ".join(quote_identifier(s) for s in grants.data_schemas)
    schemas = ", ".join(quote_identifier(s) for s in grants.schemas)
    one_by_one = ", ".join(
        _qualified(schema, table)
        for schema, table in grants.tables
        if schema not in grants.data_schemas
    )
    who = quote_identifier(role)
    cur.execute(f"GRANT USAGE ON SCHEMA {schemas} TO {who}")
    cur.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {data_schemas} TO {who}")
    if one_by_one:
        cur.execute(f"GRANT SELECT ON {one_by_one} TO {who}")
    cur.execute(
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA {data_schemas} GRANT SELECT ON TABLES TO {who}"
    )


def managed_login(
    admin_dsn: str,
    params: dict[str, str],
    grants: ReaderGrants,
    role: str,
    limits: RoleLimits,
) -> ReaderLogin:
    """Create (or reset) the managed reader role with the migration's user; see the module
    docstring. Raises :class:`~warehouse.exceptions.ReaderLoginRefused` when that user may not
    manage roles, :class:`~warehouse.exceptions.WarehouseUnavailable` when the server is down."""
    password = secrets.token_urlsafe(24)
    who = quote_identifier(role)
    with _connection(admin_dsn, params) as con:
        try:
            with con.cursor() as cur:
                cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"streamdi:{role}"])
                cur.execute(
                    "SELECT rolsuper, rolcreaterole FROM pg_roles WHERE rolname = current_user"
                )
                superuser, createrole = cur.fetchone()
                if role_is_current(cur, role):
                    raise ReaderLoginRefused(
                        f"API__POSTGRES_READER_ROLE {role!r} is the migration's own user",
                        "name another role",
                    )
                cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role])
                verb = "ALTER" if cur.fetchall() else "CREATE"
                cur.execute(
                    f"{verb} ROLE {who} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE "
                    "NOREPLICATION NOBYPASSRLS NOINHERIT CONNECTION LIMIT "
                    f"{int(limits.connection_limit)} PASSWORD %s",
                    [password],
                )
                cur.execute(
                    "SELECT b.rolname FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.member "
                    "JOIN pg_roles b ON b.oid = m.roleid WHERE r.rolname = %s",
                    [role],
                )
                for (granted,) in cur.fetchall():
                    cur.execute(f"REVOKE {quote_identifier(granted)} FROM {who}")
                settings = {
                    "default_transaction_read_only": "on",
                    "statement_timeout": str(int(limits.statement_timeout_ms)),
                    "idle_in_transaction_session_timeout": str(
                        int(limits.statement_timeout_ms) * 2
                    ),
                    "work_mem": limits.work_mem,
                }
                if superuser:  # a superuser-only parameter
                    settings["temp_file_limit"] = limits.temp_file_limit
                for name, value in settings.items():
                    cur.execute(f"ALTER ROLE {who} SET {name} = %s", [value])
                _grant_reads(cur, grants, role)
            con.commit()
        except psycopg2.errors.InsufficientPrivilege as exc:
            con.rollback()
            raise ReaderLoginRefused(
                f"the POSTGRES__DSN user may not create or manage role {role!r} "
                f"({first_line(exc)})",
                "set API__POSTGRES_READER_DSN to a login that is not a superuser and may read the "
                "warehouse, or give the POSTGRES__DSN user CREATEROLE",
            ) from exc
        except psycopg2.OperationalError as exc:
            raise WarehouseUnavailable("postgres", first_line(exc)) from exc
        except psycopg2.Error as exc:
            con.rollback()
            raise ReaderLoginRefused(
                f"setting up role {role!r} failed: {first_line(exc)}",
                "check the POSTGRES__DSN user's privileges, or set API__POSTGRES_READER_DSN",
            ) from exc
    if not createrole and not superuser:
        logger.info("postgres reader role managed by a user without CREATEROLE role=%s", role)
    return ReaderLogin(admin_dsn, {**params, "user": role, "password": password}, role, True)


def role_is_current(cur: Any, role: str) -> bool:
    cur.execute("SELECT current_user = %s", [role])
    return bool(cur.fetchone()[0])


def external_login(
    reader_dsn: str, admin_dsn: str, params: dict[str, str], grants: ReaderGrants
) -> ReaderLogin:
    """The operator's reader login (``API__POSTGRES_READER_DSN``); the migration's user grants it
    the reads it may grant (a table it does not own is left to the operator, and
    :func:`verify_login` names it if the login cannot read it)."""
    with _connection(reader_dsn, params) as con, con.cursor() as cur:
        cur.execute("SELECT session_user")
        role = str(cur.fetchone()[0])
    with _connection(admin_dsn, params) as con:
        try:
            with con.cursor() as cur:
                if role_is_current(cur, role):
                    raise ReaderLoginRefused(
                        f"API__POSTGRES_READER_DSN logs in as the migration's own user ({role!r})",
                        "give user queries a login of their own",
                    )
                _grant_reads(cur, grants, role)
            con.commit()
        except psycopg2.OperationalError as exc:
            raise WarehouseUnavailable("postgres", first_line(exc)) from exc
        except psycopg2.Error as exc:
            con.rollback()
            logger.warning(
                "could not grant reads to the postgres reader login role=%s: %s",
                role,
                first_line(exc),
            )
    return ReaderLogin(reader_dsn, dict(params), role, False)


def verify_login(login: ReaderLogin, grants: ReaderGrants) -> None:
    """Connected as ``login``: refuse it unless it is safe (see the module docstring). Raises
    :class:`~warehouse.exceptions.ReaderLoginRefused`."""
    fix = (
        "use a login that is NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS, a "
        "member of no role, with SELECT on the warehouse's tables only"
    )
    with _connection(login.dsn, login.params) as con, con.cursor() as cur:
        cur.execute(
            "SELECT rolname, rolsuper, rolcreaterole, rolcreatedb, rolreplication, rolbypassrls "
            "FROM pg_roles WHERE rolname = session_user"
        )
        name, *flags = cur.fetchone()
        powers = [
            p
            for p, held in zip(
                ("SUPERUSER", "CREATEROLE", "CREATEDB", "REPLICATION", "BYPASSRLS"),
                flags,
                strict=True,
            )
            if held
        ]
        if powers:
            raise ReaderLoginRefused(f"login {name!r} has {', '.join(powers)}", fix)
        cur.execute(
            "SELECT string_agg(rolname, ', ' ORDER BY rolname) FROM pg_roles "
            "WHERE rolname <> session_user AND pg_has_role(session_user, oid, 'MEMBER')"
        )
        members = cur.fetchone()[0]
        if members:
            raise ReaderLoginRefused(
                f"login {name!r} is a member of {members} (SET ROLE would reach them)", fix
            )
        executable = [
            f
            for f in SERVER_FUNCTIONS
            if _scalar(cur, "SELECT has_function_privilege(session_user, %s, 'EXECUTE')", [f])
        ]
        if executable:
            raise ReaderLoginRefused(
                f"login {name!r} may execute {', '.join(executable)}",
                "REVOKE EXECUTE on those functions from it (and from PUBLIC)",
            )
        unreadable = [
            t
            for t in grants.qualified_tables()
            if not _scalar(cur, "SELECT has_table_privilege(session_user, %s, 'SELECT')", [t])
        ]
        if unreadable:
            raise ReaderLoginRefused(
                f"login {name!r} cannot read {', '.join(unreadable[:5])}",
                "GRANT USAGE ON SCHEMA and SELECT ON those tables TO "
                + quote_identifier(str(name)),
            )


def _scalar(cur: Any, sql: str, params: Sequence[Any]) -> Any:
    cur.execute(sql, list(params))
    return cur.fetchone()[0]


@dataclass(frozen=True)
class LoginPlan:
    """How the reader login is obtained: the operator's ``reader_dsn``, else the managed
    ``role`` with ``limits``."""

    reader_dsn: str | None = field(default=None, repr=False)
    role: str = "streamdi_reader"
    limits: RoleLimits = field(default_factory=lambda: RoleLimits(statement_timeout_ms=60_000))


def open_login(
    plan: LoginPlan, admin_dsn: str, params: dict[str, str], grants: ReaderGrants
) -> ReaderLogin:
    """The reader login of ``plan``, set up and verified (see the module docstring)."""
    if plan.reader_dsn is not None:
        login = external_login(plan.reader_dsn, admin_dsn, params, grants)
    else:
        login = managed_login(admin_dsn, params, grants, plan.role, plan.limits)
    verify_login(login, grants)
    logger.info("postgres reader login role=%s managed=%s", login.role, login.managed)
    return login

"""Checking a user's SQL before anything runs it: exactly one read-only SELECT over known tables,
made only of what the allowlist admits.

:func:`check_query` parses the text with sqlglot (in the dialect the client names: ``duckdb`` or
``postgres``) and refuses, with a :class:`~api.exceptions.QueryRejected` whose code names the rule:

* a query too long, too big or nested too deeply, before, while and after parsing
  (``query_too_complex``; :mod:`api.limits`);
* text that does not parse (``sql_syntax``), more than one statement (``multiple_statements``),
  anything but a query: DDL, DML, ``COPY``, ``ATTACH``, ``INSTALL``, ``LOAD``, ``SET``,
  ``PRAGMA``, ``CALL``, ``EXPLAIN``... (``not_a_query``);
* any function, construct or cast type that is not on the allowlist of :mod:`api.allowlist`
  (deny by default: ``forbidden_function``, ``forbidden_clause``), and the bounded functions
  used beyond their bound;
* a table that is not one of the logical tables (a state table or a sink of the dataflow), a
  schema-qualified name, a file path in ``FROM`` (``unknown_table``); a table function in
  ``FROM`` (``table_function``);
* ``SELECT ... INTO``, ``FOR UPDATE``/``FOR SHARE`` and CTEs named like a table
  (``forbidden_clause``).

The parser is the first fence, not the only one: the query then runs where files and the network
are out of reach and memory is bounded (an in-memory DuckDB with external access disabled, the
DuckDB warehouse's instance with the same setting, or a PostgreSQL session whose login role is
not a superuser and may only read the warehouse; see :mod:`migration.reader`,
:mod:`api.sandbox`).

:class:`CheckedQuery` keeps the parsed tree with identifiers resolved to the real table and column
names; :meth:`CheckedQuery.render` writes it for a dialect (checking the dialect's allowlist of
untyped functions again), with a row limit and, optionally, each table replaced by a SQL relation
(a warehouse's as-of view).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from api.allowlist import Dialect, check_allowed, check_target
from api.exceptions import QueryRejected
from api.limits import QueryLimits, check_text, check_tree, parsing

# sqlglot warns when it falls back to a generic command (LOAD, CALL...): those are refused anyway
logging.getLogger("sqlglot").setLevel(logging.ERROR)

__all__ = ["CheckedQuery", "Dialect", "QueryLimits", "check_query"]

#: Node types a predicate may consist of to be pushed down to the warehouse read.
_PUSHABLE = (
    exp.Column,
    exp.Identifier,
    exp.Literal,
    exp.Boolean,
    exp.Null,
    exp.Paren,
    exp.Not,
    exp.And,
    exp.Or,
    exp.EQ,
    exp.NEQ,
    exp.GT,
    exp.GTE,
    exp.LT,
    exp.LTE,
    exp.Is,
    exp.In,
    exp.Between,
    exp.Like,
    exp.ILike,
    exp.Add,
    exp.Sub,
    exp.Mul,
    exp.Neg,
    exp.Cast,
    exp.DataType,
    exp.Tuple,
)


@dataclass(frozen=True)
class CheckedQuery:
    """A checked query. ``tables`` are the logical tables it reads; ``columns[t]`` the columns of
    ``t`` it may use (``None``: all of them); ``filter`` the WHERE of a query over one table that
    is safe to evaluate at the warehouse too (columns unqualified), else ``None``."""

    tree: exp.Query
    dialect: Dialect
    tables: tuple[str, ...]
    columns: Mapping[str, frozenset[str] | None]
    filter: exp.Expression | None

    def render(
        self,
        dialect: Dialect,
        *,
        limit: int | None = None,
        relations: Mapping[str, str] | None = None,
    ) -> str:
        """The query as ``dialect`` SQL, returning at most ``limit`` rows; each table named in
        ``relations`` becomes ``(<its SQL>) AS <alias>``. Raises
        :class:`~api.exceptions.QueryRejected` when an untyped function is not on ``dialect``'s
        list (:func:`api.allowlist.check_target`)."""
        check_target(self.tree, dialect)
        with parsing():
            return self._render(dialect, limit, relations)

    def _render(
        self, dialect: Dialect, limit: int | None, relations: Mapping[str, str] | None
    ) -> str:
        tree = self.tree.copy()
        if relations:
            for table in list(tree.find_all(exp.Table)):
                sql = relations.get(table.name)
                if sql is None:
                    continue
                alias = table.args.get("alias") or exp.TableAlias(
                    this=exp.to_identifier(table.name, quoted=True)
                )
                subquery = exp.Subquery(this=sqlglot.parse_one(sql, read=dialect), alias=alias)
                table.replace(subquery)
        if limit is not None:
            tree = _limited(tree, limit)
        return tree.sql(dialect=dialect, identify=True)

    def filter_sql(self, dialect: Dialect) -> str | None:
        """The pushable WHERE as ``dialect`` SQL (``None`` when there is none)."""
        if self.filter is None:
            return None
        check_target(self.filter, dialect)
        return self.filter.sql(dialect=dialect, identify=True)


def _limited(tree: exp.Query, limit: int) -> exp.Query:
    if isinstance(tree, exp.Select):
        current = tree.args.get("limit")
        if current is None:
            return tree.limit(limit, copy=False)
        value = current.expression if isinstance(current, exp.Limit) else None
        if isinstance(value, exp.Literal) and value.is_int:
            if int(value.name) > limit:
                current.set("expression", exp.Literal.number(limit))
            return tree
    wrapped: exp.Query = exp.select("*").from_(tree.subquery("_q")).limit(limit)
    return wrapped


def check_query(
    sql: str,
    tables: Mapping[str, Sequence[str]],
    dialect: Dialect = "duckdb",
    limits: QueryLimits | None = None,
) -> CheckedQuery:
    """Check ``sql`` against the rules of the module docstring; ``tables`` maps each logical
    table to its columns; ``limits`` bound the query's size and shape (defaults: those of
    :class:`~api.limits.QueryLimits`). Raises :class:`~api.exceptions.QueryRejected`; never a
    :class:`RecursionError`."""
    limits = limits or QueryLimits()
    check_text(sql, dialect, limits)
    try:
        with parsing():
            statements = [s for s in sqlglot.parse(sql, read=dialect) if s is not None]
    except (ParseError, TokenError) as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else "cannot parse"
        raise QueryRejected("sql_syntax", f"the query does not parse: {message}") from exc
    if not statements:
        raise QueryRejected("sql_syntax", "the query is empty")
    if len(statements) > 1:
        raise QueryRejected(
            "multiple_statements",
            f"send exactly one SELECT statement (got {len(statements)} statements)",
        )
    tree = statements[0]
    if not isinstance(tree, exp.Query):
        kind = type(tree).__name__.upper()
        raise QueryRejected(
            "not_a_query",
            f"only a read-only SELECT may run here (got {kind}); DDL, DML, COPY, ATTACH, "
            "INSTALL, LOAD, SET, PRAGMA and the like are refused",
        )
    check_tree(tree, limits)
    for node in tree.walk():
        if isinstance(node, exp.Into):
            raise QueryRejected("forbidden_clause", "SELECT ... INTO writes a table; refused")
        if isinstance(node, exp.Lock):
            raise QueryRejected("forbidden_clause", "FOR UPDATE / FOR SHARE locks rows; refused")
    check_allowed(tree, dialect)
    with parsing():
        normalized = normalize_identifiers(tree, dialect=dialect)
        return _resolved(normalized, tables, dialect)


def _resolved(
    tree: exp.Query, tables: Mapping[str, Sequence[str]], dialect: Dialect
) -> CheckedQuery:
    """The checked query with its tables and columns resolved to the logical ones."""
    by_lower = {name.lower(): name for name in tables}
    ctes = {str(c.alias_or_name).lower() for c in tree.find_all(exp.CTE)}
    shadowing = sorted(ctes & set(by_lower))
    if shadowing:
        raise QueryRejected(
            "forbidden_clause",
            f"a CTE may not be named like a table ({shadowing}); choose another name",
        )
    used: list[str] = []
    aliases: set[str] = set()
    for table in tree.find_all(exp.Table):
        target = table.this
        if not isinstance(target, exp.Identifier):
            raise QueryRejected(
                "table_function",
                f"table functions in FROM are refused ({target.sql(dialect=dialect)[:80]}); "
                f"read the logical tables {sorted(tables)}",
            )
        if table.args.get("db") is not None or table.args.get("catalog") is not None:
            raise QueryRejected(
                "unknown_table",
                f"name tables without a schema ({table.sql(dialect=dialect)}); the logical "
                f"tables are {sorted(tables)}",
            )
        lower = str(target.name).lower()
        if lower in ctes:
            continue
        real = (
            by_lower.get(lower)
            if not target.quoted
            else (target.name if target.name in tables else by_lower.get(lower))
        )
        if real is None:
            raise QueryRejected(
                "unknown_table",
                f"unknown table {target.name!r}; the logical tables are {sorted(tables)}",
                table=str(target.name),
            )
        table.set("this", exp.to_identifier(real, quoted=True))
        if real not in used:
            used.append(real)
        aliases.add(real.lower())
        if table.alias:
            aliases.add(table.alias.lower())
    columns = _resolve_columns(cast(exp.Expression, tree), {t: tables[t] for t in used}, aliases)
    return CheckedQuery(tree, dialect, tuple(used), columns, _pushable_filter(tree, used))


def _resolve_columns(
    tree: exp.Expression, tables: Mapping[str, Sequence[str]], aliases: set[str]
) -> dict[str, frozenset[str] | None]:
    """Name every column reference by its real name (quoted), and the columns each table may
    need: every identifier that names one of its columns; all of them where a ``*`` selects
    whole rows, a NATURAL join matches implicit columns, or a table is used as a row value."""
    real_columns: dict[str, str] = {}
    for columns in tables.values():
        for c in columns:
            real_columns.setdefault(c.lower(), c)
    named: set[str] = set()
    everything = False
    for node in tree.walk():
        if (
            (isinstance(node, exp.Star) and isinstance(node.parent, exp.Select | exp.Column))
            or (isinstance(node, exp.Join) and node.args.get("method") == "NATURAL")
            or (isinstance(node, exp.Column) and not node.table and node.name.lower() in aliases)
        ):
            everything = True
    for ident in list(tree.find_all(exp.Identifier)):
        if isinstance(ident.parent, exp.Table):
            continue
        real = real_columns.get(str(ident.name).lower())
        if real is not None and (not ident.quoted or ident.name == real):
            named.add(real)
            if isinstance(ident.parent, exp.Column) and ident.arg_key == "this":
                ident.replace(exp.to_identifier(real, quoted=True))
    out: dict[str, frozenset[str] | None] = {}
    for name, columns in tables.items():
        out[name] = None if everything else frozenset(c for c in columns if c in named)
    return out


def _pushable_filter(tree: exp.Query, used: list[str]) -> exp.Expression | None:
    """The WHERE of a plain SELECT over one table, when it is made only of columns, literals,
    comparisons, boolean and arithmetic operators and casts (deterministic, so evaluating it at
    the warehouse and again in the union keeps the same rows)."""
    if not isinstance(tree, exp.Select) or len(used) != 1 or tree.args.get("joins"):
        return None
    if len(list(tree.find_all(exp.Table))) != 1:
        return None
    if any(True for _ in tree.find_all(exp.Subquery, exp.CTE)):
        return None
    where = tree.args.get("where")
    if where is None:
        return None
    condition = where.this.copy()
    for node in condition.walk():
        if not isinstance(node, _PUSHABLE):
            return None
        if isinstance(node, exp.In) and node.args.get("query") is not None:
            return None
    for column in condition.find_all(exp.Column):
        column.set("table", None)
        column.set("db", None)
        column.set("catalog", None)
    return cast(exp.Expression, condition)

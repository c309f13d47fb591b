"""How big and how deep a user's query may be: checked before, while and after it is parsed.

A query's size and shape bound the work before it runs: sqlglot's parser and our tree walks recurse
once per nesting level (100 nested subqueries, 5,000 parentheses or ``NOT`` x2000 exhaust Python's
stack), and DuckDB's binder cannot be interrupted (a 2,000-way ``UNION ALL`` over the warehouse's
as-of relations stays there for minutes; a statement is interruptible only once it executes). So
the limits below are checked in three places, each refusing with ``query_too_complex``:

1. :func:`check_text`, before parsing, on the text and its tokens (sqlglot's tokenizer is a loop):
   at most ``max_chars`` characters and ``max_nodes`` tokens, and brackets, ``CASE ... END``
   and runs of prefix operators (``NOT``, ``-``, ``+``, ``~``) nested at most ``max_depth`` deep;
2. while parsing: a :class:`RecursionError` the first check did not foresee is caught and reported
   the same way (:func:`parsing`);
3. :func:`check_tree`, after parsing, with an explicit stack: at most ``max_nodes`` nodes, a depth
   of at most ``4 * max_depth`` counted without binary operators (sqlglot generates and copies
   long chains of ``AND``, ``OR``, ``+``... in loops, not recursively), at most ``max_tables``
   table references (joins, set operations and CTE references each add one) and at most
   ``max_selects`` SELECT blocks (each union branch, subquery and CTE is one).

What passes runs through sqlglot's recursive generator and DuckDB's binder in bounded time and
stack.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.tokenizer_core import TokenType

from api.exceptions import QueryRejected

_OPEN = {TokenType.L_PAREN, TokenType.L_BRACKET, TokenType.L_BRACE, TokenType.CASE}
_CLOSE = {TokenType.R_PAREN, TokenType.R_BRACKET, TokenType.R_BRACE, TokenType.END}
_PREFIX = {TokenType.NOT, TokenType.DASH, TokenType.PLUS, TokenType.TILDE}

#: The tree may be this many times deeper than the text's nesting (a subquery in parentheses is
#: about four tree levels: Subquery, Select, its clause, the expression).
TREE_DEPTH_FACTOR = 4


@dataclass(frozen=True)
class QueryLimits:
    """The limits of the module docstring (``API__MAX_QUERY_*``)."""

    max_chars: int = 65_536
    max_nodes: int = 10_000
    max_depth: int = 24
    max_tables: int = 32
    max_selects: int = 32


def _too_complex(reason: str, **detail: object) -> QueryRejected:
    return QueryRejected("query_too_complex", f"the query is too complex: {reason}", **detail)


def check_text(sql: str, dialect: str, limits: QueryLimits) -> None:
    """Step 1 of the module docstring. Raises :class:`~api.exceptions.QueryRejected`
    (``query_too_complex``; ``sql_syntax`` when the text does not tokenize)."""
    if len(sql) > limits.max_chars:
        raise _too_complex(
            f"{len(sql):,} characters, at most {limits.max_chars:,} are taken "
            "(API__MAX_QUERY_CHARS)",
            limit=limits.max_chars,
        )
    try:
        tokens = sqlglot.Dialect.get_or_raise(dialect).tokenize(sql)
    except sqlglot.errors.TokenError as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else "cannot tokenize"
        raise QueryRejected("sql_syntax", f"the query does not parse: {message}") from exc
    if len(tokens) > limits.max_nodes:
        raise _too_complex(
            f"{len(tokens):,} tokens, at most {limits.max_nodes:,} (API__MAX_QUERY_NODES)",
            limit=limits.max_nodes,
        )
    depth = run = deepest = 0
    for token in tokens:
        kind = token.token_type
        if kind in _PREFIX:
            run += 1
        else:
            run = 0
        if kind in _OPEN:
            depth += 1
        elif kind in _CLOSE:
            depth = max(0, depth - 1)
        deepest = max(deepest, depth + run)
        if deepest > limits.max_depth:
            raise _too_complex(
                f"brackets, CASE and prefix operators nest deeper than {limits.max_depth} "
                "(API__MAX_QUERY_DEPTH)",
                limit=limits.max_depth,
            )


@contextmanager
def parsing() -> Iterator[None]:
    """Step 2 of the module docstring: a :class:`RecursionError` inside the block becomes
    ``query_too_complex``."""
    try:
        yield
    except RecursionError as exc:
        raise _too_complex("it nests too deeply to parse") from exc


def check_tree(tree: exp.Expr, limits: QueryLimits) -> None:
    """Step 3 of the module docstring (no recursion: an explicit stack). Raises
    :class:`~api.exceptions.QueryRejected` (``query_too_complex``)."""
    nodes = tables = selects = deepest = 0
    max_tree_depth = TREE_DEPTH_FACTOR * limits.max_depth
    stack: list[tuple[exp.Expr, int]] = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if nodes > limits.max_nodes:
            raise _too_complex(
                f"more than {limits.max_nodes:,} syntax nodes (API__MAX_QUERY_NODES)",
                limit=limits.max_nodes,
            )
        if depth > deepest:
            deepest = depth
            if deepest > max_tree_depth:
                raise _too_complex(
                    f"expressions nest deeper than {max_tree_depth} levels (API__MAX_QUERY_DEPTH)",
                    limit=limits.max_depth,
                )
        if isinstance(node, exp.Table):
            tables += 1
            if tables > limits.max_tables:
                raise _too_complex(
                    f"more than {limits.max_tables} table references (joins, set operations "
                    "and CTE references count; API__MAX_QUERY_TABLES)",
                    limit=limits.max_tables,
                )
        elif isinstance(node, exp.Select):
            selects += 1
            if selects > limits.max_selects:
                raise _too_complex(
                    f"more than {limits.max_selects} SELECT blocks (union branches, subqueries "
                    "and CTEs count; API__MAX_QUERY_SELECTS)",
                    limit=limits.max_selects,
                )
        for child in node.iter_expressions():
            chained = isinstance(child, exp.Binary) and isinstance(node, exp.Binary)
            stack.append((child, depth if chained else depth + 1))

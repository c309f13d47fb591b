"""What a user's query may contain: functions, constructs and types allowed by name, nothing else.

Deny by default: a syntax node, function or cast type that is not listed here is refused, so a
function this module never heard of (PostgreSQL's ``ts_stat``, which runs SQL given as text; a
DuckDB extension's reader) can never pass. :func:`check_allowed` walks a parsed query:

* **constructs** (:data:`CONSTRUCTS`): one read-only query made of SELECT blocks, joins, set
  operations, (non-recursive) CTEs, subqueries, WHERE/GROUP BY/HAVING/QUALIFY/ORDER BY/LIMIT,
  windows, CASE, casts, comparisons, arithmetic, boolean logic, LIKE/regex matching, IN,
  BETWEEN, EXISTS. Refused (``forbidden_clause``): ``WITH RECURSIVE``, ``VALUES``, ``LATERAL``,
  ``PIVOT``, ``TABLESAMPLE``, ``CUBE``, array and struct constructors and subscripts, lambdas,
  named arguments, JSON operators, query parameters, ``COLLATE``.
* **functions** (``forbidden_function``): the typed functions of :data:`FUNCTIONS` (sqlglot's
  classes: the same meaning in both dialects, translated by sqlglot) and, per dialect, the
  functions sqlglot does not type, by name (:data:`NAMED_FUNCTIONS`). Checked for the dialect
  the query is written in, and again (:func:`check_target`) for each dialect it is rendered to.
* **types** of casts (:data:`CAST_TYPES`): scalars only; no catalog types (``regclass``...),
  ``xml``, arrays or user-defined types; ``char(n)``/``varchar(n)`` at most
  :data:`MAX_TYPE_LENGTH` (PostgreSQL pads ``char(n)`` with blanks).

**Size.** A function whose output can be far larger than its input does not belong on the list:
``range``/``generate_series``, ``repeat``, ``unnest``, list/array/struct constructors,
``printf``/``format`` (widths), ``encode`` (hex doubles: nested, it doubles again) are absent;
those that are useful get a bound checked here (:data:`BOUNDED`): ``lpad``/``rpad`` only with a
literal width up to :data:`MAX_PAD_WIDTH`; ``replace`` only with literal strings whose
replacement is no longer than what it replaces, and ``regexp_replace`` only with an empty
replacement (so the output is never longer than the input, however they nest). Concatenation
(``||``, ``concat``, ``concat_ws``, ``overlay``) is the one operation left whose output is the
sum of its inputs; through CTEs and subqueries it compounds (``v||v`` over ``v||v`` over ... is
exponential), so it is allowed only in the outermost SELECT and with at most
:data:`MAX_CONCAT_OPERANDS` operands in the whole query. Aggregates that gather many rows into one
value (``string_agg``, ``array_agg``/``list``) are refused: a single value as large as a table
defeats every per-row bound. So every value a query computes is at most a constant times the
largest stored value or literal.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from sqlglot import exp

from api.exceptions import QueryRejected

Dialect = Literal["duckdb", "postgres"]

#: Longest literal width of lpad/rpad.
MAX_PAD_WIDTH = 1_000
#: Longest char(n)/varchar(n) of a cast.
MAX_TYPE_LENGTH = 10_000
#: Most operands of concatenations in one query.
MAX_CONCAT_OPERANDS = 32

#: Operations whose output is as long as all their inputs together.
CONCATENATIONS: tuple[type[exp.Expr], ...] = (exp.DPipe, exp.Concat, exp.ConcatWs, exp.Overlay)

#: Where a SELECT is nested in another query (concatenation is refused below these).
_NESTING: tuple[type[exp.Expr], ...] = (
    exp.Subquery,
    exp.CTE,
    exp.Exists,
    exp.In,
    exp.Any,
    exp.All,
    exp.Select,
)

FUNCTIONS: frozenset[type[exp.Func]] = frozenset(
    {
        # aggregates
        exp.Count,
        exp.Sum,
        exp.Avg,
        exp.Min,
        exp.Max,
        exp.Stddev,
        exp.StddevSamp,
        exp.StddevPop,
        exp.Variance,
        exp.VariancePop,
        exp.Median,
        exp.Mode,
        exp.PercentileCont,
        exp.PercentileDisc,
        exp.ApproxDistinct,
        exp.LogicalAnd,
        exp.LogicalOr,
        exp.AnyValue,
        exp.First,
        exp.Last,
        exp.ArgMin,
        exp.ArgMax,
        exp.CountIf,
        exp.Corr,
        exp.CovarPop,
        exp.CovarSamp,
        exp.RegrSlope,
        exp.BitwiseAndAgg,
        exp.BitwiseOrAgg,
        exp.BitwiseXorAgg,
        # windows
        exp.RowNumber,
        exp.Rank,
        exp.DenseRank,
        exp.PercentRank,
        exp.CumeDist,
        exp.Ntile,
        exp.Lag,
        exp.Lead,
        exp.FirstValue,
        exp.LastValue,
        exp.NthValue,
        # numbers
        exp.Abs,
        exp.Ceil,
        exp.Floor,
        exp.Round,
        exp.Trunc,
        exp.Sign,
        exp.Sqrt,
        exp.Cbrt,
        exp.Exp,
        exp.Ln,
        exp.Log,
        exp.Pow,
        exp.Greatest,
        exp.Least,
        exp.Pi,
        exp.Degrees,
        exp.Radians,
        exp.Sin,
        exp.Cos,
        exp.Tan,
        exp.Asin,
        exp.Acos,
        exp.Atan,
        exp.Atan2,
        exp.Rand,
        exp.IsNan,
        exp.IsInf,
        exp.WidthBucket,
        # strings
        exp.Lower,
        exp.Upper,
        exp.Length,
        exp.Trim,
        exp.Substring,
        exp.Left,
        exp.Right,
        exp.StrPosition,
        exp.StartsWith,
        exp.EndsWith,
        exp.Contains,
        exp.Concat,
        exp.ConcatWs,
        exp.SplitPart,
        exp.Reverse,
        exp.Initcap,
        exp.MD5,
        exp.SHA2,
        exp.Translate,
        exp.Replace,
        exp.RegexpReplace,
        exp.RegexpLike,
        exp.RegexpILike,
        exp.RegexpExtract,
        exp.RegexpFullMatch,
        exp.Pad,
        exp.Ascii,
        exp.Chr,
        exp.Overlay,
        exp.Levenshtein,
        # conditionals and casts
        exp.Nullif,
        exp.Coalesce,
        exp.If,
        exp.Case,
        exp.Cast,
        exp.TryCast,
        exp.Exists,
        exp.Typeof,
        # dates and times
        exp.CurrentDate,
        exp.CurrentTimestamp,
        exp.TimestampTrunc,
        exp.DateTrunc,
        exp.Extract,
        exp.Year,
        exp.Month,
        exp.Day,
        exp.Hour,
        exp.Minute,
        exp.Second,
        exp.DayOfWeek,
        exp.DayOfYear,
        exp.Week,
        exp.Quarter,
        exp.DateDiff,
        exp.DateAdd,
        exp.DateSub,
        exp.TimeToStr,
        exp.StrToTime,
        exp.StrToDate,
        exp.DateFromParts,
        exp.TimeToUnix,
        exp.UnixToTime,
        exp.LastDay,
        exp.Dayname,
        exp.Monthname,
        exp.DateBin,
        exp.JustifyDays,
        exp.JustifyHours,
        exp.JustifyInterval,
        exp.MakeInterval,
    }
)
"""Typed functions allowed in both dialects (sqlglot translates each into either)."""

NAMED_FUNCTIONS: Mapping[Dialect, frozenset[str]] = {
    "duckdb": frozenset(
        {
            "octet_length",
            "gcd",
            "lcm",
            "even",
            "suffix",
            "prefix",
            "hash",
            "bit_count",
            "nextafter",
            "date_part",
            "datepart",
            "age",
            "epoch_us",
            "epoch_ns",
            "isfinite",
            "signbit",
            "make_timestamp",
            "make_time",
            "century",
            "decade",
            "millennium",
            "microsecond",
            "millisecond",
            "yearweek",
            "isodow",
            "isoyear",
            "weekday",
            "weekofyear",
            "dayofmonth",
            "strip_accents",
            "ilike_escape",
            "like_escape",
            "regexp_full_match",
            "levenshtein",
            "damerau_levenshtein",
            "jaro_similarity",
            "jaro_winkler_similarity",
            "hamming",
            "jaccard",
            "mismatches",
            "favg",
            "fsum",
            "kurtosis",
            "skewness",
            "entropy",
            "product",
            "bool_and",
            "bool_or",
            "bit_length",
            "geomean",
            "geometric_mean",
        }
    ),
    "postgres": frozenset(
        {
            "octet_length",
            "bit_length",
            "gcd",
            "lcm",
            "every",
            "make_date",
            "make_time",
            "make_timestamp",
            "age",
            "date_part",
            "isfinite",
            "clock_timestamp",
            "statement_timestamp",
            "transaction_timestamp",
            "localtimestamp",
            "scale",
            "min_scale",
            "trim_scale",
            "regr_intercept",
            "regr_count",
            "regr_r2",
            "regr_avgx",
            "regr_avgy",
            "regr_sxx",
            "regr_syy",
            "regr_sxy",
            "bool_and",
            "bool_or",
            "to_number",
        }
    ),
}
"""Functions sqlglot parses as anonymous calls, by lower-case name, per dialect."""

CONSTRUCTS: frozenset[type[exp.Expr]] = frozenset(
    {
        exp.Select,
        exp.Union,
        exp.Intersect,
        exp.Except,
        exp.From,
        exp.Join,
        exp.Table,
        exp.TableAlias,
        exp.Subquery,
        exp.With,
        exp.CTE,
        exp.Where,
        exp.Group,
        exp.Rollup,
        exp.GroupingSets,
        exp.Having,
        exp.Qualify,
        exp.Order,
        exp.Ordered,
        exp.Limit,
        exp.Offset,
        exp.Fetch,
        exp.Distinct,
        exp.Window,
        exp.WindowSpec,
        exp.Filter,
        exp.WithinGroup,
        exp.Column,
        exp.Identifier,
        exp.Star,
        exp.Alias,
        exp.Literal,
        exp.Boolean,
        exp.Null,
        exp.Paren,
        exp.Tuple,
        exp.Neg,
        exp.Not,
        exp.BitwiseNot,
        exp.In,
        exp.Between,
        exp.Any,
        exp.All,
        exp.DataType,
        exp.DataTypeParam,
        exp.Interval,
        exp.Var,
        exp.Add,
        exp.Sub,
        exp.Mul,
        exp.Div,
        exp.IntDiv,
        exp.Mod,
        exp.DPipe,
        exp.And,
        exp.Or,
        exp.Xor,
        exp.EQ,
        exp.NEQ,
        exp.NullSafeEQ,
        exp.NullSafeNEQ,
        exp.GT,
        exp.GTE,
        exp.LT,
        exp.LTE,
        exp.Is,
        exp.Like,
        exp.ILike,
        exp.SimilarTo,
        exp.Glob,
        exp.Escape,
        exp.BitwiseAnd,
        exp.BitwiseOr,
        exp.BitwiseXor,
        exp.BitwiseLeftShift,
        exp.BitwiseRightShift,
    }
)
"""Syntax nodes other than function calls a query may contain."""

CAST_TYPES: frozenset[exp.DType] = frozenset(
    {
        exp.DataType.Type.BOOLEAN,
        exp.DataType.Type.TINYINT,
        exp.DataType.Type.SMALLINT,
        exp.DataType.Type.INT,
        exp.DataType.Type.BIGINT,
        exp.DataType.Type.INT128,
        exp.DataType.Type.UTINYINT,
        exp.DataType.Type.USMALLINT,
        exp.DataType.Type.UINT,
        exp.DataType.Type.UBIGINT,
        exp.DataType.Type.FLOAT,
        exp.DataType.Type.DOUBLE,
        exp.DataType.Type.DECIMAL,
        exp.DataType.Type.CHAR,
        exp.DataType.Type.BPCHAR,
        exp.DataType.Type.VARCHAR,
        exp.DataType.Type.NCHAR,
        exp.DataType.Type.NVARCHAR,
        exp.DataType.Type.TEXT,
        exp.DataType.Type.DATE,
        exp.DataType.Type.TIME,
        exp.DataType.Type.TIMETZ,
        exp.DataType.Type.TIMESTAMP,
        exp.DataType.Type.TIMESTAMPTZ,
        exp.DataType.Type.TIMESTAMP_S,
        exp.DataType.Type.TIMESTAMP_MS,
        exp.DataType.Type.TIMESTAMP_NS,
        exp.DataType.Type.DATETIME,
        exp.DataType.Type.INTERVAL,
        exp.DataType.Type.UUID,
    }
)
"""Types a value may be cast to."""

#: Functions that need their arguments checked (see the module docstring).
BOUNDED: frozenset[type[exp.Func]] = frozenset({exp.Pad, exp.Replace, exp.RegexpReplace})


def _refused_function(name: str, why: str = "") -> QueryRejected:
    reason = why or (
        "is not on the list of functions a query may use (deny by default: functions that run "
        "SQL text, reach files, the network, settings or the catalog, or make values far larger "
        "than their inputs are never on it)"
    )
    return QueryRejected("forbidden_function", f"function {name}() {reason}", function=name)


def function_name(node: exp.Func) -> str:
    """The lower-case name a function call is known by in refusals."""
    if isinstance(node, exp.Anonymous):
        return str(node.name).lower()
    return str(node.sql_name()).lower()


def _literal_text(node: exp.Expr | None) -> str | None:
    if isinstance(node, exp.Literal) and node.is_string:
        return str(node.this)
    return None


def _check_bounded(node: exp.Func) -> None:
    name = function_name(node)
    if isinstance(node, exp.Pad):
        width = node.args.get("expression")
        if not (
            isinstance(width, exp.Literal) and width.is_int and int(width.name) <= MAX_PAD_WIDTH
        ):
            raise _refused_function(
                name, f"needs a literal width of at most {MAX_PAD_WIDTH} (its output has it)"
            )
    elif isinstance(node, exp.Replace):
        found = _literal_text(node.args.get("expression"))
        put = _literal_text(node.args.get("replacement"))
        if found is None or put is None or len(put) > max(len(found), 0) or not found:
            raise _refused_function(
                name,
                "needs literal strings, the replacement no longer than what it replaces (so "
                "its output is never longer than its input)",
            )
    elif isinstance(node, exp.RegexpReplace):
        put = _literal_text(node.args.get("replacement"))
        if put != "":
            raise _refused_function(
                name,
                "may only remove what it matches (replacement '') here: a pattern that matches "
                "the empty string would insert its replacement at every character",
            )


def _check_type(node: exp.DataType) -> None:
    kind = node.this
    if kind not in CAST_TYPES or node.args.get("nested"):
        text = node.sql()
        raise QueryRejected(
            "forbidden_clause",
            f"casts to {text} are refused; cast to a scalar type (numbers, text, dates, "
            "times, intervals, boolean, uuid)",
            type=text,
        )
    if kind in {
        exp.DataType.Type.CHAR,
        exp.DataType.Type.BPCHAR,
        exp.DataType.Type.VARCHAR,
        exp.DataType.Type.NCHAR,
        exp.DataType.Type.NVARCHAR,
        exp.DataType.Type.TEXT,
    }:
        for param in node.expressions:
            value = param.this if isinstance(param, exp.DataTypeParam) else param
            if not (
                isinstance(value, exp.Literal)
                and value.is_int
                and int(value.name) <= MAX_TYPE_LENGTH
            ):
                raise QueryRejected(
                    "forbidden_clause",
                    f"a text type's length is at most {MAX_TYPE_LENGTH} here ({node.sql()})",
                )


def _construct_name(node: exp.Expr) -> str:
    return type(node).__name__.upper()


def check_allowed(tree: exp.Expr, dialect: Dialect) -> None:
    """Refuse anything in ``tree`` (a parsed query in ``dialect``) that the lists of the module
    docstring do not allow. Raises :class:`~api.exceptions.QueryRejected`
    (``forbidden_function``, ``forbidden_clause``). Iterative: call it after
    :func:`api.limits.check_tree`."""
    named = NAMED_FUNCTIONS[dialect]
    operands = 0
    for node in tree.walk():
        if isinstance(node, CONCATENATIONS):
            _check_outermost(node)
            operands += 2 if isinstance(node, exp.DPipe | exp.Overlay) else len(node.expressions)
            if operands > MAX_CONCAT_OPERANDS:
                raise QueryRejected(
                    "forbidden_clause",
                    f"more than {MAX_CONCAT_OPERANDS} concatenated operands in one query",
                )
        if isinstance(node, exp.With) and node.args.get("recursive"):
            raise QueryRejected(
                "forbidden_clause", "WITH RECURSIVE is refused (its rows are not bounded)"
            )
        if type(node) in CONSTRUCTS and not isinstance(node, exp.DataType):
            continue  # some operators (AND, OR) are function nodes to sqlglot
        if isinstance(node, exp.Func):
            if isinstance(node, exp.Anonymous):
                name = function_name(node)
                if name not in named:
                    raise _refused_function(name)
                continue
            if type(node) not in FUNCTIONS:
                raise _refused_function(function_name(node))
            if type(node) in BOUNDED:
                _check_bounded(node)
            continue
        if isinstance(node, exp.DataType):
            if isinstance(node.parent, exp.Cast | exp.DataType) or node.parent is None:
                _check_type(node)
            continue
        if type(node) not in CONSTRUCTS:
            raise QueryRejected(
                "forbidden_clause",
                f"{_construct_name(node)} is not allowed in a query here (deny by default: one "
                "read-only SELECT with joins, set operations, subqueries, CTEs, grouping, "
                "windows and scalar expressions)",
                construct=_construct_name(node),
            )


def _check_outermost(node: exp.Expr) -> None:
    """Refuse a concatenation below the outermost SELECT (see the module docstring)."""
    select = node.find_ancestor(exp.Select)
    outer = select.find_ancestor(*_NESTING) if select is not None else None
    if outer is not None:
        raise QueryRejected(
            "forbidden_clause",
            "string concatenation (||, concat, concat_ws, overlay) is allowed in the outermost "
            "SELECT only: through subqueries and CTEs it could grow values exponentially",
        )


def check_target(tree: exp.Expr, dialect: Dialect) -> None:
    """Before ``tree`` is rendered for ``dialect``: the functions sqlglot does not type pass
    through by name, so each must be on that dialect's list too. Raises
    :class:`~api.exceptions.QueryRejected` (``forbidden_function``)."""
    named = NAMED_FUNCTIONS[dialect]
    for node in tree.find_all(exp.Anonymous):
        name = function_name(node)
        if name not in named:
            raise _refused_function(name, f"is not on the {dialect} list of functions")

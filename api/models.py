"""The request and response bodies of the REST API (pydantic models; they are the OpenAPI spec)."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)
from sqlglot import exp

from api.safety import Dialect

Scalar = str | int | float | bool | None


def unicode_text(value: str) -> str:
    """``value`` if it is Unicode text. JSON can carry lone surrogates (``"\\udc00"``), which no
    database, log or answer can encode; they are refused when the request is validated."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError("text must be valid Unicode (a lone surrogate is not)") from exc
    return value


#: Text that can be encoded (see :func:`unicode_text`).
Text = Annotated[str, AfterValidator(unicode_text)]


def unicode_json(value: Any) -> Any:
    """``value`` (parsed JSON) if every key and string in it is Unicode text. An event carrying a
    lone surrogate cannot be encoded for Kafka or staging, so it is refused here, before it is
    re-offered."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            unicode_text(item)
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return value


#: A table or column name: 1 to 128 characters, no control characters (NUL included).
Identifier = Annotated[
    str,
    StringConstraints(min_length=1, max_length=128, pattern=r"^[^\x00-\x1f\x7f]+$"),
    AfterValidator(unicode_text),
]

#: The largest magnitude of an integer a structured query may compare with (DECIMAL(38)'s).
MAX_INTEGER = 10**38 - 1

#: The most values an ``in`` condition may list, and the longest string value.
MAX_IN_VALUES = 10_000
MAX_STRING_VALUE = 10_000


def _scalar_problem(value: Scalar) -> str | None:
    """Why ``value`` cannot be a literal of a structured query, or None when it can."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return None if abs(value) <= MAX_INTEGER else "integers are limited to ±(10^38 - 1)"
    if isinstance(value, float):
        return None if math.isfinite(value) else "numbers must be finite (no NaN or Infinity)"
    if len(value) > MAX_STRING_VALUE:
        return f"strings are limited to {MAX_STRING_VALUE} characters"
    if "\x00" in value:
        return "strings cannot contain NUL characters"
    try:
        unicode_text(value)
    except ValueError as exc:
        return str(exc)
    return None


class Condition(BaseModel):
    """One condition of a structured query: ``column op value``. The comparison operators and
    ``like`` take one non-null value (``like`` a string); ``in`` takes a list of 1 to
    :data:`MAX_IN_VALUES` values; ``is_null`` and ``not_null`` take none. A value is a string
    (no NUL, at most :data:`MAX_STRING_VALUE` characters), an integer within ±:data:`MAX_INTEGER`,
    a finite number, a boolean, or (inside ``in``) null. Anything else is refused when the request
    is validated (422 ``invalid_request``), never when the SQL is built."""

    model_config = ConfigDict(extra="forbid")

    column: Identifier
    op: Literal["=", "!=", "<", "<=", ">", ">=", "in", "like", "is_null", "not_null"] = "="
    value: Scalar | list[Scalar] = None

    @model_validator(mode="after")
    def _value_fits_op(self) -> Condition:
        value = self.value
        if self.op in ("is_null", "not_null"):
            if value is not None:
                raise ValueError(f"operator {self.op} takes no value")
            return self
        if self.op == "in":
            if not isinstance(value, list):
                raise ValueError("operator in takes a list of values")
            if not 1 <= len(value) <= MAX_IN_VALUES:
                raise ValueError(f"operator in takes 1 to {MAX_IN_VALUES} values")
            values = value
        elif isinstance(value, list):
            raise ValueError(f"operator {self.op} takes one value, not a list")
        elif value is None:
            raise ValueError(f"operator {self.op} takes a value (for NULL use is_null)")
        elif self.op == "like" and not isinstance(value, str):
            raise ValueError("operator like takes a string pattern")
        else:
            values = [value]
        for item in values:
            problem = _scalar_problem(item)
            if problem is not None:
                raise ValueError(f"value of {self.column!r}: {problem}")
        return self


class OrderBy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    column: Identifier
    descending: bool = False


class StructuredQuery(BaseModel):
    """A query without SQL: some columns of one table, conditions joined by AND, an order and a
    limit. It is turned into SQL and checked like any other query."""

    model_config = ConfigDict(extra="forbid")

    table: Identifier
    columns: list[Identifier] | None = Field(default=None, max_length=256)
    where: list[Condition] = Field(default_factory=list, max_length=64)
    order_by: list[OrderBy] = Field(default_factory=list, max_length=16)
    limit: int | None = Field(default=None, ge=0, le=2**62)

    def to_sql(self) -> str:
        """The query as DuckDB SQL, every name quoted and every value a literal."""

        def ident(name: str) -> exp.Expression:
            return exp.column(name, quoted=True)

        columns = [ident(c) for c in self.columns] if self.columns else [exp.Star()]
        select = exp.select(*columns).from_(
            exp.Table(this=exp.to_identifier(self.table, quoted=True))
        )
        for cond in self.where:
            select = select.where(_condition(cond, ident(cond.column)), copy=False)
        for order in self.order_by:
            select = select.order_by(
                exp.Ordered(this=ident(order.column), desc=order.descending), copy=False
            )
        if self.limit is not None:
            select = select.limit(self.limit, copy=False)
        return select.sql(dialect="duckdb")


def _literal(value: Scalar) -> exp.Expression:
    if value is None:
        return exp.Null()
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, int | float):
        return exp.Literal.number(value)
    return exp.Literal.string(value)


def _condition(cond: Condition, column: exp.Expression) -> exp.Expression:
    if cond.op == "is_null":
        return exp.Is(this=column, expression=exp.Null())
    if cond.op == "not_null":
        return exp.Not(this=exp.Is(this=column, expression=exp.Null()))
    # Condition's validator has checked that the value fits the operator
    if cond.op == "in":
        assert isinstance(cond.value, list)
        return exp.In(this=column, expressions=[_literal(v) for v in cond.value])
    assert cond.value is not None and not isinstance(cond.value, list)
    value = _literal(cond.value)
    builders: dict[str, type[exp.Expression]] = {
        "=": exp.EQ,
        "!=": exp.NEQ,
        "<": exp.LT,
        "<=": exp.LTE,
        ">": exp.GT,
        ">=": exp.GTE,
        "like": exp.Like,
    }
    return builders[cond.op](this=column, expression=value)


class QueryBody(BaseModel):
    """A union query: ``sql`` (one read-only SELECT over the logical tables, in ``dialect``) or
    ``structured``; the plan; whether rows still staged count; the warehouse; a pinned watermark
    (answer exactly at this batch); and the first page's size."""

    model_config = ConfigDict(extra="forbid")

    sql: Text | None = Field(default=None, max_length=100_000)
    structured: StructuredQuery | None = None
    dialect: Dialect = "duckdb"
    plan: Literal["island", "migrate", "auto"] = "auto"
    include_staged: bool = True
    target: Literal["postgres", "duckdb"] | None = None
    watermark: int | None = Field(default=None, ge=0, le=2**62)
    page_size: int | None = Field(default=None, ge=1, le=1_000_000)

    @model_validator(mode="after")
    def _one_query(self) -> QueryBody:
        if (self.sql is None) == (self.structured is None):
            raise ValueError("give exactly one of sql and structured")
        if self.sql is not None and "\x00" in self.sql:
            # no dialect has a use for it, and PostgreSQL refuses statement text holding one
            raise ValueError("sql cannot contain NUL characters")
        return self

    def text(self) -> str:
        if self.structured is not None:
            return self.structured.to_sql()
        assert self.sql is not None
        return self.sql


class ColumnInfo(BaseModel):
    name: str
    type: str


class Freshness(BaseModel):
    """How fresh an answer is: when its watermark batch committed and how long ago, and the event
    time of the newest visible event and its age (known when the watermark is staging's newest
    batch; event times are the data's own clock)."""

    committed_at: str | None = None
    committed_age_ms: float | None = None
    newest_event_time: str | None = None
    newest_event_age_ms: float | None = None


class AutoDecision(BaseModel):
    plan: Literal["island", "migrate"]
    staged_fraction: float
    estimates: dict[str, float | None]
    rule: Literal["timings", "crossover"]


class AnswerPage(BaseModel):
    """One page of an answer. ``answer_id`` with ``next_offset`` fetches the next page of the same
    answer (``GET /query/{answer_id}``): every page comes from one read at ``watermark``."""

    answer_id: str
    plan: Literal["island", "migrate", "warehouse", "staging"]
    requested_plan: Literal["island", "migrate", "auto"]
    target: str | None
    include_staged: bool
    watermark: int
    warehouse_watermark: int
    staged_watermark: int
    streams: dict[str, int]
    freshness: Freshness
    staged_rows: int
    warehouse_rows: int | None
    staged_fraction: float | None
    pushed_rows: int
    decision: AutoDecision | None
    seconds: float
    timings: dict[str, float]
    columns: list[ColumnInfo]
    rows: list[list[Any]]
    offset: int
    total_rows: int
    truncated: bool
    next_offset: int | None
    expires_in_s: float


class TableInfo(BaseModel):
    name: str
    kind: Literal["table", "history", "window", "output"]
    columns: list[ColumnInfo]
    row_id: list[str]
    staged_rows: int | None
    pending_changes: int
    targets: dict[str, dict[str, Any]]


def each_once(names: list[str] | None) -> list[str] | None:
    """``names`` if none is named twice: a round that names a target twice is a mistake in the
    request, refused with the names repeated rather than taken once in silence."""
    if names is not None:
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(
                f"each target may be named once; named more than once: {', '.join(twice)}"
            )
    return names


class MigrateBody(BaseModel):
    """A migration round (``POST /migration/push|pull``): ``targets`` (default: every
    configured one), each named at most once, and how to ``merge``."""

    model_config = ConfigDict(extra="forbid")

    targets: Annotated[list[Literal["postgres", "duckdb"]] | None, AfterValidator(each_once)] = (
        Field(default=None, max_length=2)
    )
    merge: Literal["auto", "force", "never"] | None = None


class PushedEvents(BaseModel):
    """Events for ``POST /streams/{stream}/events`` as JSON: objects with the stream's columns
    and optionally ``_ts`` (event time, integer µs since the epoch; without it, the time the
    event arrived). A field the stream does not have refuses the push (``unknown_fields``); an
    event whose ``_ts`` is not an integer or out of range (``INGEST__MIN_EVENT_TIME_MS``,
    ``INGEST__MAX_FUTURE_MS``) becomes a dead letter."""

    model_config = ConfigDict(extra="forbid")

    events: list[dict[str, Any]] = Field(min_length=1, max_length=1_000_000)


class RejectedEvent(BaseModel):
    """A pushed event that became a dead letter: its position and the reason."""

    pos: int
    reason: str


class PushReceiptBody(BaseModel):
    """What became of a push: ``events`` accepted and ``rejects`` dead-lettered (the first 100
    listed in ``rejected``), their positions ``first_pos..last_pos`` and the logical batches
    ``first_batch..last_batch`` that carry them (never empty: a push of no events is refused),
    and ``warnings`` about accepted events (e.g. some had no ``_ts`` and got their arrival
    time)."""

    stream: str
    events: int
    rejects: int
    first_pos: int
    last_pos: int
    first_batch: int
    last_batch: int
    rejected: list[RejectedEvent] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)


class ReplayEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: int | None = Field(default=None, ge=0, le=2**62)
    stream: Text = Field(min_length=1, max_length=256)
    event: Annotated[dict[str, Any], AfterValidator(unicode_json)]


class ReplayBody(BaseModel):
    """Re-offer dead letters: ``ids`` re-offers stored events unchanged (those whose payload is a
    JSON object); ``entries`` offers fixed events (with the dead letter's id to mark it)."""

    model_config = ConfigDict(extra="forbid")

    ids: list[Annotated[int, Field(ge=0, le=2**62)]] = Field(
        default_factory=list, max_length=100_000
    )
    entries: list[ReplayEntry] = Field(default_factory=list, max_length=100_000)

    @model_validator(mode="after")
    def _something(self) -> ReplayBody:
        if not self.ids and not self.entries:
            raise ValueError("give ids or entries to re-offer")
        return self


class RefusedReplay(BaseModel):
    """A dead letter or fixed event that was not re-offered (``id`` null for a fixed event
    without one), and why."""

    id: int | None
    reason: str


class ReplayResult(BaseModel):
    """How many events were re-offered through Kafka, and which were refused."""

    sent: int
    refused: list[RefusedReplay]


class ErrorInfo(BaseModel):
    code: str
    reason: str
    detail: dict[str, Any] | None = None


class ErrorBody(BaseModel):
    """Every error: a stable ``code`` (see :data:`api.exceptions.ErrorCode`) and a ``reason``."""

    error: ErrorInfo

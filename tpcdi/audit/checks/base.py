"""What every audit check is made of: its result, the answer keys and validation rows it reads,
and small constructors for the common shapes (a count of violating rows that must be 0; a number
compared with an answer key per batch).

The warehouse tables never leave the warehouse: each check runs SQL there and brings back a few
numbers; the answer keys (``audit``) and the Validation rows of DImessages are small and are read
once, aggregated, into :class:`AnswerKeys` and :class:`Validations`.

The batches a run has are not fixed at DIGen's three: :attr:`AuditContext.batches` are 1..B, B the
last batch the answer keys describe (a daily feed has one batch per day), or the ``through`` an
audit in the middle of a run is given. A check over batches asks the warehouse once for every
batch (``GROUP BY batchid``, the batches' windows as a ``VALUES`` list: :func:`windows_sql`),
never once per batch, and its detail lists every batch for DIGen's three and only the failing
ones of a longer feed (:func:`per_batch`).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tpcdi.audit.connection import WarehouseConnection
from tpcdi.audit.validation import ROW_COUNT, VALIDATION

#: DIGen's batches: the historical load and two incremental updates.
DIGEN_BATCHES: tuple[int, ...] = (1, 2, 3)
EOT = "DATE '9999-12-31'"
#: A per-batch detail lists every batch up to this many batches, else the failing ones only.
LISTED_BATCHES = 3
#: ... and at most this many of those.
LISTED_FAILURES = 5


@dataclass(frozen=True)
class CheckResult:
    """One check's verdict: ``detail`` states the numbers compared."""

    name: str
    ok: bool
    detail: str
    clause: str = ""
    seconds: float = 0.0


def _date(text: str) -> datetime.date:
    return datetime.date.fromisoformat(text[:10])


class MissingInput(Exception):
    """An answer key or a Validation row a check needs is absent: the check fails, saying so."""


@dataclass(frozen=True)
class AnswerKeys:
    """The ``audit`` table aggregated: ``Value`` sums and ``Date`` per (DataSet, Attribute,
    BatchID)."""

    values: dict[tuple[str, str, int], int]
    dates: dict[tuple[str, str, int], datetime.date]
    batches: frozenset[int]
    datasets: frozenset[str]

    @classmethod
    def load(cls, conn: WarehouseConnection) -> AnswerKeys:
        rows = conn.query(
            'SELECT dataset, attribute, batchid, sum("value"), min("date") FROM {audit} '
            "GROUP BY dataset, attribute, batchid"
        )
        values: dict[tuple[str, str, int], int] = {}
        dates: dict[tuple[str, str, int], datetime.date] = {}
        batches: set[int] = set()
        datasets: set[str] = set()
        for dataset, attribute, batch, total, day in rows:
            key = (str(dataset).strip(), str(attribute).strip(), int(batch or 0))
            datasets.add(key[0])
            batches.add(key[2])
            if total is not None:
                values[key] = int(total)
            if day is not None:
                dates[key] = day if isinstance(day, datetime.date) else _date(str(day))
        return cls(values, dates, frozenset(batches), frozenset(datasets))

    def value(self, dataset: str, attribute: str, batch: int) -> int:
        try:
            return self.values[(dataset, attribute, batch)]
        except KeyError:
            raise MissingInput(f"answer key {dataset}/{attribute} batch {batch} missing") from None

    def upto(self, dataset: str, attribute: str, batch: int) -> int:
        """The sum of an attribute over batches 1..``batch`` (each must be present)."""
        return sum(self.value(dataset, attribute, b) for b in range(1, batch + 1))

    def total(self, dataset: str, attribute: str) -> int:
        """The sum of an attribute over every batch that has it (at least one must)."""
        found = [v for (d, a, _), v in self.values.items() if d == dataset and a == attribute]
        if not found:
            raise MissingInput(f"answer key {dataset}/{attribute} missing")
        return sum(found)

    def day(self, attribute: str, batch: int) -> datetime.date:
        try:
            return self.dates[("Batch", attribute, batch)]
        except KeyError:
            raise MissingInput(f"answer key Batch/{attribute} batch {batch} missing") from None

    def window(self, batch: int) -> tuple[datetime.date, datetime.date]:
        """(FirstDay, LastDay) of a batch: the dates its data may carry."""
        return self.day("FirstDay", batch), self.day("LastDay", batch)


@dataclass(frozen=True)
class Validations:
    """The Validation rows of DImessages: MessageData values per (BatchID, source, text)."""

    data: dict[tuple[int, str, str], list[str | None]]

    @classmethod
    def load(cls, conn: WarehouseConnection) -> Validations:
        rows = conn.query(
            "SELECT batchid, messagesource, messagetext, messagedata FROM {dimessages} "
            "WHERE messagetype = ?",
            [VALIDATION],
        )
        data: dict[tuple[int, str, str], list[str | None]] = {}
        for batch, source, text, value in rows:
            data.setdefault((int(batch), str(source), str(text)), []).append(value)
        return cls(data)

    def count(self, batch: int, source: str, text: str = ROW_COUNT) -> int:
        """The number in the single Validation row ``source``/``text`` of ``batch``."""
        values = self.data.get((batch, source, text), [])
        if len(values) != 1:
            raise MissingInput(
                f"{len(values)} Validation rows {source}/{text!r} in batch {batch} (expected 1)"
            )
        try:
            return int(str(values[0]).strip())
        except ValueError:
            raise MissingInput(
                f"Validation row {source}/{text!r} batch {batch} holds {values[0]!r}"
            ) from None

    def batches(self) -> list[int]:
        return sorted({b for b, _, _ in self.data})


class AuditContext:
    """What a check runs against: the connection, the answer keys, the Validation rows and the
    batches (1..``through``, default the last batch the answer keys describe)."""

    def __init__(self, conn: WarehouseConnection, through: int | None = None) -> None:
        self.conn = conn
        self.through = through
        self._keys: AnswerKeys | None = None
        self._validations: Validations | None = None

    @property
    def batches(self) -> tuple[int, ...]:
        """The timed phases' batches the audit covers: 1 (historical load), 2.. (updates)."""
        last = self.through
        if last is None:
            described = [b for b in self.keys.batches if b >= 1]
            last = max(described) if described else DIGEN_BATCHES[-1]
        return tuple(range(1, last + 1))

    @property
    def last(self) -> int:
        return self.batches[-1]

    @property
    def phases(self) -> tuple[int, ...]:
        """Every phase that writes Validation rows and a PCR (0 = initialization)."""
        return (0, *self.batches)

    @property
    def keys(self) -> AnswerKeys:
        if self._keys is None:
            self._keys = AnswerKeys.load(self.conn)
        return self._keys

    @property
    def validations(self) -> Validations:
        if self._validations is None:
            self._validations = Validations.load(self.conn)
        return self._validations

    def number(self, template: str, params: Sequence[Any] | None = None) -> int:
        """An integer-valued query (``NULL`` reads as 0)."""
        value = self.conn.scalar(template, params)
        return int(value or 0)

    def rows(self, template: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        return self.conn.query(template, params)


Outcome = tuple[bool, str]
Runner = Callable[[AuditContext], Outcome]


@dataclass(frozen=True)
class Check:
    """A named rule (``clause``: where the specification states it) and how to test it."""

    name: str
    clause: str
    run: Runner


def violations(name: str, clause: str, template: str, what: str) -> Check:
    """A check that passes when ``template`` (a ``SELECT count(*) ...``) counts 0 rows.

    ``what`` names the counted rows in the detail: ``"3 versions overlapping the next"``.
    """

    def run(ctx: AuditContext) -> Outcome:
        found = ctx.number(template)
        return found == 0, f"{found} {what} (expected 0)"

    return Check(name, clause, run)


def per_batch(batches: Iterable[int], judge: Callable[[int], Outcome]) -> Outcome:
    """Run ``judge`` for each batch; ok when all are. The detail lists each batch's numbers for
    up to :data:`LISTED_BATCHES` batches; for more (a daily feed), how many batches were judged
    and the first :data:`LISTED_FAILURES` failing ones with their numbers, else the last one's."""
    results = [(b, judge(b)) for b in batches]
    ok = all(r[0] for _, r in results)
    if len(results) <= LISTED_BATCHES:
        return ok, "; ".join(f"batch {b}: {r[1]}" for b, r in results)
    failed = [(b, r) for b, r in results if not r[0]]
    span = f"batches {results[0][0]}..{results[-1][0]}"
    if not failed:
        b, r = results[-1]
        return True, f"{span} all OK (batch {b}: {r[1]})"
    shown = "; ".join(f"batch {b}: {r[1]}" for b, r in failed[:LISTED_FAILURES])
    more = f" (and {len(failed) - LISTED_FAILURES} more)" if len(failed) > LISTED_FAILURES else ""
    return False, f"{len(failed)} of {len(results)} {span} failed: {shown}{more}"


def windows_sql(ctx: AuditContext, shift_days: int = 0) -> str:
    """A ``FROM`` item ``w(batchid, firstday, lastday)`` of every batch's FirstDay..LastDay (moved
    by ``shift_days``) as date literals, for one query over every batch. Raises
    :class:`MissingInput` when a batch's window is not in the answer keys."""
    shift = datetime.timedelta(days=shift_days)
    rows = []
    for batch in ctx.batches:
        first, last = ctx.keys.window(batch)
        rows.append(f"({batch}, DATE '{first + shift}', DATE '{last + shift}')")
    return f"(VALUES {', '.join(rows)}) AS w(batchid, firstday, lastday)"


def per_batch_rows(ctx: AuditContext, template: str, params: Sequence[Any] = ()) -> dict[int, Any]:
    """``{batchid: (the other columns)}`` of a query grouped by batch whose first column is the
    batch."""
    return {int(r[0]): r[1:] for r in ctx.rows(template, list(params) or None) if r[0] is not None}


def compare(actual: int, op: str, expected: int, label: str) -> Outcome:
    """``actual op expected`` with the numbers in the detail, e.g. ``"14600 >= 14573 (min)"``."""
    ok = {
        "=": actual == expected,
        ">=": actual >= expected,
        "<=": actual <= expected,
    }[op]
    return ok, f"{actual} {op if ok else _negate(op)} {expected} {label}".rstrip()


def _negate(op: str) -> str:
    return {"=": "!=", ">=": "<", "<=": ">"}[op]


def batch_set(ctx: AuditContext, table: str) -> dict[int, int]:
    """``{BatchID: rows}`` of a table."""
    return {
        int(b) if b is not None else -1: int(n)
        for b, n in ctx.rows(f"SELECT batchid, count(*) FROM {{{table}}} GROUP BY batchid")
    }


def batch_ids(name: str, clause: str, table: str, expected: Sequence[int] | None = None) -> Check:
    """The BatchIDs present in ``table`` are exactly ``expected`` (default: every batch)."""

    def run(ctx: AuditContext) -> Outcome:
        found = sorted(batch_set(ctx, table))
        wanted = sorted(expected if expected is not None else ctx.batches)
        return found == wanted, f"BatchIDs {batch_list(found)} (expected {batch_list(wanted)})"

    return Check(name, clause, run)


def batch_list(batches: Sequence[int]) -> str:
    """``[1, 2, 3]``, or ``[1..366]`` for a run of consecutive batches longer than three."""
    items = list(batches)
    if len(items) > LISTED_BATCHES and items == list(range(items[0], items[-1] + 1)):
        return f"[{items[0]}..{items[-1]}]"
    return str(items)

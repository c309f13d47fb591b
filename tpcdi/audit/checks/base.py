"""What every audit check is made of: its result, the answer keys and validation rows it reads,
and small constructors for the common shapes (a count of violating rows that must be 0; a number
compared with an answer key per batch).

The warehouse tables never leave the warehouse: each check runs SQL there and brings back a few
numbers; the answer keys (``audit``) and the Validation rows of DImessages are small and are read
once, aggregated, into :class:`AnswerKeys` and :class:`Validations`.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tpcdi.audit.connection import WarehouseConnection
from tpcdi.audit.validation import ROW_COUNT, VALIDATION

#: The timed phases whose data the answer keys describe.
BATCHES: tuple[int, ...] = (1, 2, 3)
#: Every phase that writes Validation rows and a PCR (0 = initialization).
PHASES: tuple[int, ...] = (0, 1, 2, 3)
EOT = "DATE '9999-12-31'"


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
    """What a check runs against: the connection, the answer keys and the Validation rows."""

    def __init__(self, conn: WarehouseConnection) -> None:
        self.conn = conn
        self._keys: AnswerKeys | None = None
        self._validations: Validations | None = None

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
    """Run ``judge`` for each batch; ok when all are; the detail lists each batch's numbers."""
    results = [(b, judge(b)) for b in batches]
    ok = all(r[0] for _, r in results)
    return ok, "; ".join(f"batch {b}: {r[1]}" for b, r in results)


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


def batch_ids(name: str, clause: str, table: str, expected: Sequence[int]) -> Check:
    """The BatchIDs present in ``table`` are exactly ``expected``."""

    def run(ctx: AuditContext) -> Outcome:
        found = sorted(batch_set(ctx, table))
        return found == sorted(expected), f"BatchIDs {found} (expected {sorted(expected)})"

    return Check(name, clause, run)

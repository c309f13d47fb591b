"""A window's aggregates over one key's entries: from scratch, and kept up as entries come and go.

The serial executor keeps a key's window entries as a list in ``(_at, _entry)`` order that only
ever changes by dropping a prefix (entries older than the span) and appending one entry (its
:meth:`~etl_dataflows.executors.serial.SerialExecutor._window`); a stored list is never changed
in place. :func:`aggregate_entries` computes every aggregate of a table over such a list by
looking at each entry: it defines the results. A :class:`WindowSummary` describes one such list
(held by identity) so that the next list, a prefix shorter and one entry longer, mostly gets the
same results without looking at every entry again:

* ``max``/``argmax`` (``min``/``argmin``): the value and position of the earliest entry holding
  the max (min). A new entry replaces it only when strictly greater (smaller), as ``max()``
  keeps the first of equal values; when it drops out of the window, the max of the entries left
  is found again by looking at each of them (``max()`` and ``index()`` over the column);
* ``count``: the non-null values, counted as entries come and go;
* ``first``/``last``: the first (last) non-null value, found from that end of the list;
* ``sum``: added up again in list order (floating-point sums depend on their order).

A column holding a NaN gives way to :func:`aggregate_entries` (``max()`` over values with a NaN
depends on where the NaN stands). Positions are absolute (the first entry of the list the summary
was built from is 0), so dropping a prefix only moves ``base``.
"""

from __future__ import annotations

from math import isnan
from operator import itemgetter
from typing import Any

from etl_dataflows.tables import AT, WindowTable

Row = dict[str, Any]


def aggregate_entries(table: WindowTable, entries: list[Row]) -> Row:
    """The window's aggregates over ``entries`` (in time order; nulls ignored; empty gives null,
    count 0). The time of the max (min) is the earliest entry's that holds it."""
    result: Row = {}
    by_column: dict[str, tuple[list[Row], list[Any]]] = {}
    for name, agg in table.aggregates.items():
        column = agg.column
        got = by_column.get(column)
        if got is None:
            values = list(map(itemgetter(column), entries))
            present = entries
            if None in values:
                present = [e for e, v in zip(entries, values, strict=True) if v is not None]
                values = [v for v in values if v is not None]
            got = by_column[column] = (present, values)
        present, values = got
        kind = agg.kind
        if kind == "count":
            result[name] = len(values)
        elif not values:
            result[name] = None
        elif kind == "max":
            result[name] = max(values)
        elif kind == "min":
            result[name] = min(values)
        elif kind == "sum":
            result[name] = sum(values)
        elif kind == "first":
            result[name] = values[0]
        elif kind == "last":
            result[name] = values[-1]
        elif kind == "argmax":
            result[name] = present[values.index(max(values))][AT]
        else:
            result[name] = present[values.index(min(values))][AT]
    return result


class _ColumnSummary:
    """One column's running facts (see the module docstring), learnt when first asked
    (:meth:`find`): until then ``known`` is False and nothing is kept up. ``top``/``bottom`` are
    the absolute positions of the max and min, None when they must be found again."""

    __slots__ = (
        "bottom",
        "bottom_value",
        "count",
        "extremes",
        "floats",
        "known",
        "nans",
        "top",
        "top_value",
    )

    def __init__(self, extremes: bool, floats: bool) -> None:
        #: whether the max and min are kept
        self.extremes = extremes
        #: whether the column may hold NaN
        self.floats = floats
        self.known = False
        self.count = 0
        self.nans = 0
        self.top: int | None = None
        self.top_value: Any = None
        self.bottom: int | None = None
        self.bottom_value: Any = None

    def add(self, position: int, value: Any) -> None:
        if value is None or not self.known:
            return
        self.count += 1
        if self.floats and value != value:
            self.nans += 1
        if self.extremes:
            if self.top is not None and value > self.top_value:
                self.top, self.top_value = position, value
            if self.bottom is not None and value < self.bottom_value:
                self.bottom, self.bottom_value = position, value

    def remove(self, value: Any) -> None:
        if value is not None and self.known:
            self.count -= 1
            if self.floats and value != value:
                self.nans -= 1

    def find(self, entries: list[Row], base: int, column: str) -> None:
        """Learn the column's facts over ``entries`` (``base``: the first one's position) by
        looking at each."""
        values = list(map(itemgetter(column), entries))
        offsets: list[int] | None = None
        if None in values:
            offsets = [i for i, v in enumerate(values) if v is not None]
            values = [values[i] for i in offsets]
        self.known = True
        self.count = len(values)
        self.nans = sum(map(isnan, values)) if self.floats else 0
        self.top = self.bottom = None
        if not self.extremes or not values or self.nans:
            return
        top = max(values)
        bottom = min(values)
        at_top, at_bottom = values.index(top), values.index(bottom)
        if offsets is not None:
            at_top, at_bottom = offsets[at_top], offsets[at_bottom]
        self.top, self.top_value = base + at_top, top
        self.bottom, self.bottom_value = base + at_bottom, bottom


class WindowSummary:
    """The running aggregates of one list of a key's window entries (see the module docstring).
    Build it with :meth:`of`; :meth:`advance` makes it describe the next list."""

    __slots__ = ("base", "columns", "source")

    def __init__(self, source: list[Row], base: int, columns: dict[str, _ColumnSummary]) -> None:
        #: the entries list described (compared by identity)
        self.source = source
        #: the absolute position of ``source[0]``
        self.base = base
        self.columns = columns

    @classmethod
    def of(cls, table: WindowTable, entries: list[Row]) -> WindowSummary:
        """A summary of ``entries`` (its facts learnt when first asked)."""
        kinds = table.value_types
        columns: dict[str, _ColumnSummary] = {}
        for agg in table.aggregates.values():
            extremes = agg.kind in ("max", "min", "argmax", "argmin")
            got = columns.get(agg.column)
            if got is None:
                columns[agg.column] = _ColumnSummary(extremes, kinds[agg.column] == "float64")
            else:
                got.extremes = got.extremes or extremes
        return cls(entries, 0, columns)

    def advance(self, kept: list[Row], dropped: list[Row]) -> None:
        """Describe ``kept``: this summary's list without its first ``len(dropped)`` entries
        (``dropped``), followed by one new entry (``kept[-1]``)."""
        base = self.base + len(dropped)
        position = base + len(kept) - 1
        entry = kept[-1]
        for column, summary in self.columns.items():
            for old in dropped:
                summary.remove(old[column])
            if summary.top is not None and summary.top < base:
                summary.top = None
            if summary.bottom is not None and summary.bottom < base:
                summary.bottom = None
            summary.add(position, entry[column])
        self.source = kept
        self.base = base

    def aggregates(self, table: WindowTable) -> Row:
        """Every aggregate of ``table`` over the described list: equal to
        :func:`aggregate_entries` of it."""
        entries, base = self.source, self.base
        for column, summary in self.columns.items():
            lost = summary.top is None or summary.bottom is None
            if not summary.known or (summary.extremes and summary.count and lost):
                summary.find(entries, base, column)
        if any(s.nans for s in self.columns.values()):
            return aggregate_entries(table, entries)
        result: Row = {}
        for name, agg in table.aggregates.items():
            column = agg.column
            summary = self.columns[column]
            kind = agg.kind
            if kind == "count":
                result[name] = summary.count
            elif not summary.count:
                result[name] = None
            elif kind in ("max", "min", "argmax", "argmin"):
                if kind == "max":
                    result[name] = summary.top_value
                elif kind == "min":
                    result[name] = summary.bottom_value
                else:
                    position = summary.top if kind == "argmax" else summary.bottom
                    assert position is not None
                    result[name] = entries[position - base][AT]
            elif kind == "first":
                result[name] = next(e[column] for e in entries if e[column] is not None)
            elif kind == "last":
                result[name] = next(e[column] for e in reversed(entries) if e[column] is not None)
            else:
                result[name] = sum(e[column] for e in entries if e[column] is not None)
        return result

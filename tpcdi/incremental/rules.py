"""Column rules of clause 4 shared by the incremental dataflow's stateless steps, in Arrow compute.

Every function takes and returns Arrow arrays (or chunked arrays) and is vectorized: one call per
batch, no Python loop per row. The historical load (:mod:`tpcdi.historical`) applies the same rules
in Spark SQL; the tests check both against the same cases.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: An Arrow array or chunked array (pyarrow has no type stubs).
Array: TypeAlias = Any


def sk_dateid(values: Array) -> Array:
    """``yyyymmdd`` of a date or timestamp: DimDate's SK_DateID (DIGen's Date.txt numbers days so;
    the historical load checks it)."""
    year = pc.cast(pc.year(values), pa.int64())
    month = pc.cast(pc.month(values), pa.int64())
    day = pc.cast(pc.day(values), pa.int64())
    return pc.add(pc.add(pc.multiply(year, 10000), pc.multiply(month, 100)), day)


def sk_timeid(values: Array) -> Array:
    """``hhmmss`` of a timestamp (truncated to the second): DimTime's SK_TimeID."""
    hour = pc.cast(pc.hour(values), pa.int64())
    minute = pc.cast(pc.minute(values), pa.int64())
    second = pc.cast(pc.second(values), pa.int64())
    return pc.add(pc.add(pc.multiply(hour, 10000), pc.multiply(minute, 100)), second)


def _blank_null(values: Array) -> Array:
    return pc.if_else(pc.equal(values, ""), pa.scalar(None, pa.string()), values)


def phone(country: Array, area: Array, local: Array, extension: Array) -> Array:
    """Phone1..3 of clause 4.5.4.3 / 4.6.4.3: ``+c (a) l``, ``(a) l`` or ``l``, then the extension;
    null when no rule applies."""
    country, area, local, extension = (
        _blank_null(pc.cast(x, pa.string())) for x in (country, area, local, extension)
    )
    full = pc.binary_join_element_wise("+", country, " (", area, ") ", local, "")
    no_country = pc.binary_join_element_wise("(", area, ") ", local, "")
    has_local = pc.is_valid(local)
    has_area = pc.is_valid(area)
    has_country = pc.is_valid(country)
    base = pc.if_else(
        pc.and_(pc.and_(has_country, has_area), has_local),
        full,
        pc.if_else(
            pc.and_(has_area, has_local),
            no_country,
            pc.if_else(has_local, local, pa.scalar(None, pa.string())),
        ),
    )
    with_ext = pc.binary_join_element_wise(base, extension, "")
    return pc.if_else(pc.is_valid(extension), with_ext, base)


def gender(values: Array) -> Array:
    """Upper-cased; anything but ``M`` or ``F`` (null included) becomes ``U``."""
    upper = pc.utf8_upper(pc.cast(values, pa.string()))
    keep = pc.fill_null(pc.is_in(upper, value_set=pa.array(["M", "F"])), False)
    return pc.if_else(keep, upper, pa.scalar("U"))


#: Marketing nameplate tags in the specification's order (clause 4.5.15.1).
NAMEPLATE_TAGS = ("HighValue", "Expenses", "Boomer", "MoneyAlert", "Spender", "Inherited")


def nameplate(
    *,
    networth: Array,
    income: Array,
    children: Array,
    cards: Array,
    age: Array,
    credit: Array,
    cars: Array,
) -> Array:
    """MarketingNameplate: the tags that apply joined by ``+``, null when none does. A null input
    never makes a tag apply."""

    def gt(values: Array, limit: int) -> Array:
        return pc.fill_null(pc.greater(values, limit), False)

    def lt(values: Array, limit: int) -> Array:
        return pc.fill_null(pc.less(values, limit), False)

    conditions = [
        pc.or_(gt(networth, 1_000_000), gt(income, 200_000)),
        pc.or_(gt(children, 3), gt(cards, 5)),
        gt(age, 45),
        pc.or_(pc.or_(lt(income, 50_000), lt(credit, 600)), lt(networth, 100_000)),
        pc.or_(gt(cars, 3), gt(cards, 7)),
        pc.and_(lt(age, 25), gt(networth, 1_000_000)),
    ]
    null = pa.scalar(None, pa.string())
    parts = [
        pc.if_else(c, pa.scalar(tag), null)
        for c, tag in zip(conditions, NAMEPLATE_TAGS, strict=True)
    ]
    # join the present tags with '+': build left to right, skipping nulls
    out: Array = parts[0]
    for part in parts[1:]:
        joined = pc.binary_join_element_wise(out, part, "+")
        out = pc.if_else(pc.is_null(out), part, pc.if_else(pc.is_null(part), out, joined))
    return out


def matchkey(first: Array, last: Array, address1: Array, address2: Array, postal: Array) -> Array:
    """The key that matches a prospect to a customer (clause 4.5.4.3): upper(first || last ||
    address1 || coalesce(address2, '') || postal), null when a part other than address2 is null —
    the concatenation the official audit joins on."""
    address2 = pc.fill_null(pc.cast(address2, pa.string()), "")
    joined = pc.binary_join_element_wise(first, last, address1, address2, postal, "")
    return pc.utf8_upper(joined)


#: The Prospect fields clause 4.6.14.1 compares with the prior saved values (warehouse column,
#: Prospect.csv column), in the file's order.
PROSPECT_FIELDS: tuple[tuple[str, str], ...] = (
    ("lastname", "LastName"),
    ("firstname", "FirstName"),
    ("middleinitial", "MiddleInitial"),
    ("gender", "Gender"),
    ("addressline1", "AddressLine1"),
    ("addressline2", "AddressLine2"),
    ("postalcode", "PostalCode"),
    ("city", "City"),
    ("state", "State"),
    ("country", "Country"),
    ("phone", "Phone"),
    ("income", "Income"),
    ("numbercars", "NumberCars"),
    ("numberchildren", "NumberChildren"),
    ("maritalstatus", "MaritalStatus"),
    ("age", "Age"),
    ("creditrating", "CreditRating"),
    ("ownorrentflag", "OwnOrRentFlag"),
    ("employer", "Employer"),
    ("numbercreditcards", "NumberCreditCards"),
    ("networth", "NetWorth"),
)
_FIELD_SEPARATOR = "\x1f"
_NULL_FIELD = "\x1e"


def prospect_values(columns: Sequence[Array]) -> Array:
    """The :data:`PROSPECT_FIELDS` of each row as one string, equal for two rows exactly when
    every field is (a null field as the record-separator character and fields apart by the
    unit separator: control characters no field of the file holds, and both warehouses store),
    so "did any value change" is one comparison."""
    texts = [pc.fill_null(pc.cast(c, pa.string()), _NULL_FIELD) for c in columns]
    return pc.binary_join_element_wise(*texts, _FIELD_SEPARATOR)


def repeated(values: Array) -> Array:
    """Whether each row's value occurs in another row of ``values`` too (False for a null)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if not len(values):
        return pa.array([], type=pa.bool_())
    indices = pc.dictionary_encode(values).indices
    codes = np.asarray(indices.fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)
    counts = np.bincount(codes[codes >= 0], minlength=1)
    return pa.array((codes >= 0) & (counts[np.maximum(codes, 0)] > 1))


def lookup(codes: Array, mapping: Mapping[str, Any], value_type: pa.DataType) -> Array:
    """``mapping[code]`` for every code (null where the code is null or unknown)."""
    keys = list(mapping)
    index = pc.index_in(pc.cast(codes, pa.string()), value_set=pa.array(keys, pa.string()))
    values = pa.array([mapping[k] for k in keys], value_type)
    if len(values) == 0:
        return pa.nulls(len(codes), value_type)
    return pc.take(values, index)


def known(codes: Array, names: Sequence[str]) -> Array:
    """Whether each code is one of ``names`` (false for null)."""
    return pc.fill_null(pc.is_in(codes, value_set=pa.array(list(names), pa.string())), False)

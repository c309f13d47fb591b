"""Prospect.csv: the full list of prospective customers in every batch.

Batch1's list holds almost every unflagged customer as it is at the end of Batch1 (names and
address in random letter case: the match with DimCustomer is case-blind) and other people; each
incremental list drops some prospects, adds some (among them some of the batch's new customers)
and changes the demographics of others. AgencyIDs never repeat.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tpcdi.generator import text
from tpcdi.generator.customers import NEVER, CustomerBase
from tpcdi.generator.people import AddressBook, Persons, concat_persons, persons
from tpcdi.generator.scale import BATCH1_DATE, BATCH1_END, Scale, day
from tpcdi.generator.words import EMPLOYERS

#: Demographic columns of Prospect.csv after the name and address ones.
_DEMOGRAPHICS = (
    "Income",
    "NumberCars",
    "NumberChildren",
    "MaritalStatus",
    "Age",
    "CreditRating",
    "OwnOrRentFlag",
    "Employer",
    "NumberCreditCards",
    "NetWorth",
)


@dataclass
class ProspectList:
    """The current list: identity columns and demographics, one entry per prospect."""

    agency: pa.Array
    key: pa.Array  # match key (upper-cased names, address lines, postal code)
    identity: list[pa.Array]  # LastName .. Phone
    demographics: dict[str, pa.Array]
    serial: int

    def __len__(self) -> int:
        return len(self.agency)

    def columns(self) -> list[pa.Array]:
        return [self.agency, *self.identity, *(self.demographics[k] for k in _DEMOGRAPHICS)]

    def take(self, rows: np.ndarray) -> ProspectList:
        idx = pa.array(rows)
        return ProspectList(
            self.agency.take(idx),
            self.key.take(idx),
            [c.take(idx) for c in self.identity],
            {k: v.take(idx) for k, v in self.demographics.items()},
            self.serial,
        )


def _mangle_case(rng: np.random.Generator, column: pa.Array) -> pa.Array:
    n = len(column)
    style = rng.integers(0, 4, n)
    upper, lower = pc.utf8_upper(column), pc.utf8_lower(column)
    out = pc.if_else(pa.array(style == 1), upper, column)
    return pc.if_else(pa.array(style == 2), lower, out)


def _demographics(rng: np.random.Generator, n: int) -> dict[str, pa.Array]:
    def nullable(values: pa.Array) -> pa.Array:
        return text.with_nulls(values, rng.random(n) < 0.05)

    return {
        "Income": nullable(text.ints(rng.integers(5_000, 500_000, n))),
        "NumberCars": nullable(text.ints(rng.integers(0, 6, n))),
        "NumberChildren": nullable(text.ints(rng.integers(0, 6, n))),
        "MaritalStatus": nullable(text.choose(rng, ["S", "M", "D", "W", "U"], n)),
        "Age": nullable(text.ints(rng.integers(18, 101, n))),
        "CreditRating": nullable(text.ints(rng.integers(300, 851, n))),
        "OwnOrRentFlag": nullable(text.choose(rng, ["O", "R", "U"], n)),
        "Employer": nullable(text.csv_quote(text.choose(rng, EMPLOYERS, n))),
        "NumberCreditCards": nullable(text.ints(rng.integers(0, 11, n))),
        "NetWorth": nullable(text.ints(rng.integers(10_000, 4_000_000, n))),
    }


def _entries(rng: np.random.Generator, people: Persons, serial: int) -> ProspectList:
    n = len(people)
    agency = text.concat(
        pc.utf8_slice_codeunits(people.last, 0, 3), text.ints(serial + np.arange(n))
    )
    canada = pc.equal(people.country, "Canada")
    country = text.with_nulls(people.country, rng.random(n) < 0.04)
    phone = text.with_nulls(
        text.concat(
            "1-", text.digits(rng, n, 3), "-", text.digits(rng, n, 3), "-", text.digits(rng, n, 4)
        ),
        rng.random(n) < 0.05,
    )
    gender = text.with_nulls(text.choose(rng, ["M", "F", "U", "m", "f"], n), rng.random(n) < 0.3)
    del canada
    identity = [
        _mangle_case(rng, people.last),
        _mangle_case(rng, people.first),
        people.middle,
        gender,
        _mangle_case(rng, people.addr1),
        people.addr2,
        _mangle_case(rng, people.zipcode),
        people.city,
        people.state,
        country,
        phone,
    ]
    return ProspectList(agency, people.match_key(), identity, _demographics(rng, n), serial + n)


def first_list(
    rng: np.random.Generator, scale: Scale, book: AddressBook, base: CustomerBase
) -> ProspectList:
    """Batch1's list: 99% of the unflagged customers as at the end of Batch1, and others."""
    eligible = np.flatnonzero(~base.flagged & (base.created < BATCH1_END))
    customers = eligible[rng.random(len(eligible)) < 0.99][: scale.prospects]
    others = persons(rng, book, scale.prospects - len(customers), day(BATCH1_DATE))
    people = concat_persons(base.people.take(customers), others)
    entries = _entries(rng, people, 0)
    return entries.take(rng.permutation(len(entries)))


def next_list(
    rng: np.random.Generator,
    scale: Scale,
    book: AddressBook,
    base: CustomerBase,
    current: ProspectList,
    new_customers: np.ndarray,
    batch_date: datetime.date,
) -> tuple[ProspectList, int]:
    """The next batch's list (of the batch dated ``batch_date``) and the number of new
    prospects in it."""
    changes = scale.prospect_changes
    gone = max(1, round(changes * 0.3))
    new = max(1, round(changes * 0.3))
    changed = max(1, changes - gone - new)
    n = len(current)
    drop = rng.choice(n, min(gone, n - 1), replace=False)
    keep = np.setdiff1d(np.arange(n), drop)
    kept = current.take(keep)
    edit = rng.choice(len(kept), min(changed, len(kept)), replace=False)
    fresh = _demographics(rng, len(edit))
    mask = np.zeros(len(kept), dtype=bool)
    mask[edit] = True
    source = np.full(len(kept), -1)
    source[edit] = np.arange(len(edit))
    taken = pa.array(np.maximum(source, 0))
    for name in ("Income", "NetWorth", "CreditRating", "Age"):
        kept.demographics[name] = pc.if_else(
            pa.array(mask), fresh[name].take(taken), kept.demographics[name]
        )
    eligible = new_customers[~base.flagged[new_customers]]
    from_customers = eligible[: max(0, new - 1)]
    others = persons(rng, book, new - len(from_customers), day(batch_date))
    people = concat_persons(base.people.take(from_customers), others)
    added = _entries(rng, people, current.serial)
    merged = ProspectList(
        pa.concat_arrays([kept.agency, added.agency]),
        pa.concat_arrays([kept.key, added.key]),
        [pa.concat_arrays([a, b]) for a, b in zip(kept.identity, added.identity, strict=True)],
        {k: pa.concat_arrays([kept.demographics[k], added.demographics[k]]) for k in _DEMOGRAPHICS},
        added.serial,
    )
    return merged.take(rng.permutation(len(merged))), len(added)


def matching_active_customers(prospects: ProspectList, base: CustomerBase, end: int) -> int:
    """How many prospects match a customer that is current and active at second ``end``."""
    live = np.flatnonzero((base.created < end) & (base.inactive >= end))
    keys = base.people.take(live).match_key()
    matched = pc.is_in(prospects.key, value_set=keys)
    return int(pc.sum(matched).as_py() or 0)


__all__ = ["NEVER", "ProspectList", "first_list", "matching_active_customers", "next_list"]

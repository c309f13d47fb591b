"""People: employees (HR.csv, the brokers) and the attributes of customers and prospects.

Every attribute is a whole column drawn at once. Addresses carry house numbers that are unique
across all people of a data set (``numbers``), so the prospect-to-customer match key (names,
address lines and postal code, upper-cased) never matches two different people by chance.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tpcdi.generator import text
from tpcdi.generator.reference import local_tax_ids, national_tax_ids
from tpcdi.generator.words import (
    CA_PROVINCE_NAMES,
    CITIES,
    COUNTRIES,
    EMAIL_DOMAINS,
    FIRST_NAMES,
    LAST_NAMES,
    STREET_NAMES,
    STREET_SUFFIXES,
    US_STATES,
)

BROKER_JOB_CODE = 314
_OTHER_JOB_CODES = np.array([47, 101, 162, 205, 250, 338, 402, 535, 658])


@dataclass(frozen=True)
class Employees:
    """HR.csv columns as text, plus the ids and names of the brokers (job code 314)."""

    columns: list[pa.Array]
    broker_ids: np.ndarray
    broker_names: pa.Array


def employees(rng: np.random.Generator, n: int) -> Employees:
    """``n`` employees; about 30% of those with a job code are brokers, 5% have no job code."""
    ids = np.arange(n)
    managers = rng.integers(0, max(1, n // 10), n)
    first, last = text.choose(rng, FIRST_NAMES, n), text.choose(rng, LAST_NAMES, n)
    middle = text.with_nulls(text.choose(rng, list("ABCDEFGHJKLMNPRSTW"), n), rng.random(n) < 0.6)
    job = np.where(rng.random(n) < 0.3, BROKER_JOB_CODE, rng.choice(_OTHER_JOB_CODES, n))
    no_job = rng.random(n) < 0.05
    job_text = text.with_nulls(text.ints(job), no_job)
    branch = text.with_nulls(
        text.concat(text.choose(rng, CITIES, n), " branch"), rng.random(n) < 0.05
    )
    office = text.with_nulls(
        text.concat("OFFICE", text.ints(rng.integers(1, 10000, n))), rng.random(n) < 0.05
    )
    phone = text.with_nulls(_phone(rng, n), rng.random(n) < 0.05)
    brokers = (job == BROKER_JOB_CODE) & ~no_job
    mask = pa.array(brokers)
    names = text.concat(first.filter(mask), " ", last.filter(mask))
    columns = [
        text.ints(ids),
        text.ints(managers),
        first,
        last,
        middle,
        job_text,
        branch,
        office,
        phone,
    ]
    return Employees(columns, ids[brokers], names)


def _phone(rng: np.random.Generator, n: int) -> pa.Array:
    return text.concat(
        "(",
        text.padded(rng.integers(100, 1000, n), 3),
        ") ",
        text.padded(rng.integers(0, 1000, n), 3),
        "-",
        text.padded(rng.integers(0, 10000, n), 4),
    )


#: The text columns of :class:`Persons` (everything but ``dob`` and ``phones``).
TEXT_FIELDS = (
    "first", "last", "middle", "gender", "tax_id", "addr1", "addr2", "zipcode", "city", "state",
    "country", "email1", "email2", "local_tax", "national_tax",
)  # fmt: skip


@dataclass
class Persons:
    """Customer or prospect attributes (text columns; null = absent). Mutable: updates replace
    columns."""

    first: pa.Array
    last: pa.Array
    middle: pa.Array
    gender: pa.Array
    dob: np.ndarray  # days since epoch
    tax_id: pa.Array
    addr1: pa.Array
    addr2: pa.Array
    zipcode: pa.Array
    city: pa.Array
    state: pa.Array
    country: pa.Array
    phones: list[list[pa.Array]]  # 3 phones x (ctry, area, local, ext)
    email1: pa.Array
    email2: pa.Array
    local_tax: pa.Array
    national_tax: pa.Array

    def __len__(self) -> int:
        return len(self.first)

    def take(self, index: np.ndarray) -> Persons:
        index = np.asarray(index, dtype=np.int64)
        rows = pa.array(index)
        columns = {name: getattr(self, name).take(rows) for name in TEXT_FIELDS}
        phones = [[part.take(rows) for part in phone] for phone in self.phones]
        return Persons(**columns, dob=self.dob[index], phones=phones)

    def match_key(self) -> pa.Array:
        """Upper-cased first name, last name, address lines and postal code (clause 4.5.4.3)."""
        return pc.utf8_upper(
            text.concat(
                self.first, "|", self.last, "|", self.addr1, "|", self.addr2, "|", self.zipcode
            )
        )


class AddressBook:
    """Hands out house numbers that are unique within a data set."""

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng
        self._next = 0

    def numbers(self, n: int) -> np.ndarray:
        block = np.arange(self._next, self._next + n)
        self._next += n
        return self._rng.permutation(block) * 7 + self._rng.integers(1, 8, n)


def addresses(rng: np.random.Generator, book: AddressBook, n: int) -> dict[str, pa.Array]:
    """Address columns; 80% in the U.S.A. with 5-digit zip codes, 20% in Canada."""
    canada = rng.random(n) < 0.2
    line1 = text.concat(
        text.ints(book.numbers(n)),
        " ",
        text.choose(rng, STREET_NAMES, n),
        " ",
        text.choose(rng, STREET_SUFFIXES, n),
    )
    line2 = text.with_nulls(
        text.concat("Apt. ", text.ints(rng.integers(1, 999, n))), rng.random(n) < 0.9
    )
    us_zip = text.padded(rng.integers(501, 99950, n), 5)
    letters = "ABCEGHJKLMNPRSTVXY"
    ca_zip = text.concat(
        text.choose(rng, list(letters), n),
        text.ints(rng.integers(0, 10, n)),
        text.choose(rng, list(letters), n),
        " ",
        text.ints(rng.integers(0, 10, n)),
        text.choose(rng, list(letters), n),
        text.ints(rng.integers(0, 10, n)),
    )
    mask = pa.array(canada)
    return {
        "addr1": line1,
        "addr2": line2,
        "zipcode": pc.if_else(mask, ca_zip, us_zip),
        "city": text.choose(rng, CITIES, n),
        "state": pc.if_else(
            mask, text.choose(rng, CA_PROVINCE_NAMES, n), text.choose(rng, US_STATES, n)
        ),
        "country": text.pick(COUNTRIES, canada.astype(np.int64)),
        "canada": mask,
    }


def phones(rng: np.random.Generator, n: int) -> list[list[pa.Array]]:
    """Three phones, each (country code, area code, local number, extension); phone 1 is the
    most complete. Formats pass the audit's phone patterns."""
    result = []
    for k, present in enumerate((0.97, 0.6, 0.3)):
        has = rng.random(n) < present
        area = has & (rng.random(n) < 0.7)
        country = area & (rng.random(n) < 0.5)
        ext = has & (rng.random(n) < 0.1 * (k + 1))
        local = text.concat(
            text.padded(rng.integers(0, 1000, n), 3), "-", text.padded(rng.integers(0, 10000, n), 4)
        )
        result.append(
            [
                text.with_nulls(pa.array(["1"] * n, pa.string()), ~country),
                text.with_nulls(text.padded(rng.integers(100, 1000, n), 3), ~area),
                text.with_nulls(local, ~has),
                text.with_nulls(text.ints(rng.integers(1, 99999, n)), ~ext),
            ]
        )
    return result


def emails(rng: np.random.Generator, first: pa.Array, last: pa.Array) -> tuple[pa.Array, pa.Array]:
    n = len(first)
    local = text.concat(first, ".", last)
    one = text.concat(local, "@", text.choose(rng, EMAIL_DOMAINS, n))
    two = text.with_nulls(
        text.concat(local, "@", text.choose(rng, EMAIL_DOMAINS, n)), rng.random(n) < 0.5
    )
    return one, two


def persons(rng: np.random.Generator, book: AddressBook, n: int, reference_day: int) -> Persons:
    """``n`` people with valid attributes; ages 18 to 95 at ``reference_day``."""
    first, last = text.choose(rng, FIRST_NAMES, n), text.choose(rng, LAST_NAMES, n)
    place = addresses(rng, book, n)
    gender = text.with_nulls(text.choose(rng, ["M", "F", "m", "f"], n), rng.random(n) < 0.45)
    email1, email2 = emails(rng, first, last)
    local_ids, national_ids = local_tax_ids(), national_tax_ids()
    # tax rates cycle through every code (in a random order), so even a few hundred customers
    # use more than 300 local rates and every national one (the audit checks both)
    national = text.pick(national_ids, rng.permutation(n) % len(national_ids))
    return Persons(
        first=first,
        last=last,
        middle=text.with_nulls(
            text.choose(rng, list("ABCDEFGHJKLMNPRSTW"), n), rng.random(n) < 0.65
        ),
        gender=gender,
        dob=reference_day - rng.integers(18 * 365 + 5, 95 * 365, n),
        tax_id=text.concat(
            text.padded(rng.integers(1, 1000, n), 3),
            "-",
            text.padded(rng.integers(1, 100, n), 2),
            "-",
            text.padded(rng.integers(1, 10000, n), 4),
        ),
        addr1=place["addr1"],
        addr2=place["addr2"],
        zipcode=place["zipcode"],
        city=place["city"],
        state=place["state"],
        country=place["country"],
        phones=phones(rng, n),
        email1=email1,
        email2=email2,
        local_tax=text.pick(local_ids, rng.permutation(n) % len(local_ids)),
        national_tax=national,
    )


def concat_persons(a: Persons, b: Persons) -> Persons:
    """The people of ``a`` followed by those of ``b``."""

    def join(x: pa.Array, y: pa.Array) -> pa.Array:
        return pa.concat_arrays([x.cast(pa.string()), y.cast(pa.string())])

    columns = {name: join(getattr(a, name), getattr(b, name)) for name in TEXT_FIELDS}
    phones = [
        [join(x, y) for x, y in zip(first, second, strict=True)]
        for first, second in zip(a.phones, b.phones, strict=True)
    ]
    return Persons(**columns, dob=np.concatenate([a.dob, b.dob]), phones=phones)

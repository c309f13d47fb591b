"""Customers and accounts: the CustomerMgmt.xml history (Batch1) as a model the files are written
from, and the customer state later files refer to.

Rules the data keeps (clauses 2.2.2.5, 4.5.1, 4.5.4 and what the audit checks):

* a customer exists before anything refers to it, an account before it is updated, closed or
  traded; ids grow with creation time;
* at most one action per customer per day (actions on its accounts included), so no change is
  consolidated away and the row-count keys are exact;
* INACT happens once per customer and only account updates and closes follow it; ADDACCT and
  UPDCUST come before it; a closed account is never updated again;
* customers created with an invalid tier or date of birth ("flagged") never get another
  DimCustomer version and never match a prospect, so every way of raising the alerts (per record,
  per customer, per batch) counts them alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tpcdi.exceptions import GeneratorError
from tpcdi.generator import text
from tpcdi.generator.people import AddressBook, Persons, addresses, emails, persons, phones
from tpcdi.generator.scale import BATCH1_DATE, CM_BEGIN, Scale, at, day

DAY = 86_400
NEVER = np.iinfo(np.int64).max
BAD_TIER_SHARE = 0.05
BAD_DOB_SHARE = 0.002
#: Address, e-mail and tier fields an UPDCUST may change (phones always change together).
UPDCUST_FIELDS = ("addr1", "addr2", "zipcode", "city", "state", "country", "email1", "email2")


@dataclass
class Actions:
    """Actions of one type: time, customer, account (-1 when none) and the values they give."""

    kind: str
    ts: np.ndarray
    customer: np.ndarray
    account: np.ndarray
    values: dict[str, pa.Array] = field(default_factory=dict)
    given: dict[str, np.ndarray] = field(default_factory=dict)
    people: Persons | None = None  # NEW: the customers as created
    tier: np.ndarray | None = None  # NEW: tiers as created

    def __len__(self) -> int:
        return len(self.ts)


@dataclass
class CustomerBase:
    """Every customer and account with the state later batches need."""

    people: Persons  # current attributes
    created: np.ndarray  # second of creation, per customer
    tier: np.ndarray  # current tier: 1..3 valid, 0 missing, 4..9 invalid
    flagged: np.ndarray  # created with an invalid tier or date of birth
    inactive: np.ndarray  # second of inactivation, NEVER while active
    account_owner: np.ndarray
    account_created: np.ndarray
    account_closed: np.ndarray
    account_broker: np.ndarray
    account_tax: np.ndarray
    account_name: pa.Array
    actions: list[Actions] = field(default_factory=list)

    @property
    def customers(self) -> int:
        return len(self.created)

    @property
    def accounts(self) -> int:
        return len(self.account_owner)


def invalid_tiers(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Tiers of ``n`` new customers (5% missing or out of range) and the mask of invalid ones."""
    tier = rng.choice(np.array([1, 2, 3]), n, p=[0.1, 0.3, 0.6])
    bad = rng.random(n) < BAD_TIER_SHARE
    tier[bad] = rng.choice(np.array([0, 0, 0, 0, 4, 5, 6, 7, 9]), int(bad.sum()))
    return tier, bad


def spoil_birth_dates(
    rng: np.random.Generator, people: Persons, allowed: np.ndarray, reference_day: int
) -> np.ndarray:
    """Move about 0.2% of the ``allowed`` people's birth dates out of range (over 101 years
    old or born after ``reference_day``); returns the mask of those people."""
    n = len(people)
    bad = (rng.random(n) < BAD_DOB_SHARE) & allowed
    old = bad & (rng.random(n) < 0.5)
    young = bad & ~old
    people.dob[old] = reference_day - rng.integers(101 * 365 + 30, 115 * 365, int(old.sum()))
    people.dob[young] = reference_day + rng.integers(30, 3000, int(young.sum()))
    return np.asarray(bad)


def account_names(rng: np.random.Generator, n: int) -> pa.Array:
    """CA_NAME values: random text, 5% empty."""
    return text.with_nulls(text.letters(rng, rng.integers(10, 51, n)), rng.random(n) < 0.05)


class _Timeline:
    """Keeps at most one action per customer and day."""

    def __init__(self, customers: np.ndarray, ts: np.ndarray) -> None:
        self.occupied = self._keys(customers, ts)

    @staticmethod
    def _keys(customer: np.ndarray, ts: np.ndarray) -> np.ndarray:
        return np.asarray(customer.astype(np.int64) * 1_000_000 + ts // DAY)

    def free(self, customer: np.ndarray, ts: np.ndarray) -> np.ndarray:
        keys = self._keys(customer, ts)
        first = np.zeros(len(keys), dtype=bool)
        first[np.unique(keys, return_index=True)[1]] = True
        return first & ~np.isin(keys, self.occupied)

    def take(self, customer: np.ndarray, ts: np.ndarray) -> None:
        self.occupied = np.concatenate([self.occupied, self._keys(customer, ts)])


def _later(rng: np.random.Generator, start: np.ndarray, end: int) -> np.ndarray:
    """A second on a day after ``start``'s and before ``end`` (``end`` when there is no room)."""
    first = (start // DAY + 1) * DAY
    return np.asarray(
        first + (rng.random(len(start)) * np.maximum(end - first, 0)).astype(np.int64)
    )


Propose = Callable[[int], tuple[np.ndarray, np.ndarray, np.ndarray]]


def _place(
    timeline: _Timeline,
    count: int,
    propose: Propose,
    valid: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
    end: int,
    distinct: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Draw ``count`` (key, customer, second) actions from ``propose`` that are ``valid``, before
    ``end`` and on a free customer-day; ``distinct`` keys when asked."""
    keys, customers, stamps = [], [], []
    taken: set[int] = set()
    need = count
    for _ in range(400):
        if need <= 0:
            break
        key, customer, ts = propose(2 * need + 16)
        ok = (ts < end) & valid(key, customer, ts) & timeline.free(customer, ts)
        if distinct:
            ok &= ~np.isin(key, np.fromiter(taken, np.int64, len(taken)))
            ok[ok] &= np.isin(np.arange(ok.sum()), np.unique(key[ok], return_index=True)[1])
        key, customer, ts = key[ok][:need], customer[ok][:need], ts[ok][:need]
        timeline.take(customer, ts)
        taken.update(key.tolist())
        keys.append(key)
        customers.append(customer)
        stamps.append(ts)
        need -= len(key)
    if need > 0:
        raise GeneratorError("cannot place the CustomerMgmt actions; the scale factor is too small")
    return np.concatenate(keys), np.concatenate(customers), np.concatenate(stamps)


def _customer_update_values(
    rng: np.random.Generator, book: AddressBook, first: pa.Array, last: pa.Array
) -> tuple[dict[str, pa.Array], dict[str, np.ndarray]]:
    """New values for UPDCUST actions of people named ``first``/``last``, and which are given."""
    n = len(first)
    place = addresses(rng, book, n)
    values = {k: place[k] for k in ("addr1", "addr2", "zipcode", "city", "state", "country")}
    values["email1"], values["email2"] = emails(rng, first, last)
    given = {k: rng.random(n) < 0.8 for k in UPDCUST_FIELDS}
    given["tier"] = rng.random(n) < 0.8
    values["tier"] = text.ints(rng.choice(np.array([1, 2, 3]), n, p=[0.1, 0.3, 0.6]))
    for k, phone in enumerate(phones(rng, n)):
        for part, column in zip(("ctry", "area", "local", "ext"), phone, strict=True):
            values[f"phone{k + 1}_{part}"] = column
    return values, given


def history(
    rng: np.random.Generator, scale: Scale, book: AddressBook, broker_ids: np.ndarray
) -> CustomerBase:
    """The Batch1 history of CustomerMgmt.xml and the customer state at its end."""
    begin, end = at(CM_BEGIN), at(BATCH1_DATE) + DAY
    n = scale.cm_new
    created = np.sort(begin + (rng.random(n) * (end - DAY - begin)).astype(np.int64))
    people = persons(rng, book, n, day(BATCH1_DATE))
    tier, bad_tier = invalid_tiers(rng, n)
    flagged = bad_tier | spoil_birth_dates(rng, people, ~bad_tier, day(BATCH1_DATE))
    everyone = np.arange(n)
    timeline = _Timeline(everyone, created)
    eligible = np.flatnonzero(~flagged)
    inactive = np.full(n, NEVER, dtype=np.int64)

    def customers_from(pool: np.ndarray) -> Propose:
        def propose(k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            c = rng.choice(pool, k)
            return c, c, _later(rng, created[c], end)

        return propose

    def anything(key: np.ndarray, c: np.ndarray, t: np.ndarray) -> np.ndarray:
        return np.ones(len(key), dtype=bool)

    _, inact_c, inact_t = _place(
        timeline, scale.cm_inact, customers_from(eligible), anything, end, True
    )
    inactive[inact_c] = inact_t

    def before_inactive(key: np.ndarray, c: np.ndarray, t: np.ndarray) -> np.ndarray:
        return np.asarray(t < inactive[c])

    _, add_c, add_t = _place(
        timeline, scale.cm_addacct, customers_from(everyone), before_inactive, end
    )

    # two updates of customers that have opened a second account (the audit expects DimAccount
    # to grow by more than one row per customer change in Batch1, whatever the scale factor)
    def after_second_account(k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        j = rng.integers(0, len(add_c), k)
        return add_c[j], add_c[j], _later(rng, add_t[j], end)

    def unflagged_active(key: np.ndarray, c: np.ndarray, t: np.ndarray) -> np.ndarray:
        return np.asarray(~flagged[c] & (t < inactive[c]))

    try:
        _, first_c, first_t = _place(timeline, 2, after_second_account, unflagged_active, end)
    except GeneratorError:  # no such customer: the bound then rests on the other updates
        first_c, first_t = np.zeros(0, np.int64), np.zeros(0, np.int64)
    more_c, more_t = _place(
        timeline, scale.cm_updcust - len(first_c), customers_from(eligible), before_inactive, end
    )[1:]
    upd_c, upd_t = np.concatenate([first_c, more_c]), np.concatenate([first_t, more_t])

    # accounts: one per NEW and per ADDACCT, numbered in order of creation
    opened = np.concatenate([created, add_t])
    order = np.argsort(opened, kind="stable")
    account_owner = np.concatenate([everyone, add_c])[order]
    account_created = opened[order]
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    m = len(order)
    closed = np.full(m, NEVER, dtype=np.int64)

    def accounts(k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        a = rng.integers(0, m, k)
        return a, account_owner[a], _later(rng, account_created[a], end)

    close_a, _, close_t = _place(timeline, scale.cm_closeacct, accounts, anything, end, True)
    closed[close_a] = close_t

    def still_open(a: np.ndarray, c: np.ndarray, t: np.ndarray) -> np.ndarray:
        return np.asarray(t < closed[a])

    upd_a, _, upd_at = _place(timeline, scale.cm_updacct, accounts, still_open, end)

    base = CustomerBase(
        people=people,
        created=created,
        tier=tier,
        flagged=flagged,
        inactive=inactive,
        account_owner=account_owner,
        account_created=account_created,
        account_closed=closed,
        account_broker=rng.choice(broker_ids, m),
        account_tax=rng.integers(0, 3, m),
        account_name=account_names(rng, m),
    )
    updcust = Actions("UPDCUST", upd_t, upd_c, np.full(len(upd_c), -1))
    names = pa.array(upd_c)
    updcust.values, updcust.given = _customer_update_values(
        rng, book, people.first.take(names), people.last.take(names)
    )
    updacct = Actions("UPDACCT", upd_at, account_owner[upd_a], upd_a)
    k = len(upd_a)
    pick = rng.integers(0, 3, k)  # at least one field changes
    updacct.given = {
        f: (rng.random(k) < 0.6) | (pick == i) for i, f in enumerate(("tax", "broker", "name"))
    }
    updacct.values = {
        "tax": text.ints(rng.integers(0, 3, k)),
        "broker": text.ints(rng.choice(broker_ids, k)),
        "name": account_names(rng, k),
    }
    new = Actions(
        "NEW", created, everyone, rank[:n], people=people.take(everyone), tier=tier.copy()
    )
    add = Actions("ADDACCT", add_t, add_c, rank[n:])
    for action in (new, add):
        rows = pa.array(action.account)
        action.values = {
            "tax": text.ints(base.account_tax[action.account]),
            "broker": text.ints(base.account_broker[action.account]),
            "name": base.account_name.take(rows),
        }
    base.actions = [
        new,
        add,
        updacct,
        updcust,
        Actions("CLOSEACCT", close_t, account_owner[close_a], close_a),
        Actions("INACT", inact_t, inact_c, np.full(len(inact_c), -1)),
    ]
    _apply_updates(base, updcust, updacct)
    return base


def _last_given(
    keys: np.ndarray, ts: np.ndarray, given: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For each key, the index of its latest action that gives the field: (keys, indexes)."""
    rows = np.flatnonzero(given)
    order = rows[np.lexsort((ts[rows], keys[rows]))]
    last = np.r_[keys[order][1:] != keys[order][:-1], True] if len(order) else np.zeros(0, bool)
    return keys[order][last], order[last]


def _assign(column: pa.Array, at_rows: np.ndarray, values: pa.Array) -> pa.Array:
    """``column`` with ``column[at_rows] = values``."""
    if len(at_rows) == 0:
        return column
    source = np.full(len(column), -1, dtype=np.int64)
    source[at_rows] = np.arange(len(at_rows))
    taken = values.take(pa.array(np.maximum(source, 0)))
    return pc.if_else(pa.array(source >= 0), taken, column)


def _apply_updates(base: CustomerBase, updcust: Actions, updacct: Actions) -> None:
    """Move the customer and account state to the end of Batch1."""
    people = base.people
    for name in UPDCUST_FIELDS:
        who, idx = _last_given(updcust.customer, updcust.ts, updcust.given[name])
        setattr(
            people,
            name,
            _assign(getattr(people, name), who, updcust.values[name].take(pa.array(idx))),
        )
    who, idx = _last_given(updcust.customer, updcust.ts, np.ones(len(updcust), dtype=bool))
    for k in range(3):
        for j, part in enumerate(("ctry", "area", "local", "ext")):
            new = updcust.values[f"phone{k + 1}_{part}"].take(pa.array(idx))
            people.phones[k][j] = _assign(people.phones[k][j], who, new)
    who, idx = _last_given(updcust.customer, updcust.ts, updcust.given["tier"])
    base.tier[who] = np.asarray(pc.cast(updcust.values["tier"].take(pa.array(idx)), pa.int64()))
    for name in ("tax", "broker"):
        which, idx = _last_given(updacct.account, updacct.ts, updacct.given[name])
        values = np.asarray(pc.cast(updacct.values[name].take(pa.array(idx)), pa.int64()))
        getattr(base, f"account_{name}")[which] = values
    which, idx = _last_given(updacct.account, updacct.ts, updacct.given["name"])
    base.account_name = _assign(
        base.account_name, which, updacct.values["name"].take(pa.array(idx))
    )

"""Customer.txt and Account.txt of the incremental batches: CDC records of new, changed and
inactivated customers and accounts, applied to the customer base as they are drawn.

One record per customer and per account per batch; updated and inactivated customers are active
and not flagged; account updates and closes never touch an account of a customer changed in the
same batch (each such customer's accounts get a new DimAccount version anyway); new customers
always open an account.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tpcdi.generator import text
from tpcdi.generator.customers import (
    NEVER,
    CustomerBase,
    account_names,
    invalid_tiers,
    spoil_birth_dates,
)
from tpcdi.generator.people import AddressBook, addresses, concat_persons, emails, persons, phones
from tpcdi.generator.scale import Scale, at, day


@dataclass
class IncrementalRecords:
    """The records of one batch (text columns in file order, CDC columns included) and what the
    answer keys count."""

    customer_columns: list[pa.Array]
    account_columns: list[pa.Array]
    customers_new: int
    customers_updated: int
    customers_inactivated: int
    accounts_new: int
    accounts_updated: int
    accounts_closed: int
    bad_tier: int
    dob_too_old: int
    dob_too_young: int


def _years_before(value: datetime.date, years: int) -> datetime.date:
    """The same day ``years`` earlier (February 28 for a February 29)."""
    try:
        return value.replace(year=value.year - years)
    except ValueError:
        return value.replace(year=value.year - years, day=28)


def _replace(column: pa.Array, rows: np.ndarray, values: pa.Array) -> pa.Array:
    if len(rows) == 0:
        return column
    source = np.full(len(column), -1, dtype=np.int64)
    source[rows] = np.arange(len(rows))
    taken = values.take(pa.array(np.maximum(source, 0)))
    return pc.if_else(pa.array(source >= 0), taken, column)


def _update_customers(
    rng: np.random.Generator, book: AddressBook, base: CustomerBase, who: np.ndarray
) -> None:
    """Change address, e-mails, phones and tier of customers ``who`` in place."""
    n = len(who)
    people = base.people
    place = addresses(rng, book, n)
    for name in ("addr1", "addr2", "zipcode", "city", "state", "country"):
        change = rng.random(n) < 0.8
        setattr(
            people,
            name,
            _replace(getattr(people, name), who[change], place[name].filter(pa.array(change))),
        )
    idx = pa.array(who)
    one, two = emails(rng, people.first.take(idx), people.last.take(idx))
    people.email1, people.email2 = (
        _replace(people.email1, who, one),
        _replace(people.email2, who, two),
    )
    for k, phone in enumerate(phones(rng, n)):
        for j, column in enumerate(phone):
            people.phones[k][j] = _replace(people.phones[k][j], who, column)
    base.tier[who] = rng.choice(np.array([1, 2, 3]), n, p=[0.1, 0.3, 0.6])


def customer_columns(base: CustomerBase, rows: np.ndarray, status: pa.Array) -> list[pa.Array]:
    """Customer.txt columns (without CDC) for customers ``rows`` in their current state."""
    p = base.people.take(rows)
    tier = base.tier[rows]
    return [
        text.ints(rows),
        p.tax_id,
        status,
        p.last,
        p.first,
        p.middle,
        p.gender,
        text.with_nulls(text.ints(tier), tier == 0),
        text.dates(p.dob),
        p.addr1,
        p.addr2,
        p.zipcode,
        p.city,
        p.state,
        p.country,
        *[part for phone in p.phones for part in phone],
        p.email1,
        p.email2,
        p.local_tax,
        p.national_tax,
    ]


def _cdc(flags: np.ndarray, first_dsn: int, order: np.ndarray) -> list[pa.Array]:
    return [text.pick(["I", "U"], flags[order]), text.ints(first_dsn + np.arange(len(order)))]


def batch_records(
    rng: np.random.Generator,
    scale: Scale,
    book: AddressBook,
    base: CustomerBase,
    batch_date: datetime.date,
    broker_ids: np.ndarray,
    dsn: dict[str, int],
) -> IncrementalRecords:
    """Draw the customer and account records of the batch dated ``batch_date`` and apply them
    to ``base``."""
    start = at(batch_date)
    today = day(batch_date)
    # new customers
    k = scale.inc_customer_new
    fresh = persons(rng, book, k, today)
    tier, bad_tier = invalid_tiers(rng, k)
    bad_dob = spoil_birth_dates(rng, fresh, ~bad_tier, today)
    first_new = base.customers
    new_ids = np.arange(first_new, first_new + k)
    base.people = concat_persons(base.people, fresh)
    base.created = np.concatenate([base.created, np.full(k, start)])
    base.tier = np.concatenate([base.tier, tier])
    base.flagged = np.concatenate([base.flagged, bad_tier | bad_dob])
    base.inactive = np.concatenate([base.inactive, np.full(k, NEVER)])
    # updates and inactivations of active, unflagged, older customers
    candidates = np.flatnonzero((base.inactive == NEVER) & ~base.flagged)
    candidates = candidates[candidates < first_new]
    chosen = rng.choice(
        candidates, scale.inc_customer_update + scale.inc_customer_inact, replace=False
    )
    updated, inactivated = chosen[: scale.inc_customer_update], chosen[scale.inc_customer_update :]
    _update_customers(rng, book, base, updated)
    base.inactive[inactivated] = start
    cust_rows = np.concatenate([new_ids, updated, inactivated])
    flags = np.array([0] * k + [1] * (len(chosen)))
    status = text.pick(
        ["ACTV", "INAC"],
        np.r_[np.zeros(k + len(updated), np.int64), np.ones(len(inactivated), np.int64)],
    )
    order = rng.permutation(len(cust_rows))
    columns = customer_columns(base, cust_rows, status)
    customer_cols = _cdc(flags, dsn["customer"], order) + [c.take(pa.array(order)) for c in columns]
    dsn["customer"] += len(order) + int(rng.integers(0, 3))

    # accounts: one for each new customer, then for random active customers
    extra = scale.inc_account_new - k
    active = np.flatnonzero(base.inactive == NEVER)
    owners = np.concatenate([new_ids, rng.choice(active, extra)])
    first_account = base.accounts
    new_accounts = np.arange(first_account, first_account + len(owners))
    base.account_owner = np.concatenate([base.account_owner, owners])
    base.account_created = np.concatenate([base.account_created, np.full(len(owners), start)])
    base.account_closed = np.concatenate([base.account_closed, np.full(len(owners), NEVER)])
    base.account_broker = np.concatenate([base.account_broker, rng.choice(broker_ids, len(owners))])
    base.account_tax = np.concatenate([base.account_tax, rng.integers(0, 3, len(owners))])
    base.account_name = pa.concat_arrays([base.account_name, account_names(rng, len(owners))])
    changed = np.zeros(base.customers, dtype=bool)
    changed[chosen] = True
    open_old = np.flatnonzero(
        (base.account_closed == NEVER)
        & (base.account_created < start)
        & ~changed[base.account_owner]
        & (base.inactive[base.account_owner] == NEVER)
    )
    picked = rng.choice(open_old, scale.inc_account_update + scale.inc_account_close, replace=False)
    acct_updated, acct_closed = (
        picked[: scale.inc_account_update],
        picked[scale.inc_account_update :],
    )
    n_up = len(acct_updated)
    new_broker = rng.random(n_up) < 0.5
    base.account_broker[acct_updated[new_broker]] = rng.choice(broker_ids, int(new_broker.sum()))
    new_tax = rng.random(n_up) < 0.5
    base.account_tax[acct_updated[new_tax]] = rng.integers(0, 3, int(new_tax.sum()))
    base.account_name = _replace(base.account_name, acct_updated, account_names(rng, n_up))
    base.account_closed[acct_closed] = start
    acct_rows = np.concatenate([new_accounts, acct_updated, acct_closed])
    acct_flags = np.array([0] * len(new_accounts) + [1] * len(picked))
    acct_status = np.r_[
        np.zeros(len(new_accounts) + n_up, np.int64), np.ones(len(acct_closed), np.int64)
    ]
    order = rng.permutation(len(acct_rows))
    rows = pa.array(acct_rows)
    account_cols = _cdc(acct_flags, dsn["account"], order) + [
        c.take(pa.array(order))
        for c in (
            text.ints(acct_rows),
            text.ints(base.account_broker[acct_rows]),
            text.ints(base.account_owner[acct_rows]),
            base.account_name.take(rows),
            text.ints(base.account_tax[acct_rows]),
            text.pick(["ACTV", "INAC"], acct_status),
        )
    ]
    dsn["account"] += len(order) + int(rng.integers(0, 3))

    dob = base.people.dob[cust_rows]
    tiers = base.tier[cust_rows]
    return IncrementalRecords(
        customer_columns=customer_cols,
        account_columns=account_cols,
        customers_new=k,
        customers_updated=len(updated),
        customers_inactivated=len(inactivated),
        accounts_new=len(new_accounts),
        accounts_updated=n_up,
        accounts_closed=len(acct_closed),
        bad_tier=int(((tiers < 1) | (tiers > 3)).sum()),
        dob_too_old=int((dob < day(_years_before(batch_date, 100))).sum()),
        dob_too_young=int((dob > today).sum()),
    )

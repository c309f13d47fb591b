"""The DuckDB target's narrow merge (:meth:`DuckDBTarget._merge_narrow`): a large delta whose
rows mostly change the same few columns updates only those, inserts the new rows, deletes and
inserts the rows that changed elsewhere, and leaves exactly the rows a delete-and-insert merge
leaves (floats to the bit: -0.0 replaces 0.0). A delta that does not
fit takes the delete-and-insert path. After an update in place the merge's housekeeping
checkpoints the file."""

from __future__ import annotations

import datetime
import random
import struct
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from migration.schema import WarehouseLayout
from migration.targets import duckdb_file
from migration.targets.duckdb_file import NARROW_MIN_ROWS, DuckDBTarget
from tests.migration_shop import shop_dataflow
from warehouse.duckdb import wal_path
from warehouse.exceptions import WarehouseError

DAY = datetime.timedelta(days=1)
COLUMNS = ("aid", "sk_account", "cid", "balance", "active", "opened")
FULL_ROWS = NARROW_MIN_ROWS * 3 // 2


def _row(rng: random.Random, aid: int) -> tuple[Any, ...]:
    return (
        aid,
        aid + 1_000_000,
        rng.randrange(500),
        rng.choice([0.0, -0.0, 1.5, rng.uniform(-1e6, 1e6)]),
        rng.choice([True, False, None]),
        datetime.date(2020, 1, 1) + datetime.timedelta(rng.randrange(2_000)),
    )


def _table(rows: list[tuple[Any, ...]]) -> pa.Table:
    types = [pa.int64(), pa.int64(), pa.int64(), pa.float64(), pa.bool_(), pa.date32()]
    return pa.table(
        [pa.array([r[i] for r in rows], t) for i, t in enumerate(types)], names=list(COLUMNS)
    )


def _exact(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Rows with floats as their bits, sorted by row id."""
    return sorted(
        (tuple(struct.pack("<d", v) if isinstance(v, float) else v for v in r) for r in rows),
        key=lambda r: r[0],
    )


def _delta(rng: random.Random, full: list[tuple[Any, ...]], wide_share: float) -> list[Any]:
    """Upserts, one per row id: new rows, unchanged rows, rows whose balance or active changed
    (balance's sign alone, too), and a ``wide_share`` of rows changed in cid and opened."""
    rows: list[tuple[Any, ...]] = []
    for old in rng.sample(full, NARROW_MIN_ROWS + 900):
        pick = rng.random()
        if pick < wide_share:
            new = (old[0], old[1] + 1, old[2] + 1, old[3] + 1.0, not old[4], old[5] + DAY)
        elif pick < wide_share + 0.2:
            new = old
        elif pick < wide_share + 0.3 and old[3] == 0.0:
            new = (*old[:3], -old[3], *old[4:])
        elif pick < wide_share + 0.4:
            new = (*old[:4], not old[4], old[5])
        else:
            new = (*old[:3], old[3] + 2.0, None, old[5])
        rows.append(new)
    rows += [_row(rng, FULL_ROWS + n) for n in range(300)]
    rng.shuffle(rows)
    return rows


def _loaded(
    tmp_path: Path, full: list[Any], delta: list[Any], older: list[Any] | None = None
) -> DuckDBTarget:
    """An open target whose full table holds ``full`` and whose delta holds ``older`` (batch 1)
    and ``delta`` (batch 2), loaded and not merged."""
    layout = WarehouseLayout(shop_dataflow().build(), "shop")
    target = DuckDBTarget(layout, tmp_path / "w.duckdb")
    target.open()
    con = target.connection
    columns = ", ".join(f'"{c}"' for c in COLUMNS)
    con.register("full_rows", _table(full))
    con.execute(f"INSERT INTO {layout.full_name('accounts')} ({columns}) SELECT * FROM full_rows")
    for batch_id, rows in ((1, older or []), (2, delta)):
        con.register("delta_rows", _table(rows))
        con.execute(
            f"INSERT INTO {layout.delta_name('accounts')} (batch_id, op, {columns}) "
            f"SELECT {batch_id}, 'upsert', * FROM delta_rows"
        )
        con.execute(
            f"INSERT INTO {layout.ledger_name} VALUES (?, ?, ?, 'push', now(), 1)",
            [layout.stream, batch_id, len(rows)],
        )
    con.execute("CHECKPOINT")
    return target


def _merged(
    tmp_path: Path, full: list[Any], delta: list[Any], older: list[Any] | None = None
) -> tuple[list[Any], bool]:
    """Merge ``delta`` (loaded as batch 2, after ``older`` as batch 1) into ``full`` through
    the merge protocol; the rows after it, and whether the merge was a narrow one."""
    target = _loaded(tmp_path, full, delta, older)
    layout = target.layout
    merged = target.merge()
    narrow = target.narrow_merges == 1
    assert merged is not None and target.narrow_merges <= 1
    assert target.fetch(f"SELECT count(*) FROM {layout.delta_name('accounts')}") == [(0,)]
    wal = wal_path(target.path)
    # an update in place is checkpointed at once (the merge's housekeeping)
    if narrow:
        assert not wal.exists() or wal.stat().st_size == 0, "no checkpoint after the update"
    rows = target.table_rows("accounts")
    target.close()
    return rows, narrow


@pytest.mark.parametrize(
    ("seed", "wide_share", "narrow"), [(1, 0.05, True), (2, 0.1, True), (3, 0.7, False)]
)
def test_the_merge_leaves_the_rows_a_delete_and_insert_leaves(
    tmp_path: Path, seed: int, wide_share: float, narrow: bool
) -> None:
    rng = random.Random(seed)
    full = [_row(rng, aid) for aid in range(FULL_ROWS)]
    delta = _delta(rng, full, wide_share)
    expected = {r[0]: r for r in full} | {r[0]: r for r in delta}
    rows, updated = _merged(tmp_path, full, delta)
    assert updated is narrow
    assert _exact(rows) == _exact(list(expected.values()))


def test_a_small_delta_is_merged_by_delete_and_insert(tmp_path: Path) -> None:
    rng = random.Random(4)
    full = [_row(rng, aid) for aid in range(FULL_ROWS)]
    delta = [(*r[:3], r[3] + 1.0, *r[4:]) for r in full[: NARROW_MIN_ROWS - 1]]
    rows, updated = _merged(tmp_path, full, delta)
    assert not updated
    assert _exact(rows) == _exact(
        list(({r[0]: r for r in full} | {r[0]: r for r in delta}).values())
    )


def test_a_delta_small_against_its_table_is_merged_by_delete_and_insert(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(The marks join the whole table: a delta below the share does not try them.)"""
    monkeypatch.setattr(duckdb_file, "NARROW_MIN_SHARE", 0.9)
    rng = random.Random(5)
    full = [_row(rng, aid) for aid in range(FULL_ROWS)]
    delta = _delta(rng, full, 0.05)  # 5,296 rows: a narrow merge at the default share
    rows, narrow = _merged(tmp_path, full, delta)
    assert not narrow
    assert _exact(rows) == _exact(
        list(({r[0]: r for r in full} | {r[0]: r for r in delta}).values())
    )


def test_the_newest_of_several_batches_is_merged_by_what_changed(tmp_path: Path) -> None:
    """Row ids upserted in two batches of one merge: the newest of each is what the narrow
    merge takes (the merge's window path, not the unique one)."""
    rng = random.Random(6)
    full = [_row(rng, aid) for aid in range(FULL_ROWS)]
    delta = _delta(rng, full, 0.05)
    older = [(*r[:3], r[3] - 7.0, *r[4:]) for r in rng.sample(delta, 400)]
    rows, narrow = _merged(tmp_path, full, delta, older)
    assert narrow
    assert _exact(rows) == _exact(
        list(({r[0]: r for r in full} | {r[0]: r for r in delta}).values())
    )


def test_a_narrow_merge_that_fails_after_its_update_leaves_nothing_and_its_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The narrow merge runs in the merge's transaction: a failure after its ``UPDATE`` (here
    in the delete and insert of the rows changed elsewhere, an error that aborts DuckDB's
    transaction) leaves the full table, the delta and the merge log as they were, the error
    raised is that one (not a clean-up's "transaction aborted" on top of it), and the next
    merge does the whole of it."""
    rng = random.Random(7)
    full = [_row(rng, aid) for aid in range(FULL_ROWS)]
    delta = _delta(rng, full, 0.05)
    target = _loaded(tmp_path, full, delta)
    layout = target.layout

    def killed(*_: object) -> int:
        target.execute("SELECT error('killed inside the narrow merge')")
        raise AssertionError("unreachable")

    monkeypatch.setattr(target, "_replace", killed)
    with pytest.raises(WarehouseError, match="killed inside the narrow merge"):
        target.merge()
    assert target.narrow_merges == 1  # it got past its UPDATE
    assert _exact(target.table_rows("accounts")) == _exact(full)
    assert target.fetch(f"SELECT count(*) FROM {layout.delta_name('accounts')}") == [(len(delta),)]
    assert target.fetch(f"SELECT count(*) FROM {layout.merges_name}") == [(0,)]
    monkeypatch.undo()
    assert target.merge() is not None
    expected = {r[0]: r for r in full} | {r[0]: r for r in delta}
    assert _exact(target.table_rows("accounts")) == _exact(list(expected.values()))
    target.close()

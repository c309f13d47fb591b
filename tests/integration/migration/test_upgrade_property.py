"""Random sequences of compatible dataflow changes interleaved with batches (hypothesis): after
every sequence, staging and a DuckDB warehouse equal the serial oracle run with the same versions
switched at the same batches. Changes: a value column added (with a fill, a default or neither),
an int64 column widened to float64, a column renamed, a state table added, a sink added, a step's
logic changed; the warehouse is migrated at random moments, so it switches behind staging as
often as with it. The oracle's state is carried across each switch by this test's own reading of
the versions (:func:`expected_image`), not by the conversion the stores use."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from etl_dataflows import Dataflow, col, old
from etl_dataflows.batch import EngineBatch
from etl_dataflows.dataflow import CompiledDataflow
from etl_dataflows.executors import BaseExecutor, create_executor
from etl_dataflows.state import StateImage, image_schema, rows_to_table
from etl_dataflows.testing import make_batch
from migration.migrator import Migrator, build_targets
from migration.schema import WarehouseLayout
from staging.handoff import StagedDeltas
from staging.store import StagingStore
from staging.upgrade import upgrade_staging
from streamdi.settings import load_settings
from tests.unit.staging.helpers import simple_commit


@dataclass(frozen=True)
class Extra:
    """A value column beyond ``balance``: its type and how stored rows get it."""

    name: str
    kind: str
    fill: str  # "expr", "default" or "none"


@dataclass(frozen=True)
class Version:
    """One version of the family of dataflows the property draws from."""

    extras: tuple[Extra, ...] = ()
    renames: tuple[tuple[str, str], ...] = ()  # declared by this version only
    tables: tuple[str, ...] = ()
    sinks: tuple[str, ...] = ()
    factor: int = 1

    def build(self) -> CompiledDataflow:
        flow = Dataflow("evolving")
        columns = {"balance": "int64"} | {e.name: e.kind for e in self.extras}
        defaults: dict[str, object] = {"balance": 0}
        fills: dict[str, object] = {}
        for e in self.extras:
            if e.fill == "default":
                defaults[e.name] = 3
            elif e.fill == "expr":
                fills[e.name] = col("balance") * 2 + 1
        accounts = flow.table(
            "accounts", key={"id": "int64"}, columns=columns, defaults=defaults, fills=fills
        )
        counts = [
            flow.table(t, key={"id": "int64"}, columns={"n": "int64"}, defaults={"n": 0})
            for t in self.tables
        ]
        flow.source("transfers", schema={"src": "int64", "dst": "int64", "amount": "int64"})
        t = flow.transact("transfer")
        moved = col("amount") * self.factor
        debit: dict[str, object] = {"balance": old("balance") - moved}
        for e in self.extras:
            debit[e.name] = old(e.name) + 1
        t.update(accounts, "src", set=debit, if_missing="insert")
        t.update(accounts, "dst", set={"balance": old("balance") + moved}, if_missing="insert")
        for table in counts:
            t.update(table, "dst", set={"n": old("n") + 1}, if_missing="insert")
        t.emit(amount=moved)
        flow.sink("moved")
        for sink in self.sinks:
            flow.sink(sink, input="transfer")
        for before, after in self.renames:
            flow.rename_column("accounts", before, after)
        return flow.build()


@dataclass
class Evolution:
    """Applies a drawn change to a version."""

    counter: int = 0
    log: list[str] = field(default_factory=list)

    def change(self, version: Version, kind: str) -> Version:
        self.counter += 1
        n = self.counter
        plain = dataclasses.replace(version, renames=())
        ints = [e for e in version.extras if e.kind == "int64"]
        if kind == "widen" and ints:
            target = ints[0]
            extras = tuple(
                dataclasses.replace(e, kind="float64") if e is target else e for e in version.extras
            )
            return dataclasses.replace(plain, extras=extras)
        if kind == "rename" and version.extras:
            target = version.extras[-1]
            renamed = dataclasses.replace(target, name=f"{target.name}_r{n}")
            extras = tuple(renamed if e is target else e for e in version.extras)
            return dataclasses.replace(plain, extras=extras, renames=((target.name, renamed.name),))
        if kind == "table":
            return dataclasses.replace(plain, tables=(*version.tables, f"t{n}"))
        if kind == "sink":
            return dataclasses.replace(plain, sinks=(*version.sinks, f"s{n}"))
        if kind == "logic":
            return dataclasses.replace(plain, factor=version.factor + 1)
        fill = ("expr", "default", "none")[n % 3]
        return dataclasses.replace(plain, extras=(*version.extras, Extra(f"c{n}", "int64", fill)))


def transfers(
    flow: CompiledDataflow, batch_id: int, rng: random.Random, keys: int = 30
) -> EngineBatch:
    rows = [
        {
            "src": rng.randrange(keys),
            "dst": rng.randrange(keys),
            "amount": rng.randrange(1, 50),
            "_ts": batch_id * 1000 + i,
        }
        for i in range(25)
    ]
    return make_batch(flow, batch_id, transfers=rows)


def expected_image(
    image: StateImage, old: Version, new: Version, flow: CompiledDataflow
) -> StateImage:
    """What every store must hold after switching from ``old`` to ``new``, computed here from
    the versions themselves (not by the conversion under test): renamed columns keep their
    values, widened ones are cast, an added column takes ``balance * 2 + 1`` (its fill), 3 (its
    default) or null; added tables start empty."""
    accounts = image.tables["accounts"]
    before = {e.name: e for e in old.extras}
    renamed_from = {after: before_ for before_, after in new.renames}
    balance = accounts.column("balance").to_pylist()
    columns: dict[str, pa.Array | pa.ChunkedArray] = {
        "id": accounts.column("id"),
        "balance": accounts.column("balance"),
    }
    for e in new.extras:
        source = renamed_from.get(e.name, e.name)
        kind = pa.float64() if e.kind == "float64" else pa.int64()
        if source in before:
            columns[e.name] = accounts.column(source).cast(kind)
        elif e.fill == "expr":
            columns[e.name] = pa.array([None if b is None else b * 2 + 1 for b in balance], kind)
        elif e.fill == "default":
            columns[e.name] = pa.array([3] * accounts.num_rows, kind)
        else:
            columns[e.name] = pa.nulls(accounts.num_rows, kind)
    tables = {
        "accounts": pa.table(columns, schema=image_schema(flow.tables["accounts"])),
        **{n: image.tables[n] for n in old.tables},
    }
    for name in new.tables:
        tables.setdefault(name, rows_to_table(flow.tables[name], []))
    return StateImage(tables, dict(image.sequences))


def _same(staged: StateImage, expected: StateImage) -> bool:
    """Equal tables, and equal sequences where staging has one: a table an upgrade added has
    none in staging until a batch commits (the engine starts it at its declared start then)."""
    if set(staged.tables) != set(expected.tables):
        return False
    if any(expected.sequences.get(n) != v for n, v in staged.sequences.items()):
        return False
    return all(staged.tables[n].equals(t) for n, t in expected.tables.items())


def _rows(table: pa.Table) -> list[tuple[object, ...]]:
    columns = [table.column(n).to_pylist() for n in table.column_names]
    return sorted(zip(*columns, strict=True), key=repr)


STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("batches"), st.integers(1, 3), st.booleans()),
        st.tuples(
            st.just("change"),
            st.sampled_from(["column", "widen", "rename", "table", "sink", "logic"]),
            st.booleans(),
        ),
    ),
    min_size=3,
    max_size=9,
)


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=STEPS, seed=st.integers(0, 10_000))
def test_random_compatible_changes_keep_every_store_equal_to_the_oracle(
    tmp_path_factory: object, steps: list[tuple[str, object, bool]], seed: int
) -> None:
    tmp = tmp_path_factory.mktemp("evolve")  # type: ignore[attr-defined]
    cfg = load_settings(
        streamdi={"state_dir": str(tmp)}, migration={"targets": "duckdb", "release_ms": 0}
    )
    path = tmp / "staging.duckdb"
    rng = random.Random(seed)
    evolution = Evolution()
    version = Version()
    flow = version.build()
    oracle: BaseExecutor = create_executor("serial", flow)
    batch_id = 0
    store = StagingStore(path, flow, background_merge=False)

    def migrate(store: StagingStore) -> None:
        layout = WarehouseLayout(store.flow, cfg.migration.schema_name, history=store.history)
        migrator = Migrator(StagedDeltas(store), build_targets(cfg, layout), cfg.migration)
        try:
            assert not migrator.migrate(merge="force").failed
        finally:
            migrator.close()

    try:
        for step, arg, flag in steps:
            if step == "batches":
                for _ in range(int(arg)):  # type: ignore[call-overload]
                    batch_id += 1
                    batch = transfers(flow, batch_id, rng)
                    store.commit([simple_commit(batch_id, oracle.run_batch(batch))])
                if flag:
                    migrate(store)
                continue
            new_version = evolution.change(version, str(arg))
            new_flow = new_version.build()
            store.close()
            upgrade_staging(path, new_flow)
            image = expected_image(oracle.state_image(), version, new_version, new_flow)
            version, flow = new_version, new_flow
            oracle = create_executor("serial", flow, image)
            store = StagingStore(path, flow, background_merge=False)
            assert _same(store.load_state(), oracle.state_image()), f"after {arg}"
            if flag:
                migrate(store)
        assert _same(store.load_state(), oracle.state_image())
        migrate(store)
        layout = WarehouseLayout(store.flow, cfg.migration.schema_name, history=store.history)
        target = build_targets(cfg, layout)["duckdb"]
        target.open()
        try:
            for name, rows in oracle.state_image().tables.items():
                assert sorted(target.table_rows(name), key=repr) == _rows(rows), name
        finally:
            target.close()
    finally:
        store.close()


def test_a_warehouse_that_skipped_a_rename_applies_it_on_its_way(tmp_path: Path) -> None:
    """The warehouse holds version 1; staging goes to 2 (a rename, declared by 2 only) and 3 (a
    column added); the warehouse switches from 1 straight to 3 and keeps the renamed values."""
    versions = [
        Version(extras=(Extra("c1", "int64", "default"),)),
        Version(extras=(Extra("c1_r", "int64", "default"),), renames=(("c1", "c1_r"),)),
        Version(extras=(Extra("c1_r", "int64", "default"), Extra("c2", "int64", "expr"))),
    ]
    cfg = load_settings(
        streamdi={"state_dir": str(tmp_path)}, migration={"targets": "duckdb", "release_ms": 0}
    )
    path = tmp_path / "staging.duckdb"
    rng = random.Random(3)
    flow = versions[0].build()
    oracle: BaseExecutor = create_executor("serial", flow)
    batch_id = 0
    for i, version in enumerate(versions):
        if i:
            new_flow = version.build()
            upgrade_staging(path, new_flow)
            image = expected_image(oracle.state_image(), versions[i - 1], version, new_flow)
            flow, oracle = new_flow, create_executor("serial", new_flow, image)
        with StagingStore(path, flow, background_merge=False) as store:
            for _ in range(2):
                batch_id += 1
                # after version 1, only 3 of its 40 accounts change: the others keep the values
                # the warehouse's own switch gave them
                batch = transfers(flow, batch_id, rng, keys=40 if i == 0 else 3)
                store.commit([simple_commit(batch_id, oracle.run_batch(batch))])
            if i in (0, 2):  # the warehouse misses version 2 entirely
                layout = WarehouseLayout(flow, cfg.migration.schema_name, history=store.history)
                migrator = Migrator(StagedDeltas(store), build_targets(cfg, layout), cfg.migration)
                assert not migrator.migrate(merge="force").failed
                target = migrator.targets["duckdb"]
                for name, rows in oracle.state_image().tables.items():
                    assert sorted(target.table_rows(name), key=repr) == _rows(rows), name
                migrator.close()

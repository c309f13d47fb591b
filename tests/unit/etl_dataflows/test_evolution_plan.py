"""Upgrade plans (etl_dataflows.evolution): every kind of change is typed and classified, each
one that cannot apply in place names the way out, logic digests follow the code, and the one
row conversion carries renames, widenings, fills, defaults and migration functions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

from etl_dataflows import Dataflow, col, concat, old, udf
from etl_dataflows.dataflow import CompiledDataflow
from etl_dataflows.evolution import ConversionError, RowConversion, describe_flow, plan_upgrade
from etl_dataflows.exceptions import DataflowDefinitionError


def shop(
    *,
    columns: dict[str, str] | None = None,
    key: str = "int64",
    defaults: dict[str, Any] | None = None,
    fills: dict[str, Any] | None = None,
    source: dict[str, str] | None = None,
    extra_table: bool = False,
    extra_sink: bool = False,
    factor: int = 1,
    adjust: Callable[[int], int] | None = None,
    configure: Callable[[Dataflow], None] | None = None,
) -> CompiledDataflow:
    """A customers table written from a source; each argument varies one thing."""
    flow = Dataflow("shop")
    cols = columns if columns is not None else {"name": "string", "spent": "int64"}
    customers = flow.table(
        "customers", key={"id": key}, columns=cols, defaults=defaults, fills=fills
    )
    flow.source("orders", schema=source or {"id": "int64", "name": "string", "amount": "int64"})
    t = flow.transact("order")
    values: dict[str, object] = {}
    if "spent" in cols:
        amount = col("amount") * factor
        if adjust is not None:
            amount = udf(adjust, amount, returns="int64")
        values["spent"] = old("spent") + amount
    k = col("id") if key == "int64" else col("id").cast("string")
    t.update(customers, k, set=values, if_missing="insert")
    if extra_table:
        visits = flow.table("visits", key={"id": "int64"}, columns={"n": "int64"})
        t.update(visits, "id", set={"n": old("n") + 1}, if_missing="insert")
    flow.sink("done")
    if extra_sink:
        flow.sink("done_too", input="order")
    if configure is not None:
        configure(flow)
    return flow.build()


BASE = describe_flow(shop())


def changes(new: CompiledDataflow, **kw: Any) -> dict[tuple[str, str], tuple[str, str | None]]:
    plan = plan_upgrade(BASE, new, **kw)
    return {(c.kind, c.subject): (c.action, c.way_out) for c in plan.changes}


def test_the_same_definition_plans_nothing() -> None:
    plan = plan_upgrade(BASE, shop())
    assert plan.empty and plan.changes == [] and "no changes" in plan.render()


def test_additive_changes_apply_in_place() -> None:
    found = changes(
        shop(
            columns={"name": "string", "spent": "int64", "tier": "string"},
            fills={"tier": concat("t-", col("name"))},
            extra_table=True,
            extra_sink=True,
        )
    )
    assert found[("column_added", "customers.tier")][0] == "in_place"
    assert found[("table_added", "visits")][0] == "in_place"
    assert found[("sink_added", "done_too")][0] == "in_place"
    assert found[("step_logic_changed", "order")][0] == "in_place"
    assert all(action == "in_place" for action, _ in found.values())


def test_a_widened_type_applies_in_place_and_a_narrowed_one_does_not() -> None:
    widened = changes(shop(columns={"name": "string", "spent": "float64"}))
    assert widened[("type_widened", "customers.spent")][0] == "in_place"
    back = describe_flow(shop(columns={"name": "string", "spent": "float64"}))
    narrowed = {(c.kind, c.action) for c in plan_upgrade(back, shop()).changes}
    assert ("type_narrowed", "reprocess") in narrowed


def test_each_incompatible_change_names_its_way_out() -> None:
    key = changes(shop(key="string"))
    action, way_out = key[("key_changed", "customers")]
    assert action == "reprocess" and way_out is not None and "flow.migrate('customers'" in way_out

    dropped = changes(shop(columns={"spent": "int64"}))
    action, way_out = dropped[("column_removed", "customers.name")]
    assert action == "refused" and way_out is not None and "--allow-drop" in way_out
    assert "rename_column" in way_out
    allowed = changes(shop(columns={"spent": "int64"}), allow_drop=True)
    assert allowed[("column_removed", "customers.name")][0] == "in_place"

    noted = describe_flow(
        shop(source={"id": "int64", "name": "string", "amount": "int64", "note": "float64"})
    )
    narrowed = shop(source={"id": "int64", "name": "string", "amount": "int64", "note": "int64"})
    source = {
        (c.kind, c.subject): (c.action, c.way_out) for c in plan_upgrade(noted, narrowed).changes
    }
    action, way_out = source[("source_type_narrowed", "source orders.note")]
    assert action == "refused" and way_out is not None and "new source name" in way_out

    plan = plan_upgrade(BASE, shop(key="string"))
    assert not plan.applicable and "cannot apply in place" in plan.render()


def test_a_rename_mapping_and_a_migration_function_make_changes_in_place() -> None:
    renamed = shop(
        columns={"label": "string", "spent": "int64"},
        configure=lambda f: f.rename_column("customers", "name", "label"),
    )
    found = changes(renamed)
    assert found[("column_renamed", "customers.label")][0] == "in_place"
    assert ("column_removed", "customers.name") not in found

    def rekey(rows: pa.Table) -> pa.Table:
        return rows.set_column(0, "id", rows.column("id").cast(pa.string()))

    migrated = shop(key="string", configure=lambda f: f.migrate("customers", rekey))
    assert changes(migrated)[("key_changed", "customers")][0] == "in_place"


def test_logic_digests_follow_the_code_not_its_name_or_place() -> None:
    def bonus_a(x: int) -> int:
        return x + 1

    def bonus_b(x: int) -> int:
        return x + 2

    def bonus_a_again(x: int) -> int:
        return x + 1

    a = describe_flow(shop(adjust=bonus_a)).steps["order"].logic
    assert describe_flow(shop(adjust=bonus_a_again)).steps["order"].logic == a
    assert describe_flow(shop(adjust=bonus_b)).steps["order"].logic != a
    assert describe_flow(shop(factor=2)).steps["order"].logic != BASE.steps["order"].logic


def _looking_up(table: Any) -> Callable[[int], int]:
    def bonus(x: int) -> int:
        return x + len(table)

    return bonus


def test_large_lookup_data_counts_by_its_contents_not_its_order() -> None:
    """A step closing over lookup data bigger than ``LARGE_DATA`` is digested in one pass (a
    TPC-DI flow at SF 10 took ~20 s to describe value by value, at every opening of staging):
    the digest still follows every value, in nested mappings too, and not insertion order."""
    from etl_dataflows.evolution import shape

    earnings = {f"S{i}": {q: i * 0.25 + q for q in range(8)} for i in range(3 * shape.LARGE_DATA)}
    shuffled = {k: dict(reversed(list(v.items()))) for k, v in reversed(list(earnings.items()))}
    changed = {k: dict(v) for k, v in earnings.items()}
    changed["S1234"][3] += 1e-9

    def logic(data: Any) -> str:
        return describe_flow(shop(adjust=_looking_up(data))).steps["order"].logic

    first = logic(earnings)
    assert shape.canonical(earnings)[0] == "data"
    assert logic(shuffled) == first
    assert logic(changed) != first
    assert logic(sorted(earnings)) != logic(sorted(earnings)[::-1])  # a list keeps its order
    assert logic(set(earnings)) == logic(set(reversed(list(earnings))))
    # not plain data, or keys that do not order among themselves: the value-by-value path
    mixed: dict[object, int] = {i: i for i in range(shape.LARGE_DATA)}
    mixed["a"] = 1
    assert shape.canonical(mixed)[0] != "data" and logic(mixed) == logic(dict(mixed))
    functions = [_looking_up(i) for i in range(shape.LARGE_DATA + 1)]
    assert shape.canonical(functions)[0] != "data"
    assert logic(functions) == logic(list(functions))


def test_large_lookup_data_digests_the_same_whichever_objects_are_shared() -> None:
    """Equal lookup data built two ways (one string object in every entry, or a new string per
    entry, as two processes may build it) has one digest."""
    from etl_dataflows.evolution import shape

    n = 2 * shape.LARGE_DATA
    shared_name = "".join(["Acme ", "Corp"])
    shared = {i: (shared_name, shared_name) for i in range(n)}
    separate = {i: ("".join(["Acme ", "Corp"]), "".join(["Acme", " Corp"])) for i in range(n)}
    assert shared[0][0] is shared[1][0] and separate[0][0] is not separate[0][1]
    assert shape.canonical(shared) == shape.canonical(separate)


def test_small_containers_keep_their_digests() -> None:
    """Below ``LARGE_DATA`` the digest is the one earlier versions recorded: staging files
    written by them open without an upgrade."""
    from etl_dataflows.evolution import shape

    small = {f"k{i}": i for i in range(shape.LARGE_DATA)}
    assert shape.canonical(small) == sorted([k, v] for k, v in small.items())


def test_defaults_changed_apply_after_the_switch() -> None:
    found = changes(shop(defaults={"spent": 5}))
    assert found[("default_changed", "customers.spent")][0] == "in_place"


def test_the_conversion_renames_widens_fills_and_defaults() -> None:
    new = shop(
        columns={"label": "string", "spent": "float64", "tier": "string", "score": "int64"},
        defaults={"score": 7},
        fills={"tier": concat(col("label"), "!")},
        configure=lambda f: f.rename_column("customers", "name", "label"),
    )
    rows = pa.table(
        {
            "id": pa.array([1, 2], pa.int64()),
            "name": pa.array(["a", None], pa.string()),
            "spent": pa.array([3, 4], pa.int64()),
        }
    )
    out = RowConversion(
        BASE.tables["customers"], new.tables["customers"], renames=new.renames["customers"]
    ).convert(rows)
    assert out.column_names == ["id", "label", "spent", "tier", "score"]
    assert out.column("label").to_pylist() == ["a", None]
    assert out.column("spent").to_pylist() == [3.0, 4.0]
    assert out.column("tier").to_pylist() == ["a!", None]
    assert out.column("score").to_pylist() == [7, 7]


def test_a_migration_function_returning_the_wrong_columns_is_a_clear_error() -> None:
    new = shop(key="string", configure=lambda f: f.migrate("customers", lambda rows: rows))
    conversion = RowConversion(
        BASE.tables["customers"], new.tables["customers"], migrate=new.migrations["customers"]
    )
    rows = pa.table({"id": [1], "name": ["a"], "spent": [1]})
    converted = conversion.convert(rows)  # int ids cast to string: allowed by the cast
    assert converted.column("id").to_pylist() == ["1"]
    broken = shop(
        key="string", configure=lambda f: f.migrate("customers", lambda r: r.drop_columns(["name"]))
    )
    with pytest.raises(ConversionError, match="without \\['name'\\]"):
        RowConversion(
            BASE.tables["customers"],
            broken.tables["customers"],
            migrate=broken.migrations["customers"],
        ).convert(rows)


def test_a_fill_reading_an_unknown_column_fails_at_build() -> None:
    with pytest.raises(DataflowDefinitionError, match="fill of 'tier' reads nope"):
        shop(
            columns={"name": "string", "spent": "int64", "tier": "string"},
            fills={"tier": col("nope")},
        )

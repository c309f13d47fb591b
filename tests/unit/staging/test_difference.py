"""The cut-over's change (staging.difference): applied to the old image it gives the new one,
whatever rows were added, changed (nulls included) or removed; equal images give no change."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from etl_dataflows.batch import TableDelta
from staging.difference import table_difference

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string()), ("v", pa.int64())])
ROW_ID = ("id", "part")

images = st.dictionaries(
    st.tuples(st.integers(0, 20), st.sampled_from(["x", "y"])),
    st.one_of(st.none(), st.integers(-5, 5)),
    max_size=30,
)


def _table(image: dict[tuple[int, str], int | None]) -> pa.Table:
    keys = sorted(image)
    return pa.table(
        {
            "id": [k[0] for k in keys],
            "part": [k[1] for k in keys],
            "v": [image[k] for k in keys],
        },
        schema=SCHEMA,
    )


def _apply(
    image: dict[tuple[int, str], int | None], delta: TableDelta
) -> dict[tuple[int, str], int | None]:
    out = dict(image)
    for row in delta.deletes.to_pylist():
        del out[(row["id"], row["part"])]
    for row in delta.upserts.to_pylist():
        out[(row["id"], row["part"])] = row["v"]
    return out


@settings(max_examples=150, deadline=None)
@given(images, images)
def test_the_difference_turns_the_old_image_into_the_new(
    old: dict[tuple[int, str], int | None], new: dict[tuple[int, str], int | None]
) -> None:
    delta = table_difference(_table(old), _table(new), ROW_ID)
    assert _apply(old, delta) == new
    # only what differs: no upsert of an unchanged row, no delete of a kept key
    assert delta.upserts.num_rows == sum(1 for k, v in new.items() if k not in old or old[k] != v)
    assert delta.deletes.num_rows == len(set(old) - set(new))
    assert delta.upserts.schema == SCHEMA
    assert delta.deletes.column_names == list(ROW_ID)
    upserted = list(zip(delta.upserts["id"].to_pylist(), delta.upserts["part"].to_pylist()))
    assert upserted == sorted(upserted)


def test_equal_images_give_no_change_and_other_columns_are_refused() -> None:
    image = _table({(1, "x"): None, (2, "y"): 3})
    assert table_difference(image, image, ROW_ID).empty
    try:
        table_difference(image, image.drop_columns(["v"]), ROW_ID)
    except ValueError as exc:
        assert "differ in columns" in str(exc)
    else:
        raise AssertionError("images of other columns were compared")

"""The change that turns one image of a state table into another: a reprocess's cut-over.

:func:`table_difference` compares two images of the same state table (the rows staging holds and
the rows a replay recomputed, :mod:`runtime.reprocess`) and returns the
:class:`~etl_dataflows.batch.TableDelta` a batch would commit to go from the first to the second:
every row of the new image that the old one does not hold exactly (new rows and changed ones) as
an upsert, every row id only the old one holds as a delete. Applying it to the old image gives the
new one; two equal images give an empty delta. Rows compare on every column, nulls equal to
nulls; the work is one in-memory DuckDB set difference per side, in bulk.
"""

from __future__ import annotations

from collections.abc import Sequence

import duckdb
import pyarrow as pa

from etl_dataflows.batch import TableDelta
from staging.layout import arrow_of, q


def table_difference(old: pa.Table, new: pa.Table, row_id: Sequence[str]) -> TableDelta:
    """The delta from ``old`` to ``new`` (same columns; ``row_id`` names the key columns), its
    upserts in ``new``'s schema and its deletes as row ids, both sorted by row id."""
    if old.schema.names != new.schema.names:
        raise ValueError(
            f"the images differ in columns: {old.schema.names} against {new.schema.names}"
        )
    ids = ", ".join(q(c) for c in row_id)
    con = duckdb.connect()
    try:
        con.register("old_image", old.cast(new.schema))
        con.register("new_image", new)
        upserts = arrow_of(
            con.sql(
                "SELECT * FROM (SELECT * FROM new_image EXCEPT SELECT * FROM old_image) "
                f"ORDER BY {ids}"
            )
        )
        deletes = arrow_of(
            con.sql(
                f"SELECT * FROM (SELECT {ids} FROM old_image EXCEPT SELECT {ids} FROM new_image) "
                f"ORDER BY {ids}"
            )
        )
    finally:
        con.close()
    id_schema = pa.schema([new.schema.field(c) for c in row_id])
    return TableDelta(upserts.cast(new.schema), deletes.cast(id_schema))

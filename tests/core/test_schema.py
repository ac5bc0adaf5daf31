"""Every canonical table round-trips through Parquet, and mismatched frames are refused."""

from __future__ import annotations

import polars as pl
import pytest

from tracekit.core import schema
from tracekit.core.errors import SchemaError

SAMPLE_VALUES = {
    pl.Int32(): 7,
    pl.Int64(): 1_700_000_000_123_456_789,
    pl.Float64(): 1.25,
    pl.String(): "gpu-a01",
    pl.Boolean(): True,
}


def sample_frame(spec: schema.Table) -> pl.DataFrame:
    row = {c.name: [SAMPLE_VALUES[c.dtype], None] for c in spec.columns}
    return pl.DataFrame(row, schema=spec.schema)


@pytest.mark.parametrize("name", sorted(schema.TABLES))
def test_every_table_round_trips_through_parquet(name, tmp_path):
    spec = schema.table(name)
    frame = sample_frame(spec)
    path = tmp_path / f"{name}.parquet"
    frame.write_parquet(path)
    back = pl.read_parquet(path)
    schema.validate(name, back)
    assert back.equals(frame)


@pytest.mark.parametrize("name", sorted(schema.TABLES))
def test_every_column_has_meaning_and_timestamps_are_ns(name):
    spec = schema.table(name)
    assert spec.key and set(spec.key) <= set(spec.column_names)
    for column in spec.columns:
        assert column.meaning, f"{name}.{column.name} has no meaning"
        if column.name.endswith("_ns"):
            assert column.dtype == pl.Int64()
        if column.name.endswith("_s"):
            assert column.dtype == pl.Float64()
    if spec.time_column:
        assert spec.time_column in spec.schema


def test_wrong_dtype_is_refused_with_table_and_column_named():
    frame = sample_frame(schema.COLLECTIVES).with_columns(pl.col("rank").cast(pl.Int64))
    with pytest.raises(SchemaError, match=r"'collectives'.*'rank'.*Int64"):
        schema.validate("collectives", frame)


def test_missing_and_extra_columns_are_refused():
    frame = sample_frame(schema.COMMS)
    with pytest.raises(SchemaError, match="missing column 'bus_id'"):
        schema.validate("comms", frame.drop("bus_id"))
    with pytest.raises(SchemaError, match="unexpected column 'colour'"):
        schema.validate("comms", frame.with_columns(pl.lit(1).alias("colour")))


def test_conform_fills_missing_columns_with_nulls_in_canonical_order():
    partial = pl.DataFrame({"rank": [3], "job": ["j"]}, schema={"rank": pl.Int32, "job": pl.String})
    conformed = schema.conform("collectives", partial)
    schema.validate("collectives", conformed)
    assert conformed["rank"].to_list() == [3]
    assert conformed["t_start_ns"].null_count() == 1


def test_unknown_table_lists_known_ones():
    with pytest.raises(SchemaError, match="known tables: .*collectives"):
        schema.table("colectives")


def test_conform_types_empty_columns_but_keeps_real_dtypes():
    empty = pl.DataFrame({"job": [], "iteration": []})  # polars cannot type these: Null
    conformed = schema.conform("events", empty)
    schema.validate("events", conformed)
    wrong = pl.DataFrame({"iteration": ["7"]})
    with pytest.raises(SchemaError, match="'iteration' has dtype String"):
        schema.validate("events", schema.conform("events", wrong))

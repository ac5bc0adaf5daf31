"""Collective instances: arrival order, lateness and transfer by hand on a small call table
(regular instances, a rank seen twice, a rank on two hosts, an incomplete instance), and the
per-group member / host lists against per-instance ones on a synthesized job."""

from __future__ import annotations

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tracekit.attribute import instances
from tracekit.attribute.groups import handle_groups
from tracekit.attribute.instances import collective_instances, member_calls
from tracekit.core.dataset import open_dataset
from tracekit.ingest.pipeline import ingest
from tracekit.synth.job import JobSpec, generate_job
from tracekit.synth.layout import Layout

# group, seq, rank, host, t_start_ns, t_end_ns
CALLS = [
    ("a", 0, 0, "h0", 100, 200), ("a", 0, 1, "h0", 130, 210), ("a", 0, 2, "h1", 110, 220),
    ("a", 1, 0, "h0", 300, None), ("a", 1, 1, "h0", 300, None), ("a", 1, 2, "h1", 300, None),
    ("a", 2, 0, "h0", 400, 450), ("a", 2, 1, "h0", 410, 450),  # rank 2 missing: dropped
    ("a", 3, 0, "h0", 500, 600), ("a", 3, 0, "h0", 520, 600), ("a", 3, 2, "h1", 510, 600),
    ("b", 0, 3, "h1", 1000, 1100), ("b", 0, 4, "h3", 1040, 1100),  # rank 4 on another host
    ("b", 1, 3, "h1", 2050, 2100), ("b", 1, 4, "h2", 2000, 2200),
    ("b", 2, 3, "h1", 3000, 3005), ("b", 2, 4, "h2", 3010, 3005),  # ends before last arrival
]


def _calls() -> pl.DataFrame:
    frame = pl.DataFrame(CALLS, schema={"group": pl.String, "seq": pl.Int64, "rank": pl.Int32,
                                        "host": pl.String, "t_start_ns": pl.Int64,
                                        "t_end_ns": pl.Int64}, orient="row")
    return frame.with_columns(
        pl.lit(0, dtype=pl.Int32).alias("cuda_dev"), pl.lit("all_reduce").alias("op"),
        pl.lit(1024, dtype=pl.Int64).alias("bytes"),
        pl.when(pl.col("group") == "a").then(3).otherwise(2).cast(pl.Int32).alias("nranks"))


def test_instances_by_hand():
    got = collective_instances(_calls())
    assert got.select("group", "seq", "t_ns", "last_rank").rows() == [
        ("a", 0, 100, 1), ("a", 1, 300, 2), ("a", 3, 500, 0),
        ("b", 0, 1000, 4), ("b", 1, 2000, 3), ("b", 2, 3000, 4)]
    assert got["lateness_s"].to_list() == pytest.approx(
        [25e-9, 0.0, 15e-9, 40e-9, 50e-9, 10e-9], rel=1e-12)
    assert got["transfer_s"].to_list()[1] is None
    assert got["transfer_s"].drop_nulls().to_list() == pytest.approx(
        [80e-9, 80e-9, 60e-9, 100e-9, 0.0], rel=1e-12)
    assert got["members"].to_list() == [[0, 1, 2], [0, 1, 2], [0, 0, 2], [3, 4], [3, 4], [3, 4]]
    assert got["hosts"].to_list() == [["h0", "h1"], ["h0", "h1"], ["h0", "h1"], ["h1", "h3"],
                                      ["h1", "h2"], ["h1", "h2"]]


@pytest.fixture(scope="module")
def synthesized_calls(tmp_path_factory) -> pl.DataFrame:
    """The member calls of a small synthesized hybrid-parallel job."""
    folder = tmp_path_factory.mktemp("lists")
    spec = JobSpec(Layout.parse("tp2-dp2-pp2", gpus_per_host=2), 20, 5, (), job="lists")
    generate_job(folder / "job", spec)
    ingest([folder / "job" / "ranks"], folder / "ds", job="lists")
    ds = open_dataset(folder / "ds")
    groups = handle_groups(ds.table("collectives"), ds.table("comms").collect())
    return member_calls(ds.table("collectives"), groups)


def test_group_lists_equal_per_instance_lists_on_a_synthesized_job(synthesized_calls):
    calls = synthesized_calls
    got = collective_instances(calls)
    per_instance = (calls.group_by("group", "seq")
                    .agg(pl.col("host").unique().sort().alias("hosts"),
                         pl.col("rank").sort().alias("members"), pl.len().alias("seen"),
                         pl.col("nranks").first())
                    .filter(pl.col("seen") == pl.col("nranks")))
    assert got.height == per_instance.height > 1000
    assert_frame_equal(got.select("group", "seq", "hosts", "members").sort("group", "seq"),
                       per_instance.select("group", "seq", "hosts", "members")
                       .sort("group", "seq"))


def _by_sort(calls: pl.DataFrame) -> pl.DataFrame:
    return (instances._instances_by_sort(calls, instances._group_lists(calls))
            .sort("t_ns", "group", "seq"))


def test_the_grid_finds_what_the_sort_finds(synthesized_calls):
    """Bit for bit, in any order of the calls, also where some instances lose a member, an
    end time or all of them, or a rank calls twice: those rows are left to the sort."""
    calls = synthesized_calls.sample(fraction=1.0, shuffle=True, seed=7).with_row_index()
    odd = calls.with_columns(
        pl.when((pl.col("index") % 97 == 0) | (pl.col("group") == pl.col("group").min()))
        .then(None).otherwise("t_end_ns").alias("t_end_ns"))
    odd = pl.concat([odd.filter(pl.col("index") % 89 != 0), odd.filter(pl.col("index") % 83 == 0)])
    for frame in (calls, odd):
        frame = frame.drop("index")
        taken = instances._instances_on_grid(frame, instances._group_lists(frame))[1]
        assert 0.9 < taken.mean() <= 1.0
        assert_frame_equal(collective_instances(frame), _by_sort(frame))
    assert collective_instances(odd.drop("index")).height < collective_instances(calls).height


def test_the_hand_table_goes_to_the_sort_where_the_grid_cannot_hold_it():
    calls = _calls().with_columns(pl.col("group").replace({"a": "0", "b": "1"}))
    assert_frame_equal(collective_instances(calls), _by_sort(calls))
    assert collective_instances(calls.filter(pl.col("group") == "1")).height == 3

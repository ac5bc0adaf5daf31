"""The InfiniteHBD node fault trace (348 days, 400 servers): pairing, durations, recurrence."""

from __future__ import annotations

import json

import polars as pl
import pytest

from tracekit.characterise.faults import (
    duration_summary,
    fault_count_distribution,
    fault_intervals,
    recurrence_per_node,
    relapse_share,
)
from tracekit.ingest.fault_trace import load_fault_trace


@pytest.fixture(scope="module")
def trace(real_dir):
    return real_dir / "infinitehbd-faults"


@pytest.fixture(scope="module")
def intervals(trace):
    return fault_intervals(load_fault_trace(trace / "fault_trace.json"))


def test_every_fault_pairs_and_matches_the_authors_statistics(trace, intervals):
    assert intervals.height == 584
    assert intervals["end_day"].null_count() == 0
    assert (intervals["duration_h"] >= 0).all()
    statistics = json.loads((trace / "fault_statistics.json").read_text())
    expected = {(level, cls): body["ClassTotal"] for level, classes in statistics.items()
                for cls, body in classes.items() if cls != "LevelTotal"}
    counted = {(r["level"], r["fault_class"]): r["len"]
               for r in intervals.group_by("level", "fault_class").len().iter_rows(named=True)}
    assert counted == expected


def test_durations_per_class(intervals):
    summary = {r["fault_class"]: r for r in duration_summary(intervals).iter_rows(named=True)}
    gpu = summary["GPU"]
    assert gpu["faults"] == 158
    assert gpu["median_h"] == pytest.approx(16.7892)
    assert summary["Parameter Plane Cable"]["median_h"] == pytest.approx(47.3916)
    assert duration_summary(intervals)["fault_class"][:3].to_list() == [
        "GPU", "Unknown Error", "Stress Test Failure"]
    assert intervals["duration_h"].median() == pytest.approx(20.3892)


def test_overlapping_faults_on_one_node_pair_by_type(intervals):
    # node d0aff1b6 has a GPU-temperature fault and a CPU configuration fault open together
    node = intervals.filter(pl.col("node").str.starts_with("d0aff1b6")).sort("start_day")
    temperature = node.filter(pl.col("desc") == "GPU Temperature High").row(0, named=True)
    assert temperature["end_day"] == pytest.approx(271.9319)


def test_recurrence(intervals):
    recurrence = recurrence_per_node(intervals)
    assert recurrence.height == 231
    top = recurrence.row(0, named=True)
    assert (top["node"][:8], top["faults"], top["classes"]) == ("e7b02619", 14, 3)
    distribution = fault_count_distribution(recurrence)
    assert distribution.filter(pl.col("faults") == 1)["nodes"].item() == 96
    assert distribution["nodes"].sum() == 231
    assert relapse_share(intervals, 7.0) == pytest.approx(182 / 584)

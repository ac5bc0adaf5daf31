"""Cause table and CDF data on a hand-built corpus of six jobs."""

from __future__ import annotations

import polars as pl
import pytest

from tracekit.characterise.jobs import (
    cause_table,
    ecdf,
    fail_slow_durations,
    job_summary_from_episodes,
    job_summary_from_labels,
)
from tracekit.core import schema

S = 10**9
JOBS = pl.DataFrame({"job": ["a", "b", "c", "d", "e", "f"],
                     "category": ["compute", "compute", "compute", "communication",
                                  "communication", "large"]})


def _labels() -> pl.DataFrame:
    rows = [("a", 0, True, "cpu-contention", 0, 600), ("b", 0, False, "gc-pause", 0, 2),
            ("d", 0, True, "network-congestion", 0, 1500),
            ("d", 1, True, "network-congestion", 2000, 2060),
            ("f", 0, True, "network-congestion+gpu-thermal", 0, 4320)]
    frame = pl.DataFrame(rows, schema=[("job", pl.String), ("episode", pl.Int32),
                                       ("fail_slow", pl.Boolean), ("cause", pl.String),
                                       ("t_start_ns", pl.Int64), ("t_end_ns", pl.Int64)],
                         orient="row")
    return schema.conform("labels", frame.with_columns(pl.col("t_start_ns", "t_end_ns") * S))


def test_cause_table_like_the_paper():
    jct = pl.DataFrame({"job": ["a", "b", "c", "d", "e", "f"],
                        "jct_slowdown": [0.2, 0.0, 0.01, 0.3, 0.05, 0.5]})
    summary = job_summary_from_labels(JOBS, _labels(), jct)
    table = cause_table(summary)
    assert table.columns == ["cause", "compute", "communication", "large"]
    rows = {r["cause"]: (r["compute"], r["communication"], r["large"])
            for r in table.iter_rows(named=True)}
    assert rows == {
        "no fail-slow": ("2", "1", "0"),
        "cpu-contention": ("1", "0", "0"),
        "network-congestion": ("0", "1", "0"),
        "several at once": ("0", "0", "1"),
        "jobs": ("3", "2", "1"),
        "mean JCT slowdown": ("7.00 %", "17.50 %", "50.00 %"),
    }
    assert table["cause"].to_list()[0] == "no fail-slow"
    assert table["cause"].to_list()[-3:] == ["several at once", "jobs", "mean JCT slowdown"]
    d = summary.filter(pl.col("job") == "d").row(0, named=True)
    assert d["fail_slow_episodes"] == 2
    assert d["fail_slow_s"] == pytest.approx(1560.0)


def test_summary_from_detected_episodes():
    episodes = schema.conform("episodes", pl.DataFrame({
        "job": ["a", "a", "d"], "detector": ["bocd+v", "bocd+v", "window"],
        "cause": ["gpu-thermal", None, "network-congestion"], "duration_s": [10.0, 5.0, 7.0],
        "jct_slowdown": [0.1, 0.02, 0.3]}, schema_overrides={"episode": pl.Int32}))
    summary = job_summary_from_episodes(JOBS, episodes, "bocd+v")
    a = summary.filter(pl.col("job") == "a").row(0, named=True)
    assert a["causes"] == ["gpu-thermal", "unattributed"]
    assert a["table_row"] == "several at once"
    assert a["jct_slowdown"] == pytest.approx(0.12)
    assert summary.filter(pl.col("job") == "d")["table_row"].item() == "no fail-slow"


def test_ecdf_and_durations():
    durations = fail_slow_durations(_labels(), JOBS)
    assert sorted(durations["duration_s"].to_list()) == pytest.approx([60.0, 600.0, 1500.0, 4320.0])
    curve = ecdf(durations, "duration_s", "category")
    comm = curve.filter(pl.col("category") == "communication")
    assert comm["duration_s"].to_list() == pytest.approx([60.0, 1500.0])
    assert comm["fraction"].to_list() == [0.5, 1.0]
    assert ecdf(durations, "duration_s")["fraction"].to_list() == [0.25, 0.5, 0.75, 1.0]

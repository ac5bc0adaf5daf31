"""Accuracy targets of issue 7 on jobs from the synthesizer (ground truth in truth.parquet)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from tracekit import open_dataset
from tracekit.ingest.pipeline import ingest
from tracekit.iterations import compare, reconstruct
from tracekit.synth.faults import Noise
from tracekit.synth.job import JobSpec, generate_job
from tracekit.synth.layout import Layout

LAYOUTS = ["tp2-dp2-pp1", "tp2-dp2-pp2", "tp1-dp4-pp1"]


@pytest.fixture(scope="module", params=LAYOUTS)
def job(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    spec = JobSpec(layout=Layout.parse(request.param), iterations=320, seed=4, monitoring=False,
                   noise=Noise(eval_interval=100, save_interval=150, log_interval=10))
    result = generate_job(folder / "job", spec)
    ingest([folder / "job" / "ranks"], folder / "ds")
    calls = open_dataset(folder / "ds")["collectives"].collect()
    truth = result.truth.select("iteration", "t_start_ns", "t_end_ns", "duration_s",
                                pl.lit(None, pl.Int32).alias("rank"))
    windows = result.truth.filter(pl.col("noise").str.contains("evaluation|checkpoint"))
    return calls, truth, set(windows["iteration"].to_list())


def test_periods_and_errors_match_the_targets(job):
    calls, truth, windows = job
    result = reconstruct(calls)
    assert all(r.period_calls for r in result.ranks) and not result.warnings
    comparison = compare(result.iterations, truth, "truth")
    assert comparison.extra == 0
    assert comparison.missed == 0
    assert comparison.rel_error_quantile(0.5) < 0.001
    paired = set(comparison.errors["reference_iteration"].to_list())
    # every iteration after the first (which ends at the first anchor) outside evaluation and
    # checkpoint windows is recovered
    assert set(truth["iteration"].to_list()[1:]) - windows <= paired


def test_one_percent_dropped_records(job):
    calls, truth, _ = job
    kept = calls.filter(pl.Series(np.random.default_rng(7).random(calls.height) >= 0.01))
    comparison = compare(reconstruct(kept).iterations, truth, "truth")
    assert comparison.extra == 0
    assert comparison.rel_error_quantile(0.5) < 0.005
    assert comparison.rel_error_quantile(0.99) < 0.005

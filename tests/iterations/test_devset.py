"""Iteration reconstruction on the labeled devset dumps (``../shared/devset/``, NCCL_DEBUG logs
with enqueue times only, lazily created communicators, evaluation and checkpoint pauses):
every job's true period on every rank, aligned numbering and a median error under 0.1 %
against the simulator's truth (``truth/<job>/iterations.csv``)."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import SHARED
from tracekit import open_dataset
from tracekit.ingest.pipeline import ingest
from tracekit.iterations import compare, reconstruct

DEVSET = SHARED / "devset"
JOBS = sorted(p.name.removesuffix(".tar.xz") for p in (DEVSET / "dumps").glob("*.tar.xz"))

pytestmark = pytest.mark.skipif(not JOBS, reason=f"devset dumps not found at {DEVSET}")


@pytest.fixture(scope="module", params=JOBS or ["none"])
def devset_job(request, tmp_path_factory):
    """The job's collectives (its NCCL logs ingested alone: the monitoring files do not time
    iterations), its truth and its layout."""
    job = request.param
    folder = tmp_path_factory.mktemp(job)
    with tarfile.open(DEVSET / "dumps" / f"{job}.tar.xz") as archive:
        logs = [m for m in archive.getmembers() if Path(m.name).name.startswith("nccl.")]
        archive.extractall(folder / "dump", members=logs, filter="data")
    ingest([folder / "dump"], folder / "ds", job=job)
    truth = pl.read_csv(DEVSET / "truth" / job / "iterations.csv").select(
        "iteration", "t_start_ns", "t_end_ns", "duration_s", pl.lit(None, pl.Int32).alias("rank"))
    layout = json.loads((DEVSET / "truth" / job / "job.json").read_text())
    return open_dataset(folder / "ds")["collectives"], truth, layout


def test_every_rank_has_the_true_period_and_a_median_error_under_a_thousandth(devset_job):
    calls, truth, layout = devset_job
    result = reconstruct(calls)
    assert not result.warnings
    assert {r.rank: r.period_calls for r in result.ranks} == {
        r["rank"]: r["calls_per_iteration"] for r in layout["ranks"]}
    comparison = compare(result.iterations, truth, "truth")
    assert comparison.extra <= len(result.ranks)  # the first interval holds the setup calls
    assert comparison.matched >= 0.98 * truth.height * len(result.ranks)
    assert comparison.rel_error_quantile(0.5) < 1e-3


def test_ranks_share_iteration_numbers_and_boundaries(devset_job):
    calls, _, layout = devset_job
    rows = reconstruct(calls).iterations
    ends = rows.group_by("iteration").agg(pl.col("t_end_ns").n_unique().alias("ends"),
                                          pl.len().alias("ranks"))
    assert ends["ends"].max() == 1
    assert (ends["ranks"] == layout["layout"]["world"]).mean() >= 0.99

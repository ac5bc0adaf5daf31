"""Own times between calls: the stable sort over calls in issue order gives, per call, the
gap from the rank's latest end so far to its issue, whatever order the rows arrive in."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tracekit.attribute.arrival import call_gaps
from tracekit.core.dataset import open_dataset
from tracekit.ingest.pipeline import ingest
from tracekit.synth.faults import Injection
from tracekit.synth.job import JobSpec, generate_job
from tracekit.synth.layout import Layout


@pytest.fixture(scope="module")
def collectives(tmp_path_factory) -> pl.DataFrame:
    """tp2-dp2-pp2 on 2 GPUs per host, rank 3 throttled from iteration 60 to 100."""
    root = tmp_path_factory.mktemp("arrival")
    spec = JobSpec(Layout.parse("tp2-dp2-pp2", gpus_per_host=2), 160, 5,
                   (Injection.parse("thermal:rank=3@60+40x2.0"),), job="arrival")
    generate_job(root / "job", spec)
    ingest([root / "job" / "ranks"], root / "ds", job="arrival")
    return open_dataset(root / "ds").table("collectives").collect()


def _reference(collectives: pl.DataFrame) -> pl.DataFrame:
    """The definition, rank by rank in numpy: sort by issue, gap to the latest earlier end."""
    timed = collectives.drop_nulls(["t_start_ns", "t_end_ns"])
    frames = []
    for (rank,), calls in sorted(timed.group_by("rank"), key=lambda item: item[0]):
        order = np.argsort(calls["t_start_ns"].to_numpy(), kind="stable")
        start = calls["t_start_ns"].to_numpy()[order]
        latest_end = np.maximum.accumulate(calls["t_end_ns"].to_numpy()[order])
        own_s = np.clip(start[1:] - latest_end[:-1], 0, None) / 1e9
        frames.append(pl.DataFrame({"rank": pl.Series([rank] * len(start), dtype=pl.Int32),
                                    "t_ns": start, "own_s": [None, *own_s.tolist()]},
                                   schema_overrides={"own_s": pl.Float64}))
    return pl.concat(frames)


@pytest.mark.parametrize("shuffled", [False, True])
def test_own_times_follow_the_definition(collectives, shuffled):
    rows = collectives.sample(fraction=1.0, shuffle=True, seed=7) if shuffled else collectives
    gaps = call_gaps(rows.lazy())
    assert gaps.height == collectives.drop_nulls(["t_start_ns", "t_end_ns"]).height > 0
    assert gaps["own_s"].null_count() == collectives["rank"].n_unique()
    assert_frame_equal(gaps, _reference(collectives), check_dtypes=False)

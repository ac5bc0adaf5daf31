"""Healthy jobs report no fail-slow: seeded series full of GC pauses, checkpoints, evaluation
steps, data-loader hiccups and spike clusters, and the real healthy traces. A false fail-slow
on a healthy job is the worst outcome for an operator."""

import numpy as np
import polars as pl
import pytest

from tests.detect.conftest import healthy_job, iteration_times, spike_heavy_job
from tracekit.detect import make_detector
from tracekit.detect.episodes import find_episodes
from tracekit.ingest.base import Source
from tracekit.ingest.mlperf import MlperfLogReader
from tracekit.ingest.step_table import StepTableReader

VERIFIED = ("bocd+v", "bocd+b")
MIN_SLOWDOWN = 0.05


def episodes(detector: str, durations: np.ndarray) -> tuple[int, int]:
    """Change points and episodes ``detector`` reports on a job-level series."""
    series = pl.DataFrame({"iteration": np.arange(1, durations.size + 1),
                           "duration_s": durations,
                           "t_start_ns": np.zeros(durations.size, np.int64),
                           "t_end_ns": np.zeros(durations.size, np.int64)})
    found = make_detector(detector).detect(durations)
    return found.size, find_episodes("job", detector, series, found, MIN_SLOWDOWN).height


@pytest.mark.parametrize(("points", "seed", "candidates", "kept"), [
    (3000, 0, 120, [6]), (3000, 1, 65, []), (3000, 3, 127, [4, 8]), (3000, 7, 136, [3]),
    (10_000, 0, 483, []), (10_000, 2, 589, [6])])
def test_no_episode_on_a_disturbed_healthy_job(points, seed, candidates, kept):
    """BOCD flags every burst; verification keeps only the end of the warm-up (no episode:
    there was no healthy level yet). Before the persistence rule: 1-18 episodes each."""
    series = healthy_job(points, seed)
    assert make_detector("bocd").detect(series).size == candidates
    for name in VERIFIED:
        assert make_detector(name).detect(series).tolist() == kept, name
        assert episodes(name, series) == (len(kept), 0), name


def test_no_episode_on_a_spike_heavy_series():
    """4 % of 10^5 iterations x1.5-3: runs of 3-4 spikes once passed a 4-point median
    (5 episodes from 11 change points on this seed before the persistence rule)."""
    series = spike_heavy_job(seed=0)
    assert make_detector("bocd").detect(series).size == 6727
    for name in VERIFIED:
        assert episodes(name, series) == (0, 0), name


def test_a_checkpoint_then_a_pause_is_not_a_step():
    """Three x8 checkpoint iterations then a x1.6 pause: four slow points in a row, whose
    median clears 10 % at the first look; their range (tens of noise deviations) says burst,
    and the segment's 4 slow points are not the 10 a fail-slow needs."""
    series = iteration_times(seed=3)
    series[500:503] *= 8.0
    series[503] *= 1.6
    for name in VERIFIED:
        assert make_detector(name).detect(series).tolist() == [], name


@pytest.fixture(scope="module")
def pai_workers(real_dir) -> dict[int, np.ndarray]:
    data = (real_dir / "alibaba-pai-minibatch" / "job_2_norm.csv").read_bytes()
    (chunk,) = StepTableReader().read(Source.from_bytes("job_2_norm.csv", data), {})
    iterations = chunk.tables["iterations"].sort("rank", "iteration")
    return {rank: group["duration_s"].to_numpy()
            for (rank,), group in iterations.group_by("rank", maintain_order=True)}


def test_no_episode_on_the_real_pai_job(pai_workers):
    """10 workers of a real healthy Alibaba PAI job (stable offsets, no episode); BOCD alone
    flags worker 5's wobbles, verification drops them."""
    for rank, series in pai_workers.items():
        for name in ("window", *VERIFIED):
            assert episodes(name, series)[1] == 0, (rank, name)
    assert make_detector("bocd").detect(pai_workers[5]).tolist() == [38, 49, 167, 206, 209]
    assert make_detector("bocd+v").detect(pai_workers[5]).tolist() == []


def test_no_episode_on_the_real_mlperf_run(real_dir):
    data = (real_dir / "mlperf-gpt3" / "raw_eos_n64_gpt3_result_0.txt").read_bytes()
    chunks = MlperfLogReader().read(Source.from_bytes("result_0.txt", data), {})
    steps = pl.concat([c.tables["iterations"] for c in chunks]).sort("iteration")
    series = steps["duration_s"].to_numpy()
    assert series.size == 288
    for name in ("window", *VERIFIED):
        assert episodes(name, series)[1] == 0, name

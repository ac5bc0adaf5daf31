"""Episode shapes an independent generator draws, on small job-level series with exact expected
episodes (iterations numbered from 1): faults just over the definition, close together, on and
off, right after a slowdown under 10 %."""

import numpy as np
import polars as pl
import pytest

from tests.detect.conftest import iteration_times
from tracekit.core.thresholds import FAIL_SLOW_MIN_ITERATIONS, FAIL_SLOW_RATIO
from tracekit.detect.episodes import find_episodes
from tracekit.detect.registry import make_detector

FAULT = FAIL_SLOW_RATIO + 0.02
"""A fail-slow just over the definition (x1.12)."""

UNDER = FAIL_SLOW_RATIO - 0.06
"""A slowdown under it (x1.04) that holds up a median: x1.12 is 7.7 % over x1.04."""

LENGTH = FAIL_SLOW_MIN_ITERATIONS + 10
"""Iterations of each slowdown of a close pair."""


def verdict_episodes(series: np.ndarray, changes: np.ndarray | None = None
                     ) -> list[tuple[int, int]]:
    """(start, end) iterations of the verdict's job-level detector's episodes, on its own
    change points or on ``changes``."""
    frame = pl.DataFrame({"iteration": np.arange(1, series.size + 1),
                          "t_start_ns": np.arange(series.size) * 10**9,
                          "t_end_ns": np.arange(1, series.size + 1) * 10**9,
                          "duration_s": series})
    if changes is None:
        changes, _ = make_detector("bocd+b").confirm(series)
    found = find_episodes("j", "bocd+b", frame, changes, 0.05)
    return list(zip(found["start_iteration"].to_list(), found["end_iteration"].to_list(),
                    strict=True))


def job(seed: int = 0) -> np.ndarray:
    """300 iterations of 1.5 s with 1 % noise after a warm-up of 5 slow ones."""
    series = iteration_times(300, seed=seed)
    series[:5] *= 3.0
    return series


def test_fault_after_a_slowdown_under_ten_percent_is_judged_against_the_healthy_level():
    """x1.06 on [101, 125], then x1.12 on [141, 162]: measured against a median of the segment
    that the x1.06 holds up the x1.12 was x1.09 and lost; it is judged against the healthy
    points between them."""
    series = job()
    series[100:125] *= 1.06
    series[140:162] *= 1.12
    series[180:200] *= 1.13
    assert verdict_episodes(series) == [(141, 162), (181, 200)]


def test_a_return_after_a_gc_pause_is_dated_where_the_job_is_fast_again():
    """Faults of 21 and 20 iterations with a GC pause two and one iterations before their
    ends: BOCD dated each return at the pause (19 iterations, under a fail-slow's 20, so no
    episode); they are dated at the first fast iteration."""
    series = job()
    series[100:121] *= 1.22
    series[119] *= 1.4
    series[200:220] *= 1.2
    series[218] *= 1.5
    assert verdict_episodes(series) == [(101, 121), (201, 220)]


def test_a_weaker_fault_two_iterations_after_another_is_no_recovery():
    """x1.25 on [101, 122], x1.12 on [125, 149]: when the change points miss the two fast
    iterations between them (BOCD restarts its run length at the fall and needs more points
    to flag a rise), the x1.12 segment looked like a level the job recovered to; the job back
    at its first level right after it says it was a fault, and the episode goes on through."""
    series = job()
    series[100:122] *= 1.25
    series[124:149] *= 1.12
    assert verdict_episodes(series, np.array([5, 100, 122, 149])) == [(101, 149)]


def test_a_gc_pause_just_before_a_short_burst_does_not_lengthen_it_into_a_fail_slow():
    """Bursts of 16 and 17 iterations (x1.33, x1.3), each four iterations after a GC pause:
    dated at the pause they lasted 20 and 21 iterations, fail-slows; dated where the job
    slows they are disturbances."""
    for seed in (1, 4, 5):
        series = job(seed)
        series[149] *= 1.35
        series[153:169] *= 1.33
        series[229] *= 1.4
        series[233:250] *= 1.3
        assert verdict_episodes(series) == [], seed


@pytest.mark.parametrize("seed", [0, 4])
def test_fault_after_a_whole_segment_judged_under_ten_percent(seed):
    """x1.085 on [101, 145] (judged whole when the job returns: no fail-slow), then x1.18 on
    [166, 208]: judged against a median the x1.085 held up it measured x1.09 and was lost
    (the return after it ends the benign stretch)."""
    series = job(seed)
    series[100:145] *= 1.085
    series[165:208] *= 1.18
    assert verdict_episodes(series) == [(166, 208)]


def close_pair(seed: int, first: float, gap: int, second: float) -> np.ndarray:
    """A slowdown of ``first`` on [101, 130], then ``gap`` healthy iterations, then one of
    ``second`` for as long."""
    series = job(seed)
    series[100 : 100 + LENGTH] *= first
    series[100 + LENGTH + gap : 100 + 2 * LENGTH + gap] *= second
    return series


@pytest.mark.parametrize("gap", [4, 5])
def test_fail_slow_a_few_iterations_after_a_slowdown_under_ten_percent(gap):
    """x1.04, back at the healthy level for ``gap`` iterations, then x1.12: the end of the
    x1.04 was noted only when 10 of its points were 3 warm-up noise deviations above the
    level (x1.03-1.05 on these seeds), else the x1.12 was measured against a median the x1.04
    held up and lost (5 of these 10 seeds, and a thermal fault of the fresh-seed corpus).
    The return is now seen on the median of its first 4 points. A shorter one has no median
    of its own: the two are one slow stretch, judged whole as a ramp is."""
    for seed in range(10):
        series = close_pair(seed, UNDER, gap, FAULT)
        assert verdict_episodes(series) == [(101 + LENGTH + gap, 100 + 2 * LENGTH + gap)], seed


@pytest.mark.parametrize("gap", range(6))
def test_fail_slow_ends_where_a_slowdown_under_ten_percent_follows_it(gap):
    """x1.12, then after ``gap`` healthy iterations (none: the fault eases) x1.04: judged on
    all the points since it, the return measured x1.12 against x1.04, under 10 %, so the
    fail-slow never ended and its segment, healthy by its median, was no episode (31 of these
    36 cases). The job back from it, within half its shift of the healthy level, ends it,
    judged against the faster level on both sides."""
    for seed in range(6):
        assert verdict_episodes(close_pair(seed, FAULT, gap, UNDER)) == [(101, 100 + LENGTH)], \
            seed

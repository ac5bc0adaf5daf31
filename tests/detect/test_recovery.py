"""Episodes end when the job recovers: on/off faults of several shapes, between which the job
runs a few percent off its first level, give one episode per fault; a fault that eases, a
gradual ramp and a level the job settles at stay one episode each, and a slow stretch shorter
than a fail-slow is none."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from tracekit.core.thresholds import FAIL_SLOW_MIN_ITERATIONS
from tracekit.detect.episodes import find_episodes
from tracekit.detect.registry import make_detector
from tracekit.detect.spans import in_iterations
from tracekit.detect.verdict import JOB_LEVEL_DETECTOR


def levels(*stretches: tuple[int, float], seed: int = 0, noise: float = 0.015) -> np.ndarray:
    """1.0 s iterations at the given (length, level) stretches, with Gaussian noise."""
    rng = np.random.default_rng(seed)
    series = np.concatenate([np.full(length, level) for length, level in stretches])
    return series * (1.0 + noise * rng.standard_normal(series.size))


def on_off(faults: list[float], gaps: list[float], on: int = 70, off: int = 38,
           lead: int = 150, tail: int = 120, seed: int = 0) -> tuple[np.ndarray, list]:
    """Faults of ``on`` iterations at the given levels, separated by healthy stretches of
    ``off`` iterations at the given levels (the job's first level is 1.0); the faults'
    (first, last) iterations."""
    stretches, truth, at = [(lead, 1.0)], [], lead
    for index, fault in enumerate(faults):
        gap = off if index < len(faults) - 1 else tail
        stretches += [(on, fault), (gap, gaps[index])]
        truth.append((at, at + on - 1))
        at += on + gap
    return levels(*stretches, seed=seed), truth


def episodes(series: np.ndarray, step: int = 1) -> pl.DataFrame:
    """The verdict detector's job-level episodes of a series logged every ``step``
    iterations."""
    numbers = np.arange(series.size) * step
    frame = pl.DataFrame({"iteration": numbers, "t_start_ns": numbers * 10**9,
                          "t_end_ns": (numbers + step) * 10**9, "duration_s": series})
    changes, _ = make_detector(JOB_LEVEL_DETECTOR).confirm(series)
    return find_episodes("j", JOB_LEVEL_DETECTOR, frame, changes, 0.05)


NINE = [1.3, 2.0, 4.0, 1.5, 3.0, 1.3, 2.5, 1.8, 4.0]
"""Nine on/off faults of x1.3-4, as the slow-link faults of a real 128-GPU Megatron log."""


@pytest.mark.parametrize(("faults", "gaps", "on", "off"), [
    (NINE, [1.0] * 9, 70, 38),
    (NINE, [1.03, 1.08, 1.15, 1.05, 1.12, 1.10, 1.07, 1.15, 1.04], 70, 38),  # drifting gaps
    ([1.3] * 5, [1.08] * 5, 70, 35),  # weak faults, every gap 8 % off
    ([2.0] * 5, [1.12] * 5, 40, 40),  # the job settles 12 % off after the first
    ([1.25, 1.6, 1.25, 1.6], [0.98, 1.06, 0.97, 1.02], 50, 30),  # gaps faster and slower
], ids=["nine-at-baseline", "nine-drifting", "weak-plus-8", "settled-plus-12", "mixed"])
def test_one_episode_per_fault(faults, gaps, on, off):
    series, truth = on_off(faults, gaps, on=on, off=off)
    found = episodes(series)
    assert found.select("start_iteration", "end_iteration").rows() == truth


def test_each_episode_is_measured_against_the_level_it_left():
    """After a recovery to x1.12 the next fault (x2.0 of the first level) is x1.79 of it."""
    series, _ = on_off([2.0, 2.0], [1.12, 1.12], on=60, off=60)
    first, second = episodes(series).rows(named=True)
    assert first["baseline_s"] == pytest.approx(1.0, abs=0.01)
    assert second["baseline_s"] == pytest.approx(1.12, abs=0.01)
    assert second["slowdown"] == pytest.approx(2.0 / 1.12, abs=0.02)


def test_a_fault_that_eases_is_one_episode():
    """x4 for 60 iterations then x2 for 60: a drop, but to a level far off the healthy one."""
    found = episodes(levels((150, 1.0), (60, 4.0), (60, 2.0), (150, 1.0)))
    assert found.select("start_iteration", "end_iteration").rows() == [(150, 269)]


def test_a_gradual_ramp_is_one_episode():
    """Steps of 6 % every 60 iterations (none a fail-slow alone), then back to healthy: no
    step down inside it, so no recovery splits it (BOCD+B dates the drift from its CUSUM's
    last zero, 160)."""
    found = episodes(levels((200, 1.0), (60, 1.06), (60, 1.12), (60, 1.18), (60, 1.24),
                            (200, 1.0), seed=3))
    assert found.select("start_iteration", "end_iteration").rows() == [(160, 439)]


def test_a_level_the_job_settles_at_ends_the_episode():
    """A x2 fault after which the job runs 12 % off its first level to the end: the fault is
    the episode, the settled level is not a fail-slow that never ends."""
    found = episodes(levels((150, 1.0), (80, 2.0), (400, 1.12)))
    assert found.select("start_iteration", "end_iteration").rows() == [(150, 229)]
    assert found["t_end_ns"].null_count() == 0


@pytest.mark.parametrize(("length", "found"), [(FAIL_SLOW_MIN_ITERATIONS - 1, 0),
                                               (FAIL_SLOW_MIN_ITERATIONS, 1)])
def test_a_fail_slow_lasts_the_definitions_iterations(length, found):
    assert episodes(levels((200, 1.0), (length, 2.0), (200, 1.0))).height == found


def test_a_sampled_log_counts_the_iterations_its_points_stand_for():
    """A log of every 10th iteration: a x2 fault of 8 points is 80 iterations (an episode),
    the warm-up's 2 slow points are 20 iterations (none)."""
    series = levels((2, 3.0), (98, 1.0), (8, 2.0), (92, 1.0))
    (row,) = episodes(series, step=10).rows(named=True)
    assert (row["start_iteration"], row["end_iteration"]) == (1000, 1070)
    assert (row["iterations"], row["points"]) == (80, 8)


def sampled_episodes(series: np.ndarray, step: int, scaled: bool = True) -> pl.DataFrame:
    """:func:`episodes` of a log of every ``step``-th iteration, the detector's point counts
    read as iterations (as ``detect_dataset`` runs it) or as given."""
    numbers = np.arange(1, series.size + 1) * step
    frame = pl.DataFrame({"iteration": numbers, "t_start_ns": numbers * 10**9,
                          "t_end_ns": (numbers + step) * 10**9, "duration_s": series})
    detector = make_detector(JOB_LEVEL_DETECTOR)
    if scaled:
        detector = in_iterations(detector, numbers)
    changes, _ = detector.confirm(series)
    return find_episodes("j", JOB_LEVEL_DETECTOR, frame, changes, 0.05)


def test_point_counts_are_iterations_on_a_sampled_log():
    """BOCD+V's 20-point normalisation and 10-point confirmation are 200 and 100 iterations of
    a log printing every 10th: a 300-iteration job's 50-iteration fault was never confirmed."""
    detector = make_detector(JOB_LEVEL_DETECTOR)
    assert in_iterations(detector, np.arange(1, 301)) is detector
    scaled = in_iterations(detector, np.arange(1, 31) * 10)
    assert (scaled.warmup, scaled.min_points, scaled.min_duration, scaled.baseline_window) == (
        5, 2, 3, 5)
    # a synthesized 300-iteration job's Megatron log (NCCL without call times), over its
    # median: x2.9 on a link at iterations 128-158 and 167-204, diluted in the step averages
    series = np.array([1.255, 0.996, 1.0, 0.993, 0.993, 1.002, 1.0, 0.994, 0.996, 1.0, 0.996,
                       1.004, 1.098, 1.329, 1.333, 1.26, 1.12, 1.315, 1.315, 1.314, 1.125,
                       1.006, 0.999, 0.996, 0.999, 0.992, 0.998, 1.002, 0.997, 1.0])
    assert sampled_episodes(series, 10, scaled=False).is_empty()
    (row,) = sampled_episodes(series, 10).rows(named=True)
    assert (row["start_iteration"], row["end_iteration"], row["iterations"]) == (140, 200, 70)


@pytest.mark.parametrize(("points", "found"), [(2, 0), (3, 1)])
def test_two_sampled_points_can_be_one_burst(points, found):
    """x1.5 for six iterations across a log boundary reads as two points at x1.15, as twenty
    iterations at x1.15 would: a sampled stretch needs three points."""
    series = levels((12, 1.0), (points, 1.15), (16, 1.0), seed=1, noise=0.005)
    assert sampled_episodes(series, 10).height == found

"""The iterations logged points stand for: lengths judged on what a sampled log covers.

A log that prints every 10th iteration, a step table sampled every 10 s (its "step" column is
the sample time) or a trace of sampled steps holds one point for many iterations (or seconds).
A fail-slow's minimum length and the warm-up are iterations of the job, so a stretch of points
is judged on the iteration numbers it spans, not on how many points were logged: 13 samples of
a table sampled every 10 s are 130 s, well past a fail-slow's length, while 13 consecutive
iterations are not.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tracekit.core.thresholds import FAIL_SLOW_MIN_ITERATIONS


def reach(numbers: np.ndarray) -> np.ndarray:
    """Where each logged point's stretch of iterations begins, then where the last one ends
    (``numbers.size + 1`` values, ``numbers`` sorted): a point stands for the iterations up to
    the next logged one, the last for the log's usual step (the median gap, at least 1). Points
    ``[first, stop)`` cover ``reach[stop] - reach[first]`` iterations."""
    numbers = np.asarray(numbers, dtype=np.int64)
    if numbers.size == 0:
        return np.zeros(1, dtype=np.int64)
    return np.append(numbers, numbers[-1] + usual_step(numbers))


def usual_step(numbers: np.ndarray) -> int:
    """The median gap between consecutive logged iteration numbers (1 for a dense log)."""
    gaps = np.diff(np.asarray(numbers, dtype=np.int64))
    return max(int(np.median(gaps)), 1) if gaps.size else 1


POINT_COUNTS = {"warmup": 5, "min_points": 2, "min_duration": 3, "baseline_window": 5,
                "window": 5, "persist": 2}
"""Detector parameters counted in the series' points, each with the fewest points it may
shrink to on a sampled log (a level needs a few points, a rise at least three)."""


def in_iterations(detector, numbers: np.ndarray):
    """``detector`` with its :data:`POINT_COUNTS` read as iterations of a log whose points
    stand for ``usual_step`` iterations each: BOCD+V's 10-point confirmation and 20-point
    normalisation are 100 and 200 iterations of a log printing every 10th, longer than most
    fail-slows and most short jobs. A dense log keeps the detector as it is."""
    step = usual_step(numbers)
    if step == 1:
        return detector
    return dataclasses.replace(detector, **{
        name: max(floor, -(-getattr(detector, name) // step))
        for name, floor in POINT_COUNTS.items() if hasattr(detector, name)})


SAMPLED_EPISODE_POINTS = 3
"""The fewest logged points of a slow stretch on a sampled log: two points a log boundary
apart can be one burst of a few iterations shared between their averages (x1.5 for six
iterations logs as two points at x1.15, as twenty iterations at x1.15 would)."""


def holds_a_fail_slow(numbers: np.ndarray, points: int, iterations: int) -> bool:
    """Whether a slow stretch of ``points`` logged points standing for ``iterations``
    iterations is long enough to be a fail-slow."""
    return iterations >= FAIL_SLOW_MIN_ITERATIONS and (
        usual_step(numbers) == 1 or points >= SAMPLED_EPISODE_POINTS)


def fail_slow_points(numbers: np.ndarray) -> int:
    """How many logged points a fail-slow's minimum length is at the log's usual step, made
    odd (a rolling median centred on its point), at least 3 (one point cannot tell a step from
    a spike): 21 for a dense log, 3 for a log of every 10th iteration."""
    points = -(-FAIL_SLOW_MIN_ITERATIONS // usual_step(numbers))
    return max(2 * (points // 2) + 1, 3)

"""The iterations logged points stand for: lengths judged on what a sampled log covers.

A log that prints every 10th iteration, a step table sampled every 10 s (its "step" column is
the sample time) or a trace of sampled steps holds one point for many iterations (or seconds).
A fail-slow's minimum length and the warm-up are iterations of the job, so a stretch of points
is judged on the iteration numbers it spans, not on how many points were logged: 13 samples of
a table sampled every 10 s are 130 s, well past a fail-slow's length, while 13 consecutive
iterations are not.
"""

from __future__ import annotations

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


def fail_slow_points(numbers: np.ndarray) -> int:
    """How many logged points a fail-slow's minimum length is at the log's usual step, made
    odd (a rolling median centred on its point), at least 3 (one point cannot tell a step from
    a spike): 21 for a dense log, 3 for a log of every 10th iteration."""
    points = -(-FAIL_SLOW_MIN_ITERATIONS // usual_step(numbers))
    return max(2 * (points // 2) + 1, 3)

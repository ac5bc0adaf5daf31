"""Robust tabular CUSUM (Page 1954) of a series' excess over a reference level: dates where a
slowdown began, even one made of steps too small for BOCD to flag.

Shared by BOCD+V (where the excursion a fall ends began) and BOCD+B (where a drift began, and
whether the job is back to healthy)."""

from __future__ import annotations

import numpy as np

CUSUM_ALLOWANCE = 0.5
"""Reference value k of the tabular CUSUM, in noise standard deviations: tuned to shifts of one
standard deviation (Montgomery, Introduction to Statistical Quality Control, 6th ed., 9.1)."""

CUSUM_INTERVAL = 5.0
"""Decision interval h of the tabular CUSUM, in noise standard deviations: with k = 0.5 an
in-control run lasts ~465 points between false signals (Montgomery, 9.1, Table 9.3)."""

CUSUM_CLIP = 3.0
"""Each point's contribution is clipped at this many standard deviations (a Huber-type robust
CUSUM), so one GC pause or checkpoint cannot hold the CUSUM up for hundreds of points."""


def cusum_steps(values, reference: float, noise: float) -> np.ndarray:
    """Per point, the clipped excess over ``reference`` in units of the relative ``noise``,
    less the allowance: the increments of the CUSUM."""
    excess = (np.asarray(values, dtype=np.float64) / reference - 1.0) / noise
    return np.minimum(excess, CUSUM_CLIP) - CUSUM_ALLOWANCE


def last_zero(steps: np.ndarray) -> tuple[int, float]:
    """Number of leading points before the CUSUM's last zero, and its value after the last
    point. The CUSUM ``C_t = max(0, C_{t-1} + step_t)`` is the walk of the steps less its
    running minimum, so it is last zero where the walk last reaches its minimum."""
    walk = np.concatenate(([0.0], np.cumsum(steps)))
    zero = walk.size - 1 - int(np.argmin(walk[::-1]))
    return zero, float(walk[-1] - walk[zero])

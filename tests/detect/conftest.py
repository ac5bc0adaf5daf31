"""Labeled series shared by the detector tests: iteration times with known changes and noise."""

from __future__ import annotations

import numpy as np
import pytest


def iteration_times(points: int = 1000, seed: int = 0, noise: float = 0.01) -> np.ndarray:
    """Healthy 1.5 s iterations with 1 % Gaussian jitter."""
    rng = np.random.default_rng(seed)
    return 1.5 * (1.0 + noise * rng.standard_normal(points))


@pytest.fixture
def step_series() -> np.ndarray:
    """A 20 % slowdown on [300, 600), two GC pauses (x2, x3) and a checkpoint (x20)."""
    series = iteration_times()
    series[300:600] *= 1.20
    series[120] *= 2.0
    series[750] *= 3.0
    series[850] *= 20.0
    return series


@pytest.fixture
def gradual_series() -> np.ndarray:
    """Three 6 % steps at 250, 400, 550 (each under 10 %), recovery at 800."""
    series = iteration_times(seed=1)
    for start in (250, 400, 550):
        series[start:800] *= 1.06
    series[150] *= 2.5
    return series

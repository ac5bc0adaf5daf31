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


def healthy_job(points: int, seed: int) -> np.ndarray:
    """Iteration times of a healthy job (no fail-slow) with everything that slows a healthy job
    down for a moment: 0.5-3 % noise, a warm-up decaying over 5-20 iterations, a GC pause
    (x1.3-3) every 50-200 iterations, a checkpoint (1-3 iterations x2-10) every 200-1,000,
    an evaluation step (x3-20) every 100-700, data-loader hiccups (0.5 % of iterations,
    x1.2-2) and, every ~300 iterations, a cluster of 2-6 spikes (x1.3-3) within 8."""
    rng = np.random.default_rng(seed)
    series = rng.uniform(0.2, 5.0) * (1.0 + rng.uniform(0.005, 0.03) * rng.standard_normal(points))
    warmup = int(rng.integers(5, 20))
    series[:warmup] *= 1.0 + rng.uniform(0.5, 3.0) * np.exp(-np.arange(warmup) / (warmup / 4))
    every = int(rng.integers(50, 200))
    pauses = np.arange(int(rng.integers(0, every)), points, every)
    pauses = np.clip(pauses + rng.integers(-5, 6, pauses.size), 0, points - 1)
    series[pauses] *= rng.uniform(1.3, 3.0, pauses.size)
    every = int(rng.integers(200, 1000))
    for start in range(every, points, every):
        series[start : start + int(rng.integers(1, 4))] *= rng.uniform(2.0, 10.0)
    every = int(rng.integers(100, 700))
    series[every::every] *= rng.uniform(3.0, 20.0, series[every::every].size)
    hiccups = rng.random(points) < 0.005
    series[hiccups] *= rng.uniform(1.2, 2.0, hiccups.sum())
    starts = np.sort(rng.integers(0, points - 8, max(1, points // 300)))
    for start in starts[np.concatenate(([True], np.diff(starts) >= 16))]:  # clusters apart
        size = int(rng.integers(2, 7))
        series[start + rng.choice(8, size, replace=False)] *= rng.uniform(1.3, 3.0, size)
    return series


def spike_heavy_job(points: int = 100_000, seed: int = 0, share: float = 0.04) -> np.ndarray:
    """1.5 s iterations, 1 % noise, ``share`` of them x1.5-3 spikes at random (no fail-slow)."""
    rng = np.random.default_rng(seed)
    series = iteration_times(points, seed)
    spikes = rng.random(points) < share
    series[spikes] *= rng.uniform(1.5, 3.0, spikes.sum())
    return series

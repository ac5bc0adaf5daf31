"""The sliding window offline (whole rows as arrays) finds exactly what it finds point by point."""

from __future__ import annotations

import numpy as np
import pytest

from tracekit.detect.window import SlidingWindow


def _noisy_steps(seed: int, points: int = 3000) -> np.ndarray:
    """Steps up and down of 5-40 %, single spikes and noise near the 10 % departure."""
    rng = np.random.default_rng(seed)
    level = np.repeat(rng.uniform(0.6, 1.4, points // 100), 100)
    spikes = np.where(rng.random(points) < 0.02, rng.uniform(0.7, 1.5, points), 1.0)
    return level * spikes * rng.normal(1.0, 0.05, points)


def test_a_step_is_dated_at_its_first_point():
    series = np.r_[np.ones(50), np.full(30, 1.5), np.ones(40)]
    assert SlidingWindow().detect(series).tolist() == [50, 80]


@pytest.mark.parametrize(("window", "persist"), [(20, 3), (5, 1), (8, 6)])
def test_offline_rows_match_the_online_detector(window, persist):
    matrix = np.vstack([_noisy_steps(seed) for seed in range(4)])
    detector = SlidingWindow(window=window, persist=persist)
    online = [detector.confirm(row)[0] for row in matrix]
    assert sum(found.size for found in online) > 5
    offline = detector.detect_many(matrix)
    assert [found.tolist() for found in offline] == [found.tolist() for found in online]
    assert detector.detect(matrix[1]).tolist() == online[1].tolist()
    assert detector.changepoints.tolist() == online[1].tolist()


def test_a_series_no_longer_than_the_window_has_no_change():
    found = SlidingWindow(window=20).detect_many(np.full((2, 20), 5.0))
    assert [row.tolist() for row in found] == [[], []]

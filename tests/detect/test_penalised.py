"""PELT and binary segmentation with R changepoint's defaults: exact positions on the classic
examples, the same optimum as ruptures' own PELT, several columns together."""

import numpy as np
import pytest
import ruptures
from ruptures.base import BaseCost

from tracekit.detect import make_detector
from tracekit.detect.penalised import NormalMeanCost, mbic_penalty, scale_columns


def _steps(levels, lengths, noise=0.5, seed=0):
    rng = np.random.default_rng(seed)
    return np.concatenate([lv + noise * rng.standard_normal(n)
                           for lv, n in zip(levels, lengths, strict=True)])


@pytest.mark.parametrize("name", ["pelt", "binseg"])
def test_a_clean_step_is_found_where_it_is(name):
    series = np.r_[np.zeros(50), np.ones(50)] + 0.01 * np.sin(np.arange(100))
    assert make_detector(name).detect(series).tolist() == [50]


@pytest.mark.parametrize("name", ["pelt", "binseg"])
def test_a_step_off_the_old_grid_of_five(name):
    assert make_detector(name).detect(_steps([0, 3, -1], [37, 50, 40])).tolist() == [37, 87]


@pytest.mark.parametrize("name", ["pelt", "binseg"])
def test_nile_dam_is_dated_1899(name):
    from statsmodels.datasets import nile

    volume = nile.load().data["volume"].to_numpy(dtype=np.float64)
    assert make_detector(name).detect(volume).tolist() == [28]  # 1871 + 28: Cobb (1978)


@pytest.mark.parametrize("name", ["pelt", "binseg"])
def test_a_trend_is_cut_in_the_middle(name):
    """A mean-shift model fits a ramp by steps; scaled by the ramp's own deviation (R's
    ``scale()``) one step in the middle pays for its penalty, a second does not."""
    assert make_detector(name).detect(np.linspace(0.0, 1.0, 60)).tolist() == [30]


def test_binseg_stops_at_five_changes_as_r():
    series = _steps([0, 4, 0, 4, 0, 4, 0, 4], [30] * 8, noise=0.3)
    assert make_detector("binseg").detect(series).size == 5
    assert make_detector("binseg", max_changes="10").detect(series).tolist() == \
        [30, 60, 90, 120, 150, 180, 210]
    assert make_detector("pelt").detect(series).tolist() == [30, 60, 90, 120, 150, 180, 210]


def test_several_columns_are_one_series_of_independent_dimensions():
    rng = np.random.default_rng(3)
    matrix = 0.5 * rng.standard_normal((120, 2))
    matrix[40:, 0] += 2.0
    matrix[80:, 1] -= 2.0
    for name in ("pelt", "binseg", "consensus"):
        assert make_detector(name).detect(matrix).tolist() == [40, 80], name


class _MbicCost(BaseCost):
    """The same MBIC normal mean cost behind ruptures' own PELT."""

    model = "mbic_normal_mean"
    min_size = 1

    def fit(self, signal):
        self.signal = signal
        self._cost = NormalMeanCost(signal)
        return self

    def error(self, start, end):
        return float(self._cost.cost(start, end))


@pytest.mark.parametrize("seed", range(4))
def test_pelt_finds_the_optimum_ruptures_finds(seed):
    rng = np.random.default_rng(seed)
    series = np.cumsum(rng.standard_normal(150)) * 0.3 + rng.standard_normal(150)
    signal = scale_columns(series[:, None])
    expected = ruptures.Pelt(custom_cost=_MbicCost(), min_size=1, jump=1).fit(signal).predict(
        pen=mbic_penalty(150, 1))[:-1]
    assert make_detector("pelt").detect(series).tolist() == expected

"""The default of ``tracekit changepoints``: changes PELT and textbook BOCD agree on."""

import numpy as np
from statsmodels.datasets import nile

from tracekit.detect import make_detector


def test_nile_dam_is_dated_1899():
    volume = nile.load().data["volume"].to_numpy(dtype=np.float64)
    assert make_detector("consensus").detect(volume).tolist() == [28]


def test_a_change_of_noise_alone_needs_both():
    """BOCD (a noise level per segment) finds a x4 noise change; PELT (one mean per segment)
    does not: no agreement, no change reported."""
    rng = np.random.default_rng(4)
    series = rng.standard_normal(300)
    series[150:] *= 4.0
    assert make_detector("bocd-map").detect(series).tolist() == [150]
    assert make_detector("pelt", refit_noise="1").detect(series).tolist() == []
    assert make_detector("consensus").detect(series).tolist() == []


def test_dated_where_pelt_dates_it():
    rng = np.random.default_rng(8)
    series = np.r_[rng.standard_normal(80), 2.5 + rng.standard_normal(80)]
    pelt = make_detector("pelt", refit_noise="1").detect(series).tolist()
    assert make_detector("consensus").detect(series).tolist() == pelt == [80]

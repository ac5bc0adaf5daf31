"""Alarm delay: change points fed point by point, with the point that reported each."""

import numpy as np
import pytest

from tracekit.detect import make_detector

STEP_AT = 40
POINTS = 80


def _step_series() -> np.ndarray:
    """Healthy 1.00/1.01 alternation, then 50 % slower from point 40 on."""
    series = np.where(np.arange(POINTS) % 2 == 0, 1.0, 1.01)
    series[STEP_AT:] *= 1.5
    return series


@pytest.mark.parametrize(("name", "confirmed"), [
    ("window", STEP_AT + 2),   # persist = 3 departures: reported at the third
    ("bocd", STEP_AT),         # the short-run probability passes 0.9 at the first slow point
    ("bocd+v", STEP_AT + 3),   # a clear step is kept at its first look, min_points = 4
    ("bocd+b", STEP_AT + 3),   # an abrupt step: BOCD+V's sequential judgement
    ("pelt", POINTS - 1),      # offline: reported only when the series has ended
])
def test_confirmation_point_on_a_step(name, confirmed):
    changepoints, confirmations = make_detector(name).confirm(_step_series())
    assert changepoints.tolist() == [STEP_AT]
    assert confirmations.tolist() == [confirmed]


@pytest.mark.parametrize("name", ["window", "bocd", "bocd+v", "bocd+b", "binseg"])
def test_confirm_finds_what_detect_finds(name):
    rng = np.random.default_rng(7)
    series = 1.0 + 0.01 * rng.standard_normal(600)
    series[200:320] *= 1.3
    series[450:] *= 1.2
    changepoints, confirmations = make_detector(name).confirm(series)
    assert changepoints.tolist() == make_detector(name).detect(series).tolist()
    assert np.all(confirmations >= changepoints)

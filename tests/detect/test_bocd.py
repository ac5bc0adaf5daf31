from pathlib import Path

import numpy as np
import pytest

from tests.detect.conftest import iteration_times
from tracekit.detect import make_detector
from tracekit.detect.bocd import Bocd, NormalGamma, RunLengthPosterior
from tracekit.detect.bocd_kernel import compiled


def online(detector, series):
    reported = []
    for x in series.tolist():
        reported += detector.update(x)
    reported += detector.flush()
    return reported


def test_bocd_finds_the_step_and_flags_gc_pauses(step_series):
    found = Bocd().detect(step_series)
    assert {300, 600} <= set(found.tolist())
    # BOCD alone reports every lone slow iteration and its return: what verification removes
    assert {120, 750, 850} <= set(found.tolist())


def test_online_equals_offline_for_every_detector(step_series):
    for name in ("window", "bocd", "bocd+v", "bocd+b", "bocd-map", "binseg"):
        offline = make_detector(name).detect(step_series)
        detector = make_detector(name)
        streamed = online(detector, step_series)
        assert detector.changepoints.tolist() == offline.tolist(), name
        if name in ("window", "bocd", "bocd+v", "bocd+b"):
            assert streamed == offline.tolist(), name


def test_scale_invariance_seconds_and_milliseconds(step_series, gradual_series):
    for name in ("window", "bocd", "bocd+v", "bocd+b", "bocd-map", "binseg"):
        for series in (step_series, gradual_series):
            seconds = make_detector(name).detect(series)
            milliseconds = make_detector(name).detect(series * 1000.0)
            assert seconds.tolist() == milliseconds.tolist(), name


def test_change_probability_rule_is_not_the_constant_hazard():
    """P(r_t = 0) equals the hazard whatever the data: the alarm must use another statistic."""
    posterior = RunLengthPosterior(1, 0.01, NormalGamma(), 1e-4, 32)
    for z in (0.0, 0.3, -0.2, 25.0, 25.1):
        posterior.step(np.array([z]))
        probabilities = np.exp(posterior.log_prob[0, : posterior.size])
        assert probabilities[-1] / probabilities.sum() == pytest.approx(0.01, rel=1e-12)
    probability, run = posterior.short_run(5)
    assert probability[0] > 0.9 and run[0] == 2  # the jump to 25 two points ago


def test_many_series_together_match_one_at_a_time(step_series, gradual_series):
    matrix = np.vstack([step_series, gradual_series, iteration_times(seed=5)])
    together = Bocd().detect_many(matrix)
    for row, found in zip(matrix, together, strict=True):
        assert found.tolist() == Bocd().detect(row).tolist()


def test_a_long_series_without_numerical_trouble():
    """10^6 points with the compiled recursion (~3 s); 5e4 with the numpy one."""
    points = 1_000_000 if compiled() else 50_000
    series = iteration_times(points, seed=3, noise=0.02)
    series[points * 7 // 10 :] *= 1.25
    found = make_detector("bocd+v").detect(series)
    assert found.tolist() == [points * 7 // 10]


def test_compiled_recursion_gives_the_numpy_change_points(monkeypatch, step_series,
                                                          gradual_series):
    """numba is optional: the numpy recursion must find the same change points."""
    pytest.importorskip("numba")
    matrix = np.vstack([step_series, gradual_series, iteration_times(seed=5, noise=0.03)])
    compiled = [make_detector(name).detect(row).tolist()
                for name in ("bocd", "bocd+v", "bocd+b") for row in matrix]
    many = [found.tolist() for found in Bocd().detect_many(matrix)]
    monkeypatch.setattr("tracekit.detect.bocd.compiled", lambda: None)
    assert compiled == [make_detector(name).detect(row).tolist()
                        for name in ("bocd", "bocd+v", "bocd+b") for row in matrix]
    assert many == [found.tolist() for found in Bocd().detect_many(matrix)]


def test_jit_fallback_gives_the_change_points_of_the_ahead_of_time_build(
        monkeypatch, step_series, gradual_series):
    """Where the kernel cannot be built ahead of time (no C compiler), numba's JIT compiles the
    same source with the same flags: the same change points."""
    from tracekit.core import compiled
    from tracekit.detect import bocd_kernel

    pytest.importorskip("numba")
    matrix = np.vstack([step_series, gradual_series, iteration_times(seed=5, noise=0.03)])
    ahead_of_time = bocd_kernel.compiled()
    monkeypatch.setattr(compiled, "load", lambda *args: None)
    jit = compiled.kernel("bocd_steps", Path(bocd_kernel.__file__), bocd_kernel._ahead_of_time,
                          bocd_kernel.OPTIONS)
    assert type(jit).__name__ == "CPUDispatcher"
    results = []
    for kernel in (ahead_of_time, jit):
        monkeypatch.setattr("tracekit.detect.bocd.compiled", lambda k=kernel: k)
        run = Bocd().detect_many(matrix)
        results.append([found.tolist() for found in run])
    assert results[0] == results[1]
    assert any(results[0])

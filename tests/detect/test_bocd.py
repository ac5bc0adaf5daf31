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
    """The C kernel is optional (it needs a C compiler): the numpy recursion must find the
    same change points."""
    if compiled() is None:
        pytest.skip("no C compiler: only the numpy recursion runs")
    matrix = np.vstack([step_series, gradual_series, iteration_times(seed=5, noise=0.03)])
    in_c = [make_detector(name).detect(row).tolist()
            for name in ("bocd", "bocd+v", "bocd+b") for row in matrix]
    many = [found.tolist() for found in Bocd().detect_many(matrix)]
    monkeypatch.setattr("tracekit.detect.bocd.compiled", lambda: None)
    assert in_c == [make_detector(name).detect(row).tolist()
                    for name in ("bocd", "bocd+v", "bocd+b") for row in matrix]
    assert many == [found.tolist() for found in Bocd().detect_many(matrix)]


def test_compaction_keeps_the_likeliest_and_of_equals_the_later_runs():
    """A full posterior whose 66 columns are equally likely but five: the compaction keeps those
    five and, of the equal ones, the last 27, as numpy's stable argsort picks them. Columns
    differ only in the sign of their mean, which the step keeps, so the signs say which stayed."""
    kernel = compiled()
    if kernel is None:
        pytest.skip("no C compiler: only the numpy recursion runs")
    detector = Bocd()
    posterior = RunLengthPosterior(1, detector.hazard, detector.prior, detector.prune,
                                   detector.max_run_lengths)
    capacity = posterior.n.size
    signs = np.random.default_rng(7).choice([-1.0, 1.0], capacity)
    posterior.mu[0] = 0.5 * signs
    posterior.beta[0] = 1.0
    posterior.n[:] = 10
    posterior.log_prob[0] = np.where(np.arange(capacity) < 5, -3.0, -5.0)
    posterior.constants.ensure(64)
    steps = kernel(posterior.log_prob, posterior.mu, posterior.beta, posterior.n,
                   np.zeros(1, np.int64), np.array([0.0, 1.0, 1.0, 1.0]),
                   np.array([posterior.log_hazard, posterior.log_growth, posterior.log_prune, 0.9]),
                   np.array([detector.max_run_lengths, detector.short_run], np.int64))
    size, t = steps(np.zeros((1, 1)), capacity, 100, posterior.constants.table,
                    np.empty((1, 1), np.int64))
    kept = np.r_[0:5, capacity - 27:capacity]
    assert (size, t) == (33, 101)
    assert np.sign(posterior.mu[0, :32]).tolist() == signs[kept].tolist()
    assert posterior.n[:33].tolist() == [11] * 32 + [0]

"""The peer comparison on injected timings: per-round ratios, intervals, the three verdicts."""

from __future__ import annotations

import math
import time

import numpy as np
import polars as pl
import pytest

from tracekit.validate.peers import (
    MIN_ROUNDS,
    all_decided,
    interval_evidence,
    median_interval,
    round_ratios,
    rounds_done,
    unit_verdicts,
    with_verdicts,
)

UNIT, TEST = ["device"], ["peer_class", "shape"]


def timings(factors: dict[str, float], rounds: int, noise: float, seed: int = 0,
            peer_class: str = "h100", stalls: bool = True) -> pl.DataFrame:
    """Seconds per round for devices slower than 1 ms by their factor, with log-normal noise
    and (``stalls``), in every other round, one device hit by a 3x scheduler stall (a busy
    host)."""
    rng = np.random.default_rng(seed)
    rows = []
    for round_ in range(rounds):
        stalled = rng.integers(len(factors)) if stalls and round_ % 2 else -1
        for index, (device, factor) in enumerate(factors.items()):
            stall = 3.0 if index == stalled else 1.0
            rows.append((device, peer_class, "square", round_,
                         1e-3 * factor * stall * math.exp(rng.normal(0, noise))))
    return pl.DataFrame(rows, schema=["device", "peer_class", "shape", "round", "seconds"],
                        orient="row")


def verdicts(frame: pl.DataFrame, threshold: float = 0.10) -> dict[str, str]:
    result = unit_verdicts(round_ratios(frame, UNIT, TEST), UNIT, threshold)
    return dict(result.select("device", "verdict").rows())


def test_round_ratio_leaves_the_unit_out_of_its_peers_median():
    frame = pl.DataFrame({"device": ["a", "b", "c"], "peer_class": ["x"] * 3,
                          "shape": ["s"] * 3, "round": [0, 0, 0], "seconds": [1.0, 2.0, 4.0]})
    ratios = round_ratios(frame, UNIT, TEST).sort("device")
    assert ratios["peer_median_s"].to_list() == [3.0, 2.5, 1.5]
    assert ratios["peers"].to_list() == [2, 2, 2]
    assert ratios["log_ratio"].to_list() == pytest.approx(
        [math.log(1 / 3), math.log(2 / 2.5), math.log(4 / 1.5)])


def test_slowed_device_named_despite_stalls():
    frame = timings({"d0": 1.0, "d1": 1.0, "d2": 2.0, "d3": 1.0}, rounds=32, noise=0.03)
    assert verdicts(frame) == {"d0": "healthy", "d1": "healthy", "d2": "slow", "d3": "healthy"}
    slowed = unit_verdicts(round_ratios(frame, UNIT, TEST), UNIT).filter(device="d2").row(
        0, named=True)
    assert slowed["low"] < 2.0 < slowed["high"] and slowed["low"] > 1.1
    assert slowed["samples"] == 32 and slowed["peers"] == 3


def test_noise_wider_than_the_margin_is_inconclusive_not_slow():
    frame = timings({"d0": 1.0, "d1": 1.0, "d2": 1.1, "d3": 1.0}, rounds=8, noise=0.3)
    assert verdicts(frame)["d2"] == "inconclusive"
    assert not all_decided(frame, UNIT, TEST)
    decided = timings({"d0": 1.0, "d1": 1.0, "d2": 2.0, "d3": 1.0}, rounds=32, noise=0.01)
    assert all_decided(decided, UNIT, TEST)


def test_too_few_rounds_for_an_interval_is_inconclusive():
    assert MIN_ROUNDS == 8
    middle, low, high = median_interval(np.log([2.0] * (MIN_ROUNDS - 1)))
    assert middle == pytest.approx(math.log(2.0)) and math.isnan(low) and math.isnan(high)
    frame = timings({"d0": 1.0, "d1": 1.0, "d2": 3.0}, rounds=MIN_ROUNDS - 1, noise=0.01)
    assert set(verdicts(frame).values()) == {"inconclusive"}
    frame = timings({"d0": 1.0, "d1": 1.0, "d2": 3.0}, rounds=MIN_ROUNDS, noise=0.01)
    assert verdicts(frame)["d2"] == "slow"


def test_peers_only_within_their_class():
    # An A100 at half the H100s' speed is not slow: it is compared with the other A100s.
    frame = pl.concat([
        timings({"h0": 1.0, "h1": 1.0, "h2": 1.0}, rounds=8, noise=0.02, seed=1, stalls=False),
        timings({"a0": 2.0, "a1": 2.0, "a2": 4.0}, rounds=8, noise=0.02, seed=2,
                peer_class="a100", stalls=False),
        timings({"lone": 1.0}, rounds=8, noise=0.02, peer_class="l4"),
    ])
    found = verdicts(frame)
    assert found == {"h0": "healthy", "h1": "healthy", "h2": "healthy", "a0": "healthy",
                     "a1": "healthy", "a2": "slow"}
    units = pl.DataFrame({"device": ["a2", "lone"]})
    joined = with_verdicts(units, unit_verdicts(round_ratios(frame, UNIT, TEST), UNIT), UNIT)
    assert joined.select("device", "verdict", "slow", "peers").rows() == [
        ("a2", "slow", True, 2), ("lone", "no peers", None, 0)]


def test_evidence_says_what_would_help():
    frame = pl.DataFrame(
        {"verdict": ["slow", "inconclusive", "no peers"], "slowdown": [2.0, 1.08, None],
         "low": [1.9, 0.95, None], "high": [2.1, 1.3, None], "samples": [12, 40, None]})
    evidence = frame.select(interval_evidence(0.10)).to_series().to_list()
    assert evidence == [
        "slow: 2.0x the peers, interval 1.9x-2.1x over 12 samples (threshold 1.10x)",
        "inconclusive: too noisy (spread 1.08x the peers, interval 0.95x-1.3x over 40 "
        "samples, straddles 1.10x); a longer --budget-s, a larger workload or a quieter "
        "machine would help",
        "no peer of the same class to compare with",
    ]


def test_rounds_stop_at_looks_or_at_the_deadline():
    decided = timings({"d0": 1.0, "d1": 1.0, "d2": 3.0}, rounds=8, noise=0.01, stalls=False)
    later = time.perf_counter() + 60

    def done(rounds: int, deadline: float = later) -> bool:
        return rounds_done(decided, rounds, deadline, UNIT, TEST, 0.10)

    assert [r for r in range(1, 70) if done(r)] == [8, 16, 32, 64]
    assert not done(MIN_ROUNDS - 1, deadline=0.0) and done(MIN_ROUNDS + 1, deadline=0.0)

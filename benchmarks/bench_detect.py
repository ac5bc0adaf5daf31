"""BOCD throughput: points per second on one series of 1e4, 1e5 and 1e6 points, with the ratio
against ruptures PELT on the same series (PELT stops at 1e4: it grows superlinearly), and over a
whole job (256 ranks x 4,000 iterations) stepped together, in points per CPU-second.
Verification (bocd+v, bocd+b) on a spike-heavy series, where it judges thousands of BOCD
candidates, against plain BOCD on the same series; and a block of 16 ranks x 10,000 iterations
as ``tracekit detect`` runs it (every default detector), the ranks of a synchronous job (one
series, 16 copies: reconstructed iterations share every boundary) against 16 distinct series:
CPU seconds, best of 3."""

from __future__ import annotations

import time

import numpy as np

from tracekit.core.parallel import RANKS_PER_BLOCK
from tracekit.detect import make_detector
from tracekit.detect.bocd_kernel import compiled
from tracekit.detect.episodes import JOB_DETECTORS, detect_series


def _series(points: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    series = 1.5 * (1.0 + 0.01 * rng.standard_normal(points))
    series[points // 2 :] *= 1.2
    return series


def _spike_heavy_series(points: int = 100_000, seed: int = 0) -> np.ndarray:
    """1 % noise, 4 % of the points x1.5-3 spikes and five 20 % steps: BOCD flags thousands of
    candidates, which verification must judge (and drop all but the steps)."""
    rng = np.random.default_rng(seed)
    series = 1.5 * (1.0 + 0.01 * rng.standard_normal(points))
    spikes = rng.random(points) < 0.04
    series[spikes] *= rng.uniform(1.5, 3.0, spikes.sum())
    for start in range(points // 10, points, points // 5):
        series[start : start + points // 10] *= 1.2
    return series


def _cpu_seconds(function, repeats: int = 3) -> float:
    """Best CPU time (user + sys of this process) of ``repeats`` calls: robust to other work
    sharing the machine, which wall-clock time is not."""
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        function()
        best = min(best, time.process_time() - started)
    return best


def _rate(function, points: int) -> float:
    """Points per CPU-second of one call."""
    started = time.process_time()
    function()
    return points / (time.process_time() - started)


def main() -> None:
    bocd, pelt = make_detector("bocd"), make_detector("pelt")
    print(f"bocd recursion: {'C' if compiled() else 'numpy (no C compiler)'}")
    bocd.detect(_series(100))  # compile (or load the cached machine code) before timing
    for points in (10_000, 100_000, 1_000_000):
        series = _series(points)
        rate = _rate(lambda s=series: bocd.detect(s), points)
        line = f"bocd  {points:>9,} points: {rate:>10,.0f} points/s"
        if points <= 10_000:
            baseline = _rate(lambda s=series: pelt.detect(s), points)
            line += f"  (pelt {baseline:,.0f} points/s, ratio x{rate / baseline:.1f})"
        print(line, flush=True)
    ranks, iterations = 256, 4_000
    job = np.vstack([_series(iterations, seed) for seed in range(ranks)])
    rate = _rate(lambda: bocd.detect_many(job), ranks * iterations)
    one = _rate(lambda: bocd.detect(job[0]), iterations)
    print(f"bocd  whole job {ranks} ranks x {iterations:,}: {rate:,.0f} points/s "
          f"(x{rate / one:.0f} over one series at a time)")
    copies = np.repeat(_series(10_000)[None, :], RANKS_PER_BLOCK, axis=0)
    distinct = np.vstack([_series(10_000, seed) for seed in range(RANKS_PER_BLOCK)])
    block = {name: _cpu_seconds(lambda m=matrix: [detect_series(make_detector(d), m)
                                                  for d in JOB_DETECTORS])
             for name, matrix in (("copies", copies), ("distinct", distinct))}
    print(f"block of {RANKS_PER_BLOCK} ranks x 10,000, {', '.join(JOB_DETECTORS)}: one series "
          f"copied {block['copies']:.3f} s CPU, distinct series {block['distinct']:.3f} s "
          f"({block['distinct'] / block['copies']:.1f}x)")
    series = _spike_heavy_series()
    plain = _cpu_seconds(lambda: bocd.detect(series))
    print(f"bocd  spike-heavy {series.size:,} points: {plain:.3f} s CPU "
          f"({series.size / plain:,.0f} points/s), {bocd.detect(series).size:,} change points")
    for name in ("bocd+v", "bocd+b"):
        detector = make_detector(name)
        seconds = _cpu_seconds(lambda d=detector: d.detect(series))
        print(f"{name:6s} spike-heavy {series.size:,} points: {seconds:.3f} s CPU "
              f"({series.size / seconds:,.0f} points/s, {seconds / plain:.1f}x the time of "
              f"plain bocd), {detector.detect(series).size} change points")

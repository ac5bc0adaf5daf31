"""BOCD+B: BOCD verified against the healthy baseline level, not only the previous segment.

Greyhound's one miss was a slowdown that grew in steps of under 10 % each: every step fails the
before/after test although the job ends up far slower than it was. BOCD+B applies the paper's
own rule to the drift as a whole: a candidate whose new level is above the healthy level (the
warm-up's) by more than ``drift_floor`` opens a drift; the drift is dated by a CUSUM (Page 1954)
of the series against the healthy level (after the last point where the CUSUM was zero, when it
has since passed its decision interval), so a ramp starts at its first step, even one too small
for BOCD to flag, and an abrupt step keeps its own date. An abrupt step whose level passes
BOCD+V's test is kept at once; otherwise the drift becomes a fail-slow once, over at least
``baseline_window`` points, the mean iteration time since its onset exceeds the level before it
(median of the ``baseline_window`` points before the onset, as BOCD+V compares a change with
the segment before it) by more than ``min_change`` (10 %, the paper's threshold and the
labels' definition of a fail-slow); it is dropped when the CUSUM falls back to zero (the job is
healthy again).
Lone slow iterations (GC pauses, checkpoints, evaluation) fail the median-of-window level test
and barely move the clipped CUSUM.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracekit.detect.base import reference_level
from tracekit.detect.bocd_verify import BocdVerify, SegmentVerifier

CUSUM_ALLOWANCE = 0.5
"""Reference value k of the tabular CUSUM, in noise standard deviations: tuned to shifts of one
standard deviation (Montgomery, Introduction to Statistical Quality Control, 6th ed., 9.1)."""

CUSUM_INTERVAL = 5.0
"""Decision interval h of the tabular CUSUM, in noise standard deviations: with k = 0.5 an
in-control run lasts ~465 points between false signals (Montgomery, 9.1, Table 9.3)."""

DRIFT_POINT_CAP = 2.0
"""In a drift's mean an iteration counts as at most twice the level before the drift: one
checkpoint save (30-80 iterations long) cannot carry a 7 % drift over 10 %, while any real
slowdown of more than 10 % still shows in full or above the threshold."""

CUSUM_CLIP = 3.0
"""Each point's contribution is clipped at this many standard deviations (a Huber-type robust
CUSUM), so one GC pause or checkpoint cannot hold the CUSUM up for hundreds of points."""


@dataclass
class Drift:
    """A slowdown being followed point by point: its onset, the level before it, the next point
    to absorb, the sum of the iteration times since the onset and the CUSUM."""

    onset: int
    before: float
    next: int
    total: float
    cusum: float


class BaselineVerifier(SegmentVerifier):
    """Judges candidates of one series against its healthy level; tracks whether it is slow."""

    def __init__(self, detector: BocdBaseline, values, sums):
        super().__init__(detector, values, sums)
        self.baseline: float | None = None
        self.noise = 1.0
        self.slow = False
        self.drift: Drift | None = None

    def healthy_level(self) -> float:
        if self.baseline is None:
            warmup = np.asarray(self.values[: self.detector.warmup], dtype=np.float64)
            level, noise = reference_level(warmup[None, :], self.detector.min_noise)
            self.baseline, self.noise = float(level[0]), float(noise[0])
        return self.baseline

    def cusum_steps(self, start: int, stop: int) -> np.ndarray:
        """Clipped normalised excess over the healthy level minus the allowance, per point."""
        excess = (np.asarray(self.values[start:stop], dtype=np.float64)
                  / self.healthy_level() - 1.0) / self.noise
        return np.minimum(excess, CUSUM_CLIP) - CUSUM_ALLOWANCE

    def onset(self, candidate: int) -> int:
        """Start of the drift that ``candidate`` belongs to: after the last zero of the CUSUM
        since the previous kept change, when the CUSUM has risen past its decision interval by
        ``candidate``; else ``candidate``."""
        first = self.accepted[-1] if self.accepted else 0
        cusum = np.concatenate(([0.0], np.cumsum(self.cusum_steps(first, candidate))))
        last_zero = cusum.size - 1 - int(np.argmin(cusum[::-1]))
        if cusum[-1] - cusum[last_zero] <= CUSUM_INTERVAL or last_zero == 0:
            return candidate  # no drift before it, or one as old as the last change (warm-up)
        return first + last_zero

    def open_drift(self, candidate: int, due: int, after: float) -> list[int]:
        onset = self.onset(candidate)
        walk = np.cumsum(self.cusum_steps(onset, due + 1))
        first = self.accepted[-1] if self.accepted else 0
        before = self.previous_level(onset) if onset > first else self.healthy_level()
        points = np.asarray(self.values[onset : due + 1], dtype=np.float64)
        total = float(np.sum(np.minimum(points, DRIFT_POINT_CAP * before)))
        if after / self.previous_level(candidate) - 1.0 > self.detector.min_change:
            return self.keep(onset)  # an abrupt step: BOCD+V's test, dated at the drift onset
        self.drift = Drift(onset, before, due + 1, total, float(walk[-1] - min(0.0, walk.min())))
        return self.check_drift()

    def check_drift(self) -> list[int]:
        drift = self.drift
        points = drift.next - drift.onset
        mean = drift.total / points
        if points >= self.detector.baseline_window and mean / drift.before - 1.0 > \
                self.detector.min_change:
            self.drift = None
            return self.keep(drift.onset)
        if drift.cusum <= 0.0:
            self.drift = None  # healthy again
        return []

    def next_due(self) -> int | None:
        due = self.pending[0] + self.detector.verify_window - 1 if self.pending else None
        if self.drift is None:
            return due
        return self.drift.next if due is None else min(due, self.drift.next)

    def on_due(self, due: int) -> list[int]:
        drift = self.drift
        if drift is None or (self.pending and due < drift.next):
            candidate = self.pending.pop(0)
            return self.judge(candidate, due, self.level(candidate, due + 1))
        x = float(self.values[drift.next])
        drift.total += min(x, DRIFT_POINT_CAP * drift.before)
        step = min((x / self.healthy_level() - 1.0) / self.noise, CUSUM_CLIP) - CUSUM_ALLOWANCE
        drift.cusum = max(0.0, drift.cusum + step)
        drift.next += 1
        return self.check_drift()

    def finish(self, points: int) -> list[int]:
        """End of the series: make the judgements due by its last point; a candidate in the
        last ``verify_window - 1`` points stays unconfirmed."""
        kept = self.advance_to(points - 1)
        self.pending.clear()
        return kept

    def judge(self, candidate: int, due: int, after: float) -> list[int]:
        d = self.detector
        if self.accepted and candidate <= self.accepted[-1]:
            return []  # raised before a drift that was dated earlier than it
        relative = after / self.healthy_level() - 1.0
        if self.slow:
            if relative <= d.drift_floor:
                return self.keep(candidate)  # back to healthy
            before = self.previous_level(candidate)  # did the slowdown change by > 10 %?
            return self.keep(candidate) if abs(after - before) / min(after, before) > \
                d.min_change else []
        if relative > d.drift_floor:
            return [] if self.drift is not None else self.open_drift(candidate, due, after)
        if relative < -d.drift_floor:
            self.baseline, self.drift = after, None  # faster than the warm-up: re-baseline
        return []

    def keep(self, candidate: int) -> list[int]:
        self.slow = not self.slow
        self.accepted.append(candidate)
        return [candidate]


@dataclass
class BocdBaseline(BocdVerify):
    """BOCD+V that also catches slowdowns growing in steps under 10 % (beyond the paper)."""

    name = "bocd+b"
    description = "BOCD verified against the healthy baseline: catches gradual sub-10 % steps"

    drift_floor: float = 0.05
    """A level more than 5 % above the healthy one has left the healthy band (half the paper's
    10 %: jitter of a healthy job stays well inside it)."""

    verify_window: int = 7
    """Points from a candidate on whose median is its new level (judged this many - 1 later):
    the median of 7 ignores three disturbed iterations."""

    verifier_class = BaselineVerifier

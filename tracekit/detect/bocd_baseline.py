"""BOCD+B: BOCD verified against the healthy baseline level, not only the previous segment.

Greyhound's one miss was a slowdown that grew in steps of under 10 % each: every step fails the
before/after test although the job ends up far slower than it was. Judging each candidate's new
level against the healthy level measured at the start of the job catches it, and the episode is
dated from the first step that left the healthy band (``drift_floor``), not from the step that
crossed 10 %. A drift that crept up in steps too small for BOCD to flag is dated by a CUSUM
(Page 1954) of the series against the healthy level: the episode starts after the last point
where the CUSUM was zero, provided the CUSUM has since risen past its decision interval, so an
abrupt step keeps its own date and a ramp is dated from its first step. A persistent slowdown that stays between ``drift_floor`` and ``min_change`` is kept
once it has lasted ``persist`` points. Lone slow iterations (GC pauses, checkpoints, evaluation)
still fail the median-of-window level test, so they raise nothing.
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

CUSUM_CLIP = 3.0
"""Each point's contribution is clipped at this many standard deviations (a Huber-type robust
CUSUM), so one GC pause or checkpoint cannot hold the CUSUM up for hundreds of points."""


class BaselineVerifier(SegmentVerifier):
    """Judges candidates of one series against its healthy level; tracks whether it is slow."""

    def __init__(self, detector: BocdBaseline, values):
        super().__init__(detector, values)
        self.baseline: float | None = None
        self.noise = 1.0
        self.slow = False
        self.drift_start: int | None = None

    def healthy_level(self) -> float:
        if self.baseline is None:
            warmup = np.asarray(self.values[: self.detector.warmup], dtype=np.float64)
            level, noise = reference_level(warmup[None, :], self.detector.min_noise)
            self.baseline, self.noise = float(level[0]), float(noise[0])
        return self.baseline

    def onset(self, candidate: int) -> int:
        """Start of the drift that ``candidate`` belongs to: after the last zero of the CUSUM of
        the normalised excess over the healthy level since the previous kept change, when that
        CUSUM has risen past its decision interval by ``candidate``; else ``candidate``."""
        first = self.accepted[-1] if self.accepted else 0
        excess = (np.asarray(self.values[first:candidate], dtype=np.float64)
                  / self.healthy_level() - 1.0) / self.noise
        steps = np.minimum(excess, CUSUM_CLIP) - CUSUM_ALLOWANCE
        cusum = np.concatenate(([0.0], np.cumsum(steps)))
        last_zero = cusum.size - 1 - int(np.argmin(cusum[::-1]))
        if cusum[-1] - cusum[last_zero] <= CUSUM_INTERVAL or (last_zero == 0 and self.accepted):
            return candidate  # no drift before it, or none that a kept change does not explain
        return first + last_zero

    def next_due(self) -> int | None:
        due = super().next_due()
        if self.drift_start is None:
            return due
        timer = self.drift_start + self.detector.persist - 1
        return timer if due is None else min(due, timer)

    def on_due(self, due: int) -> list[int]:
        if self.pending and self.pending[0] + self.detector.verify_window - 1 == due:
            return super().on_due(due)
        start, self.drift_start = self.drift_start, None  # the persistence timer
        if self.level(start, due + 1) / self.healthy_level() - 1.0 > self.detector.drift_floor:
            return self.keep(self.onset(start))
        return []

    def keep(self, candidate: int) -> list[int]:
        self.slow = not self.slow
        self.accepted.append(candidate)
        return [candidate]

    def judge(self, candidate: int, after: float) -> list[int]:
        d = self.detector
        relative = after / self.healthy_level() - 1.0
        if self.slow:
            if relative <= d.drift_floor:
                return self.keep(candidate)  # back to healthy
            return super().judge(candidate, after)  # the slowdown changed by > min_change
        if relative > d.min_change:
            start = candidate if self.drift_start is None else self.drift_start
            self.drift_start = None
            return self.keep(self.onset(start))
        if relative > d.drift_floor:
            if self.drift_start is None:
                self.drift_start = candidate
        elif relative < -d.drift_floor:
            self.baseline, self.drift_start = after, None  # faster than the warm-up: re-baseline
        else:
            self.drift_start = None
        return []


@dataclass
class BocdBaseline(BocdVerify):
    """BOCD+V that also catches gradual and persistent small slowdowns (beyond the paper)."""

    name = "bocd+b"
    description = "BOCD verified against the healthy baseline: catches gradual sub-10 % steps"

    drift_floor: float = 0.05
    """A level more than 5 % above the healthy one has left the healthy band (half the paper's
    10 %: jitter of a healthy job stays well inside it)."""
    persist: int = 50
    """Points a slowdown between drift_floor and min_change must last to be kept."""

    verifier_class = BaselineVerifier

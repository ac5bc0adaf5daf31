"""BOCD+B: BOCD verified against the healthy baseline level, not only the previous segment.

Greyhound's one miss was a slowdown that grew in steps of under 10 % each: every step fails the
before/after test although the job ends up far slower than it was. BOCD+B judges every
candidate exactly as BOCD+V does (sequentially, on all the points since it), and adds a drift
path for the candidates that judgement drops: one whose level is above the healthy level (the
warm-up's) by more than ``drift_floor`` opens a drift. The drift is dated by a CUSUM (Page
1954) of the series against the healthy level (after the last point where the CUSUM was zero,
when it has since passed its decision interval), so a ramp starts at its first step, even one
too small for BOCD to flag. It becomes a fail-slow once, over at least ``baseline_window``
points, the mean iteration time since its onset exceeds the level before it by more than
``min_change`` (10 %, the paper's threshold and the labels' definition of a fail-slow); it is
dropped when the CUSUM falls back to zero (the job is healthy again).
Lone slow iterations (GC pauses, checkpoints, evaluation) fail BOCD+V's judgement and barely
move the clipped CUSUM. Where a slowdown under 10 % ends (a segment judged no change when the
job returns from it, a fall judged no change that ends a slow excursion), later candidates are
compared with the points since, not with a median it holds up: on and off faults of x1.07
then x1.12 on one target are one benign stretch and one fail-slow.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from tracekit.detect.base import reference_level
from tracekit.detect.bocd_verify import BocdVerify, SegmentVerifier
from tracekit.detect.cusum import CUSUM_CLIP, CUSUM_INTERVAL, cusum_steps, last_zero

DRIFT_POINT_CAP = 2.0
"""In a drift's mean an iteration counts as at most twice the level before the drift: one
checkpoint save (30-80 iterations long) cannot carry a 7 % drift over 10 %, while any real
slowdown of more than 10 % still shows in full or above the threshold."""

SPIKE_WINDOW = 9
"""A point more than ``CUSUM_CLIP`` noise deviations above the median of the last this many
points is a spike (shorter than half the window), counted at that ceiling in a drift's mean."""


@dataclass
class Drift:
    """A slowdown being followed: its onset, the level before it, the next point to absorb,
    the sum of the (capped) iteration times since the onset and the CUSUM."""

    onset: int
    before: float
    next: int
    total: float = 0.0
    cusum: float = 0.0


class BaselineVerifier(SegmentVerifier):
    """BOCD+V's judgement of every candidate, and a drift against the healthy level for the
    candidates it drops."""

    def __init__(self, detector: BocdBaseline, values, sums):
        super().__init__(detector, values, sums)
        self.baseline: float | None = None
        self.drift: Drift | None = None
        self.settled = 0  # where the last slowdown under 10 % ended (:meth:`unchanged`)

    def window_start(self, candidate: int) -> int:
        """The points since the end of the last slowdown under 10 % inside the segment, when
        there are ``min_points`` of them: a fault of x1.12 just after a x1.06 one is judged
        against the healthy points between them, not a median the x1.06 holds up."""
        start = super().window_start(candidate)
        return self.settled if start < self.settled <= candidate - self.detector.min_points \
            else start

    def healthy_level(self) -> float:
        if self.baseline is None:
            warmup = np.asarray(self.values[: self.detector.warmup], dtype=np.float64)
            self.baseline = float(reference_level(warmup[None, :], self.detector.min_noise)[0][0])
        return self.baseline

    def advance_to(self, t: int) -> list[int]:
        """Make every judgement due at or before point ``t``, the drift absorbing the points up
        to each judgement first; return the changes kept."""
        kept = []
        while True:
            due = self.next_due()
            kept += self.follow_drift(t if due is None else min(t, due))
            if due is None or due > t:
                return kept
            kept += self.on_due(due)

    def unchanged(self, candidate: int, stop: int, returned: bool = False) -> list[int]:
        """A slowdown under 10 % that ended: a rise whose segment the job returned from at
        ``stop``, or a fall judged no change that ends a slow excursion. Later candidates are
        judged against the points since (:meth:`window_start`)."""
        rise = self.level(candidate, stop) > self.previous_level(candidate)
        if rise and returned:
            self.settled = stop
        elif not rise and self.excursion_start(candidate, self.level(candidate, stop)) \
                is not None:
            self.settled = candidate
        return []

    def dropped(self, candidate: int, stop: int) -> list[int]:
        """A candidate under 10 %: it opens a drift when its level left the healthy band while
        the segment before it was still inside it; faster than the band, it re-baselines."""
        d = self.detector
        self.unchanged(candidate, stop)
        healthy = self.healthy_level()
        relative = self.level(candidate, stop) / healthy - 1.0
        if relative < -d.drift_floor:
            self.baseline, self.drift = self.level(candidate, stop), None
            return []
        if relative <= d.drift_floor or self.drift is not None or \
                self.level(self.segment_start(), candidate) / healthy - 1.0 > d.drift_floor:
            return []
        onset = self.drift_onset(candidate)
        before = self.previous_level(onset) if onset > self.segment_start() else healthy
        self.drift = Drift(onset, before, next=onset)
        return self.follow_drift(stop - 1)

    def drift_onset(self, candidate: int) -> int:
        """After the last zero of the CUSUM against the healthy level since the last kept
        change, when the CUSUM has risen past its decision interval by ``candidate``; else
        ``candidate`` (no drift before it, or one as old as the last change: the warm-up)."""
        first = self.segment_start()
        steps = cusum_steps(self.values[first:candidate], self.healthy_level(),
                            self.healthy_noise())
        zero, cusum = last_zero(steps)
        return candidate if cusum <= CUSUM_INTERVAL or zero == 0 else first + zero

    def follow_drift(self, until: int) -> list[int]:
        """Absorb the points up to ``until`` into the open drift, all at once, stopping at the
        first where its mean passed 10 % (kept) or its CUSUM fell to zero (healthy again)."""
        drift = self.drift
        if drift is None or drift.next > until:
            return []
        d = self.detector
        points = np.asarray(self.values[drift.next : until + 1], dtype=np.float64)
        totals = drift.total + np.cumsum(self.drift_points(drift, until))
        counts = np.arange(drift.next - drift.onset + 1, until + 2 - drift.onset)
        walk = drift.cusum + np.cumsum(cusum_steps(points, self.healthy_level(),
                                                   self.healthy_noise()))
        cusum = walk - np.minimum(np.minimum.accumulate(walk), 0.0)
        slow = (counts >= d.baseline_window) & (totals / counts / drift.before - 1.0 > d.min_change)
        events = np.flatnonzero(slow | (cusum <= 0.0))
        if events.size:
            self.drift = None
            return self.keep(drift.onset, drift.next + events[0] + 1, step=False) \
                if slow[events[0]] else []
        drift.total, drift.cusum, drift.next = float(totals[-1]), float(cusum[-1]), until + 1
        return []

    def drift_points(self, drift: Drift, until: int) -> np.ndarray:
        """The points from ``drift.next`` to ``until`` as the drift's mean counts them: at most
        ``DRIFT_POINT_CAP`` times the level before it (a checkpoint) and at most
        ``CUSUM_CLIP`` noise deviations above the median of the last ``SPIKE_WINDOW`` points
        (a GC pause or an evaluation step: the labels count them in the healthy time too)."""
        first = max(drift.next - SPIKE_WINDOW + 1, 0)
        window = np.asarray(self.values[first : until + 1], dtype=np.float64)
        points = window[drift.next - first :]
        recent = np.median(sliding_window_view(
            np.concatenate((np.full(SPIKE_WINDOW - 1 - (drift.next - first), window[0]), window)),
            SPIKE_WINDOW), axis=1)
        ceiling = np.minimum(DRIFT_POINT_CAP * drift.before,
                             recent * (1.0 + CUSUM_CLIP * self.healthy_noise()))
        return np.minimum(points, ceiling)

    def keep(self, candidate: int, stop: int, step: bool = True) -> list[int]:
        self.drift = None  # a kept change ends the drift: the slowdown is now a segment
        return super().keep(candidate, stop, step)


@dataclass
class BocdBaseline(BocdVerify):
    """BOCD+V that also catches slowdowns growing in steps under 10 % (beyond the paper)."""

    name = "bocd+b"
    description = "BOCD verified against the healthy baseline: catches gradual sub-10 % steps"

    drift_floor: float = 0.05
    """A level more than 5 % above the healthy one has left the healthy band (half the paper's
    10 %: jitter of a healthy job stays well inside it)."""

    verifier_class = BaselineVerifier

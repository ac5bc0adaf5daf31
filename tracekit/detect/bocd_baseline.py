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
move the clipped CUSUM.

A slowdown under 10 % next to a fail-slow holds up the level the fail-slow is measured
against. Where one ends (a segment judged no change when the job returns from it, or a
candidate judged no change whose own first points are the job back at its healthy level),
later candidates are compared with the points since, not with a median it holds up: on and
off faults of x1.07 then x1.12 on one target are one benign stretch and one fail-slow. A
return judged no change because the next slowdown began within the points it was judged on
(a fail-slow then, a few iterations later, a slowdown under 10 %: the return measured only
their difference) has the slowdown it ended judged again, whole, by the labels' measure, and
kept when a fail-slow. A return is seen on the median of its first ``min_points`` points, so
one shorter than that is none: the two slowdowns are one stretch, a ramp, judged whole as the
labels judge a ramp.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from tracekit.detect.base import median, reference_level
from tracekit.detect.bocd_verify import (
    BocdVerify,
    SegmentVerifier,
    back_at,
    labels_slowdown,
    shift_error,
)
from tracekit.detect.cusum import CUSUM_CLIP, CUSUM_INTERVAL, cusum_steps

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
        """A candidate judged no change on the points up to ``stop``: where a slowdown ended,
        when its segment (a rise) was ended by the job's return at ``stop``, or when its own
        first points are the job back from one (:meth:`returned_from`). When the next
        slowdown began within those points, the judgement measured the return against it, so
        the slowdown is judged again, whole, by the labels' measure (:meth:`fail_slow`), and
        kept when a fail-slow. Otherwise the judgement stands: a slowdown under 10 % ended
        there, and later candidates are judged against the points since
        (:meth:`window_start`)."""
        if returned and self.level(candidate, stop) > self.previous_level(candidate):
            self.settled = stop
            return []
        start = self.returned_from(candidate)
        if start is None:
            return []
        back_until = self.return_end(candidate, stop)
        if back_until < stop and \
                self.fail_slow(start, candidate, self.returned_level(start, candidate, back_until)):
            return self.keep_slowdown(start, candidate)
        self.settled = candidate
        return []

    def returned_from(self, candidate: int) -> int | None:
        """First point of the slowdown that the first ``min_points`` points from ``candidate``
        are the job back from, at its healthy level (:func:`back_at`); None when they are not.
        The slowdown is the excursion of the CUSUM against the healthy level since the last
        kept change, past its decision interval, at least ``min_duration`` points long (a
        burst of GC pauses is over sooner), its level above theirs beyond the confidence
        interval (:func:`shift_error`, at the slowdown's own spread, not the warm-up's: four
        points of jitter inside a ramp's first small step are no return)."""
        d, healthy = self.detector, self.healthy_level()
        start, cusum = self.cusum_since(self.segment_start(), candidate, healthy)
        if cusum <= CUSUM_INTERVAL or candidate - start < d.min_duration:
            return None
        slowdown = np.asarray(self.values[start:candidate], dtype=np.float64)
        level, after = median(slowdown), self.level(candidate, candidate + d.min_points)
        error = shift_error(max(self.spread(slowdown), d.min_noise), slowdown.size,
                            d.min_points)
        return start if level / after - 1.0 > error and back_at(after, healthy, level) \
            else None

    def return_end(self, candidate: int, stop: int) -> int:
        """Where the job's return at ``candidate`` ended, judged on the points up to ``stop``:
        where the next slowdown began (the last zero of the CUSUM against the healthy level
        since ``candidate``, when past its decision interval), else ``stop``."""
        back_until, cusum = self.cusum_since(candidate, stop, self.healthy_level())
        return back_until if cusum > CUSUM_INTERVAL else stop

    def returned_level(self, start: int, candidate: int, back_until: int) -> float:
        """The level a slowdown from ``start``, that the job was back from at ``candidate``
        until ``back_until``, is judged against: that of the return, when it lasted
        ``min_points``; else the level the job left at ``start`` (one iteration back before a
        slowdown under 10 % measures that one's level); else the healthy level."""
        if back_until - candidate >= self.detector.min_points:
            return self.level(candidate, back_until)
        left = self.level_left_at(start)
        return self.healthy_level() if left is None else left

    def level_left_at(self, start: int) -> float | None:
        """Level the job left at ``start``: that of the points :meth:`previous_level` takes,
        or, when ``start`` is the last kept change, of the segment before it; None when fewer
        than ``min_points`` (two points after a kept return are no level)."""
        d = self.detector
        if start > self.segment_start():
            first = self.window_start(start)
        else:
            first = max(self.accepted[-2] if len(self.accepted) > 1 else 0,
                        start - d.baseline_window)
        return self.level(first, start) if start - first >= d.min_points else None

    def fail_slow(self, start: int, stop: int, healthy: float) -> bool:
        """Whether the slowdown from ``start`` to the job's return at ``stop`` is a fail-slow,
        judged whole as a segment the job returned from: the labels' measure against the
        ``healthy`` level over ``min_change``, with ``min_duration`` slow points. The warm-up
        is never a fail-slow."""
        d = self.detector
        return start >= d.warmup and \
            labels_slowdown(self.mean(start, stop), self.level(start, stop) - healthy) > \
            d.min_change and \
            self.slow_points(start, stop, healthy, self.healthy_noise()) >= d.min_duration

    def keep_slowdown(self, start: int, stop: int) -> list[int]:
        """Keep the fail-slow from ``start`` to the job's return at ``stop``: its first point,
        unless it is the last kept change (the return then ends that one), and its end, dated
        on the return's first points (the next slowdown may follow them)."""
        kept = [start] if start > self.segment_start() else []
        kept.append(self.dated(stop, stop + self.detector.min_points))
        self.accepted += kept
        self.drift = None
        return kept

    def dropped(self, candidate: int, stop: int) -> list[int]:
        """A candidate under 10 %: a return that ends a fail-slow keeps it (:meth:`unchanged`);
        otherwise it opens a drift when its level left the healthy band while the segment
        before it was still inside it; faster than the band, it re-baselines."""
        d = self.detector
        kept = self.unchanged(candidate, stop)
        if kept:
            return kept
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
        start, cusum = self.cusum_since(first, candidate, self.healthy_level())
        return candidate if cusum <= CUSUM_INTERVAL or start == first else start

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

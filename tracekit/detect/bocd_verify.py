"""BOCD+V (Greyhound, ATC 2025): BOCD, then keep a change only if the level before and after it
differs by more than 10 %.

BOCD alone flags every GC pause and jitter burst (the paper measured 18-34 % false positives);
verification removes them. It measures what the labels measure: a fail-slow is a segment whose
iteration time is at least 10 % above the healthy level, judged over the whole segment. So a
candidate is judged sequentially on all the points since it (looks after ``min_points``
points, then each time their number doubles), against the robust level of the segment before
it:

* it is kept as soon as the confidence interval of its robust level (median, with the standard
  error of a median of that many points and the larger of the healthy noise and the points' own
  spread) lies wholly beyond 10 % of the faster level, and dropped as soon as it lies wholly
  within. A step well beyond 10 % is kept ``min_points - 1`` points after it; a GC pause, a
  checkpoint or a cluster of them is dropped by duration: the median of the points since it is
  back at the old level, and while it is not, the points' spread keeps the interval wide;
* a borderline candidate waits for the end of its segment: a later candidate whose level is back
  nearer the level before than the segment's own. It is then judged on the whole segment by the
  labels' own measure, the realised slowdown ``total time / (total time - time the shift
  added)``, where the shift is the difference of robust levels: benign disturbances inside the
  segment (a checkpoint) weigh in the totals as they do in the labels. When kept, the return is
  kept too (the segment is the fail-slow); when dropped, so is its return. A slowdown returning
  from +10.5 % is a 9.5 % drop of the slow level: measured against the faster level on both
  sides it is the same 10.5 % slowdown, so its end is not lost;
* a rise must persist, which a median of a few points cannot tell from a burst of GC pauses
  or a short checkpoint: its slowed points' lower quartile beyond the noise of the level
  before, a clean step (all within a few noise deviations) until it has lasted
  ``min_duration`` points, and a segment judged whole (or the excursion a fall ends) with at
  least ``min_duration`` slowed points.

A kept change is dated, within ``min_points`` points of BOCD's date, at the split its two levels
tell best: BOCD restarts its run length at a GC pause next to a step, so a return or a rise is
dated there, which moves a fault's length across a fail-slow's 20 iterations.

The paper says "mean"; the median (early) and the realised slowdown of the whole segment
(borderline) are its robust and its exact reading. Verification runs in the same order online
and offline, so both give identical results: judgements fall due at fixed points, in order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tracekit.detect.base import MAD_TO_SIGMA, as_series, median, reference_level
from tracekit.detect.bocd import Bocd
from tracekit.detect.cusum import CUSUM_INTERVAL, cusum_steps, last_zero

PAPER_MIN_CHANGE = 0.10
"""Greyhound keeps a change point only when before and after differ by more than 10 %."""

CONFIRM_POINTS = 10
"""Points a rise must last for BOCD+V (and bocd+b, its subclass) to confirm it as a change:
one ending sooner is a disturbance (GC pauses, a checkpoint), whatever its level. The
detector's own persistence rule, in the series' points; whether a confirmed change is long
enough to be a fail-slow (``core.thresholds.FAIL_SLOW_MIN_ITERATIONS``, in iterations) is
decided on the episode it gives (:mod:`tracekit.detect.episodes`)."""

CONFIDENCE_Z = 3.0
"""Half-width of the confidence interval in standard errors (three sigma): with a few looks
per candidate, a level decided early is wrong well under once in a hundred."""

MEDIAN_STANDARD_ERROR = math.sqrt(math.pi / 2)
"""Standard error of a median of n Gaussian points in units of sigma / sqrt(n)."""

CLEAN_STEP_RANGE = 6.0
"""Before a rise has lasted ``min_duration`` points it is kept only as a clean step: all its
points within this many noise deviations of each other (the range of 4 to 9 Gaussian points
exceeds 6 deviations less than once in 10^3, simulated). Spikes of x1.5-3 in a row (a burst
of GC pauses, a checkpoint then a pause) spread by tens of percent and wait until then."""


def labels_slowdown(slow_mean: float, shift: float) -> float:
    """The labels' realised slowdown of a stretch whose mean is ``slow_mean`` and whose level
    is ``shift`` above the level around it: total time over total time less the time the
    shift added, minus one."""
    healthy_mean = slow_mean - shift
    return math.inf if healthy_mean <= 0 else slow_mean / healthy_mean - 1.0


def shift_error(noise: float, points: int, others: int) -> float:
    """Half-width of the confidence interval of the relative shift between the medians of
    ``points`` and ``others`` points of relative ``noise``: ``CONFIDENCE_Z`` standard errors
    of their difference."""
    return CONFIDENCE_Z * MEDIAN_STANDARD_ERROR * noise * math.sqrt(1 / points + 1 / others)


def back_at(level: float, before: float, slowdown: float) -> bool:
    """Whether ``level`` is back at ``before`` from ``slowdown``: within half the shift
    between them, nearer the level before than the slowdown's."""
    return abs(level - before) < abs(slowdown - before) / 2


class SegmentVerifier:
    """Judges BOCD candidates of one series against the segment before them.

    The schedule: ``pending`` holds candidates in order; the first is being judged, at looks
    ``min_points``, then twice, four times as many points after it (``look``); each later
    one is checked, once its own ``min_points`` points are in, for whether it ends the first
    one's segment (``checked`` of them did not). Judgements fall due at fixed points and are
    made in order (:meth:`advance_to`), so the online and the offline detector agree.

    The methods come in four groups: the schedule, the judgements, the excursion a fall
    ends, and measures of a stretch of points."""

    # -- the schedule

    def __init__(self, detector: BocdVerify, values, sums):
        self.detector = detector
        self.values = values
        self.sums = sums  # sums[i] = sum of values[:i], to take any segment's mean in O(1)
        self.pending: list[int] = []
        self.accepted: list[int] = []
        self.noise: float | None = None
        self.look = detector.min_points  # points since the first candidate at its next look
        self.checked = 0  # pending candidates after the first already checked (not its end)

    def add(self, candidate: int) -> None:
        self.pending.append(candidate)

    def next_due(self) -> int | None:
        """Index of the point at which the next judgement falls due (None when idle)."""
        if not self.pending:
            return None
        due = self.pending[0] + self.look - 1
        following = self.end_candidate()
        if following is not None:
            due = min(due, following + self.detector.min_points - 1)
        return due

    def advance_to(self, t: int) -> list[int]:
        """Make every judgement due at or before point ``t``; return the changes kept."""
        kept = []
        while (due := self.next_due()) is not None and due <= t:
            kept += self.on_due(due)
        return kept

    def on_due(self, due: int) -> list[int]:
        """Make the judgement due at point ``due``: the first candidate is a repeat of the last
        kept change, or the next candidate's first points say whether it ends the first one's
        segment, or the first candidate's look is in."""
        first, following = self.pending[0], self.end_candidate()
        if self.accepted and first < self.segment_start() + self.detector.min_points:
            self.next_candidate()  # the same transition as the last kept change (a step the
            return []  # ACF smears over an iteration or two), or dated before it
        if following is not None and due == following + self.detector.min_points - 1:
            return self.check_end(first, following)
        return self.look_at(first, due + 1)

    def check_end(self, first: int, following: int) -> list[int]:
        """Whether ``following`` ends ``first``'s segment; if so, judge the segment whole."""
        end = self.segment_end(first, following)
        if end is None:
            self.checked += 1
            return []
        return self.close_segment(first, following, returned=end == "return")

    def look_at(self, first: int, stop: int) -> list[int]:
        """Judge ``first`` on its points up to ``stop``; undecided, look again at twice as
        many."""
        verdict = self.verdict(first, stop)
        if verdict is None:
            self.look *= 2
            return []
        self.next_candidate()
        return self.keep(first, stop) if verdict else self.dropped(first, stop)

    def next_candidate(self, drop: int = 1) -> None:
        del self.pending[:drop]
        self.look, self.checked = self.detector.min_points, 0

    def end_candidate(self) -> int | None:
        """The next pending candidate to check for ending the first one's segment."""
        index = self.checked + 1
        return self.pending[index] if index < len(self.pending) else None

    def finish(self, points: int) -> list[int]:
        """End of the series: make the judgements due by its last point, then judge the first
        pending candidate on its whole segment (to the end); those with fewer than
        ``min_points`` points stay unconfirmed (one slow last iteration would pass)."""
        kept = self.advance_to(points - 1)
        if self.pending and points - self.pending[0] >= self.detector.min_points and \
                self.realised_slowdown(self.pending[0], points) > self.detector.min_change:
            kept += self.keep(self.pending[0], points)
        self.pending.clear()
        return kept

    # -- judgements

    def verdict(self, candidate: int, stop: int) -> bool | None:
        """Keep (True) or drop (False) ``candidate`` on the points up to ``stop`` when the
        confidence interval of the relative shift is wholly on one side of ``min_change``;
        None while undecided. A fall is judged against the recent level first, which is cheap
        and drops most candidates, then against its whole segment."""
        verdict = self.interval_verdict(candidate, stop, self.previous_level(candidate))
        if verdict and self.level(candidate, stop) < self.previous_level(candidate):
            verdict = self.interval_verdict(candidate, stop, self.before_level(candidate, stop))
        return verdict

    def interval_verdict(self, candidate: int, stop: int, before: float) -> bool | None:
        d = self.detector
        points = np.asarray(self.values[candidate:stop], dtype=np.float64)
        after = median(points)
        error = shift_error(max(self.healthy_noise(), self.spread(points)), points.size,
                            candidate - self.window_start(candidate))
        relative = abs(after - before) / min(after, before)
        if relative - error > d.min_change and (after < before or self.persistent(candidate, stop)):
            return True
        if relative + error <= d.min_change and points.size >= d.min_duration:
            return False  # only once it lasted as long as a fail-slow: it may be misdated
        return None

    def persistent(self, candidate: int, stop: int) -> bool:
        """Whether the points from ``candidate`` to ``stop``, above the level before them, are a
        new level rather than a burst of disturbances (GC pauses, a checkpoint, an evaluation
        step, data-loader hiccups), which a median of a few points cannot tell apart. Judged
        on the points from the first one beyond ``min_change`` (a step the ACF reconstruction
        smears over a point or two reaches its level there), at least ``min_points`` of them:
        a new level moves every iteration, so their lower quartile is beyond ``CONFIDENCE_Z``
        noise deviations of the level before (a checkpoint of three iterations leaves the
        fourth at the old level); and before the candidate has lasted ``min_duration`` points
        they must be a clean step (``CLEAN_STEP_RANGE``)."""
        d = self.detector
        noise, before = self.local_noise(candidate), self.previous_level(candidate)
        points = np.asarray(self.values[candidate:stop], dtype=np.float64)
        beyond = np.flatnonzero(points / before - 1.0 > d.min_change)
        slowed = points[beyond[0]:] if beyond.size else points[:0]
        if slowed.size < d.min_points:
            return False
        quartile = (slowed.size - 1) // 4
        if np.partition(slowed, quartile)[quartile] / before - 1.0 <= CONFIDENCE_Z * noise:
            return False
        return points.size >= d.min_duration or \
            np.ptp(slowed) / median(slowed) <= CLEAN_STEP_RANGE * noise

    def segment_end(self, first: int, following: int) -> str | None:
        """How ``following`` ends the segment opened by ``first``, judged on its first
        ``min_points`` points: ``"return"`` when they are back within half the opening shift of
        the level before ``first``, ``"new"`` when they left the segment's level by more than
        ``min_change``; None when it is a disturbance inside the segment."""
        d = self.detector
        if following - first < d.min_points:
            return None
        after = self.level(following, following + d.min_points)
        before, level = self.previous_level(first), self.level(first, following)
        if back_at(after, before, level):
            return "return"
        if abs(after - level) / min(after, level) > d.min_change:
            return "new"
        return None

    def close_segment(self, first: int, following: int, returned: bool) -> list[int]:
        """Judge ``first`` on its whole segment, which ``following`` ends. A return is kept
        with the segment or dropped with it; a new level is judged next on its own."""
        self.next_candidate(self.pending.index(following) + returned)
        if following - first < self.detector.min_duration or \
                not self.realised_slowdown(first, following) > self.detector.min_change:
            return self.unchanged(first, following, returned)
        before = self.previous_level(first)
        if self.level(first, following) > before and self.slow_points(
                first, following, before, self.local_noise(first)) < self.detector.min_duration:
            return self.unchanged(first, following, returned)  # a burst of disturbances
        kept = self.keep(first, following)
        if returned:
            kept += self.keep(following, following + self.detector.min_points)
        return kept

    def keep(self, candidate: int, stop: int, step: bool = True) -> list[int]:
        """Keep ``candidate`` (judged on the points up to ``stop``), a ``step`` :meth:`dated`
        where it happened. A fall that ends an excursion begun after the last kept change keeps
        the excursion's start first: the fail-slow was the whole excursion (a ramp), not only
        its end."""
        start = self.fallen_from(candidate, stop)
        kept = [start, candidate] if start is not None and start > self.segment_start() and \
            self.excursion_start(candidate, self.level(candidate, stop)) == start else [candidate]
        if step and candidate >= self.detector.warmup:  # the warm-up's end is no step
            kept[-1] = self.dated(candidate, stop)
        self.accepted += kept
        return kept

    def dated(self, candidate: int, stop: int) -> int:
        """Where the change kept at ``candidate`` happened: within ``min_points`` points of it,
        the split that leaves the fewest points on the wrong side of the middle of the levels
        before and after it (the nearest to ``candidate`` among equals). BOCD dates a change at
        a GC pause next to it (its run length restarts there): a return at a pause two points
        early cut a 21-iteration fault to 19, under a fail-slow's 20, and a pause four points
        before a 16-iteration burst made it 20."""
        before, after = self.previous_level(candidate), self.level(candidate, stop)
        reach = self.detector.min_points
        first = max(self.segment_start() + 1, candidate - reach)
        points = np.asarray(self.values[first:min(candidate + reach, stop)], dtype=np.float64)
        later = (points > (before + after) / 2) == (after > before)  # nearer the level after
        # misplaced points of the split at each position: "after" ones before it, others after
        wrong = np.r_[0, np.cumsum(later)] + np.r_[np.cumsum((~later)[::-1])[::-1], 0]
        dates = first + np.arange(wrong.size)
        best = np.flatnonzero(wrong == wrong.min())
        return int(dates[best[np.argmin(np.abs(dates[best] - candidate))]])

    def unchanged(self, candidate: int, stop: int, returned: bool = False) -> list[int]:
        """A candidate whose segment, judged whole on the points up to ``stop`` (where the job
        ``returned`` to the level before, or not), is no change: nothing to do here (BOCD+B
        notes where a slowdown under 10 % ended)."""
        return []

    def dropped(self, candidate: int, stop: int) -> list[int]:
        """A candidate judged not a change on the points up to ``stop``: nothing to do here;
        BOCD+B follows it as a possible drift."""
        return []

    # -- the excursion a fall ends

    def fallen_from(self, candidate: int, stop: int) -> int | None:
        """When the points from ``candidate`` to ``stop`` fell below the recent level, the
        first point of the stretch the fall ends: the whole excursion, so its slowdown is the
        excursion's (a ramp's), not only its last steps' (the top of a ramp); else the recent
        window. None when they did not fall."""
        after = self.level(candidate, stop)
        if after >= self.previous_level(candidate):
            return None
        start = self.excursion_start(candidate, after)
        return max(self.segment_start(), candidate - self.detector.baseline_window) \
            if start is None else start

    def excursion_start(self, candidate: int, reference: float) -> int | None:
        """First point of the slow excursion that a fall at ``candidate`` to ``reference``
        ends: after the last zero, before ``candidate``, of a tabular CUSUM (Page 1954) of the
        excess over ``reference`` since the last kept change (the whole segment when it never
        returned to zero). None when the CUSUM stayed within its decision interval, or fewer
        than ``min_duration`` of the excursion's points are ``CONFIDENCE_Z`` noise deviations
        above ``reference`` (a burst of GC pauses, an evaluation step and a checkpoint, whose
        clipped steps hold the CUSUM up for a few points: no fail-slow lasts so little). A
        gradual ramp starts at its first step, even one BOCD missed."""
        start, cusum = self.cusum_since(self.segment_start(), candidate, reference)
        slow = self.slow_points(start, candidate, reference, self.healthy_noise())
        return start if cusum > CUSUM_INTERVAL and slow >= self.detector.min_duration else None

    def cusum_since(self, first: int, stop: int, reference: float) -> tuple[int, float]:
        """The tabular CUSUM of the excess over ``reference`` of the points from ``first`` to
        ``stop``: the point after its last zero (where the excursion began), and its value
        at the end."""
        zero, cusum = last_zero(cusum_steps(self.values[first:stop], reference,
                                            self.healthy_noise()))
        return first + zero, cusum

    def before_level(self, candidate: int, stop: int) -> float:
        """Level of the stretch before ``candidate`` it is compared with: the recent window,
        or the whole excursion a fall ends."""
        start = self.fallen_from(candidate, stop)
        return self.previous_level(candidate) if start is None else self.level(start, candidate)

    def realised_slowdown(self, candidate: int, stop: int) -> float:
        """The labels' measure of the segment from ``candidate`` to ``stop`` (or of the
        stretch before it when the level fell): total time over total time less the time the
        shift added, minus one."""
        start = self.fallen_from(candidate, stop)
        before, after = self.before_level(candidate, stop), self.level(candidate, stop)
        slow_mean = self.mean(candidate, stop) if start is None else self.mean(start, candidate)
        return labels_slowdown(slow_mean, abs(after - before))

    # -- measures of a stretch of points

    def segment_start(self) -> int:
        return self.accepted[-1] if self.accepted else 0

    def window_start(self, candidate: int) -> int:
        """First of the points before ``candidate`` that its level is compared with: the
        segment's, at most ``baseline_window`` of them."""
        return max(self.segment_start(), candidate - self.detector.baseline_window)

    def previous_level(self, candidate: int) -> float:
        """Median of the segment before ``candidate`` (its :meth:`window_start` on)."""
        first = self.window_start(candidate)
        return self.level(first, candidate) if first < candidate else float(self.values[0])

    def level(self, start: int, stop: int) -> float:
        return median(self.values[start:stop])

    def mean(self, start: int, stop: int) -> float:
        return (self.sums[stop] - self.sums[start]) / (stop - start)

    def slow_points(self, start: int, stop: int, level: float, noise: float) -> int:
        """How many points from ``start`` to ``stop`` are more than ``CONFIDENCE_Z`` relative
        ``noise`` deviations above ``level``: a confirmed change has at least ``min_duration``."""
        points = np.asarray(self.values[start:stop], dtype=np.float64)
        return int(np.count_nonzero(points / level - 1.0 > CONFIDENCE_Z * noise))

    def local_noise(self, candidate: int) -> float:
        """Relative noise (floored) of the points ``previous_level`` takes before ``candidate``:
        the spread the job had just before, whatever its warm-up was."""
        first = self.window_start(candidate)
        before = np.asarray(self.values[first:candidate], dtype=np.float64)
        return max(self.spread(before), self.detector.min_noise) if before.size else \
            self.detector.min_noise

    def healthy_noise(self) -> float:
        """Relative noise of the warm-up (floored), the least spread any level can have."""
        if self.noise is None:
            warmup = np.asarray(self.values[: self.detector.warmup], dtype=np.float64)
            self.noise = float(reference_level(warmup[None, :], self.detector.min_noise)[1][0])
        return self.noise

    @staticmethod
    def spread(points: np.ndarray) -> float:
        """Robust relative spread of ``points``: their MAD as a Gaussian deviation, over their
        median."""
        level = median(points)
        return MAD_TO_SIGMA * median(np.abs(points - level)) / level


@dataclass
class BocdVerify(Bocd):
    """BOCD whose change points are kept only when the level moved by more than ``min_change``."""

    name = "bocd+v"
    description = "BOCD with 10 % before/after verification (Greyhound)"

    min_change: float = PAPER_MIN_CHANGE
    min_points: int = 4
    """Points from a candidate on at its first look (judged this many - 1 later): the median
    of 4 is not moved by one disturbed iteration."""
    min_duration: int = CONFIRM_POINTS
    """A segment judged as a whole is a change only when it lasts this many points."""
    baseline_window: int = 50
    """At most this many points before a candidate give the level it is compared with."""

    verifier_class = SegmentVerifier

    def reset(self) -> None:
        super().reset()
        self._sums = [0.0]
        self._verifier = self.verifier_class(self, self._values, self._sums)

    @property
    def changepoints(self) -> np.ndarray:
        return np.asarray(self._verifier.accepted, dtype=np.int64)

    def update(self, x: float) -> list[int]:
        self._sums.append(self._sums[-1] + x)
        for candidate in super().update(x):
            self._verifier.add(candidate)
        return self._verifier.advance_to(len(self._values) - 1)

    def flush(self) -> list[int]:
        for candidate in super().flush():
            self._verifier.add(candidate)
        return self._verifier.finish(len(self._values))

    def detect(self, series) -> np.ndarray:
        self.reset()
        self._verifier = self.detect_many(as_series(series)[None, :], verifiers=True)[0]
        return self.changepoints

    def detect_many(self, matrix: np.ndarray, verifiers: bool = False) -> list:
        """Change points of every row, BOCD stepping all rows together; verification replays
        each row's candidates in the order the online detector judges them."""
        values = np.asarray(matrix, dtype=np.float64)
        done = []
        for row, alarms in zip(values, self.alarms_many(values), strict=True):
            sums = np.concatenate(([0.0], np.cumsum(row)))
            verifier = self.verifier_class(self, row, sums)
            for candidate, alarm in alarms:
                verifier.advance_to(alarm - 1)
                verifier.add(candidate)
            verifier.finish(row.size)
            done.append(verifier if verifiers else np.asarray(verifier.accepted, np.int64))
        return done

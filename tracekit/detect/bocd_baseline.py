"""BOCD+B: BOCD verified against the healthy baseline level, not only the previous segment.

Greyhound's one miss was a slowdown that grew in steps of under 10 % each: every step fails the
before/after test although the job ends up far slower than it was. Judging each candidate's new
level against the healthy level measured at the start of the job catches it, and the episode is
dated from the first step that left the healthy band (``drift_floor``), not from the step that
crossed 10 %. A persistent slowdown that stays between ``drift_floor`` and ``min_change`` is kept
once it has lasted ``persist`` points. Lone slow iterations (GC pauses, checkpoints, evaluation)
still fail the median-of-window level test, so they raise nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from tracekit.detect.bocd_verify import BocdVerify, SegmentVerifier


class BaselineVerifier(SegmentVerifier):
    """Judges candidates of one series against its healthy level; tracks whether it is slow."""

    def __init__(self, detector: BocdBaseline, values):
        super().__init__(detector, values)
        self.baseline: float | None = None
        self.slow = False
        self.drift_start: int | None = None

    def healthy_level(self) -> float:
        if self.baseline is None:
            self.baseline = self.level(0, min(self.detector.warmup, len(self.values)))
        return self.baseline

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
            return self.keep(start)
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
            return self.keep(start)
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

"""BOCD+V (Greyhound, ATC 2025): BOCD, then keep a change only if the level before and after it
differs by more than 10 %.

BOCD alone flags every GC pause and jitter burst (the paper measured 18-34 % false positives);
verification removes them. The level after a candidate is the median of the ``verify_window``
(7) points that start the new segment, so a candidate is judged 6 points after it (its date, and
so the detection delay, is the candidate's own) and up to three slow iterations among seven
cannot pass. In a 32-rank job some rank pauses for GC about one iteration in ten (every ~300
iterations per rank), so clusters are common: on the synthesized probing corpora a window of 3
let two GC pauses through, a window of 5 two GC pauses next to a checkpoint. The level before is
the median of the segment since the previous kept change (at most ``baseline_window`` points).
The paper says "mean"; a median of the same points is the robust reading of it.

Verification runs in the same order online and offline, so both give identical results: a
candidate is judged once its window is complete, in order of position.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracekit.detect.base import as_series
from tracekit.detect.bocd import Bocd

PAPER_MIN_CHANGE = 0.10
"""Greyhound keeps a change point only when before and after differ by more than 10 %."""


class SegmentVerifier:
    """Judges BOCD candidates of one series against the segment before them."""

    def __init__(self, detector: BocdVerify, values):
        self.detector = detector
        self.values = values
        self.pending: list[int] = []
        self.accepted: list[int] = []

    def level(self, start: int, stop: int) -> float:
        return float(np.median(self.values[start:stop]))

    def previous_level(self, candidate: int) -> float:
        previous = self.accepted[-1] if self.accepted else 0
        return self.level(max(previous, candidate - self.detector.baseline_window), candidate)

    def add(self, candidate: int) -> None:
        self.pending.append(candidate)

    def next_due(self) -> int | None:
        """Index of the point at which the next judgement falls due (None when idle)."""
        return self.pending[0] + self.detector.verify_window - 1 if self.pending else None

    def advance_to(self, t: int) -> list[int]:
        """Make every judgement due at or before point ``t``; return the changes kept."""
        kept = []
        while (due := self.next_due()) is not None and due <= t:
            kept += self.on_due(due)
        return kept

    def on_due(self, due: int) -> list[int]:
        candidate = self.pending.pop(0)
        return self.judge(candidate, due, self.level(candidate, due + 1))

    def judge(self, candidate: int, due: int, after: float) -> list[int]:
        """Keep ``candidate`` (judged at point ``due``) when its level ``after`` moved enough."""
        before = self.previous_level(candidate)
        if abs(after / before - 1.0) > self.detector.min_change:
            self.accepted.append(candidate)
            return [candidate]
        return []

    def finish(self, points: int) -> list[int]:
        """End of the series: make the judgements due by its last point. A candidate in the
        last ``verify_window - 1`` points stays unconfirmed: judged on fewer points, one slow
        last iteration would pass."""
        kept = self.advance_to(points - 1)
        self.pending.clear()
        return kept


@dataclass
class BocdVerify(Bocd):
    """BOCD whose change points are kept only when the level moved by more than ``min_change``."""

    name = "bocd+v"
    description = "BOCD with 10 % before/after verification (Greyhound)"

    min_change: float = PAPER_MIN_CHANGE
    verify_window: int = 7
    """Points from a candidate on whose median is its new level (judged this many - 1 later):
    the median of 7 ignores three disturbed iterations."""
    baseline_window: int = 50
    """At most this many points before a candidate give the level it is compared with."""

    verifier_class = SegmentVerifier

    def reset(self) -> None:
        super().reset()
        self._verifier = self.verifier_class(self, self._values)

    @property
    def changepoints(self) -> np.ndarray:
        return np.asarray(self._verifier.accepted, dtype=np.int64)

    def update(self, x: float) -> list[int]:
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
            verifier = self.verifier_class(self, row)
            for candidate, alarm in alarms:
                verifier.advance_to(alarm - 1)
                verifier.add(candidate)
            verifier.advance_to(row.size - 1)
            verifier.finish(row.size)
            done.append(verifier if verifiers else np.asarray(verifier.accepted, np.int64))
        return done

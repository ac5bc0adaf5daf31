"""Sliding-window detector (Greyhound's simple baseline): a change when points depart by more than
10 % from the median of the window before them.

A single slow iteration departs too, so a change needs ``persist`` consecutive departures in the
same direction and is dated at the first of them. The window holds the ``window`` points before
the current one, departures included, so after a real change the median catches up within half a
window and the detector re-arms. Offline (``detect``, ``detect_many``) the same rule runs as array
operations over whole rows: every window's median at once, then the runs of departures.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from tracekit.detect.base import Detector, as_series

PAPER_DEPARTURE = 0.10
"""Greyhound's sliding window reports a point more than 10 % away from the window median."""


@dataclass
class SlidingWindow(Detector):
    """Report when ``persist`` points in a row depart more than ``departure`` from the median of
    the ``window`` points before them."""

    name = "window"
    description = "departure > 10 % from the sliding-window median (Greyhound baseline)"

    window: int = 20
    departure: float = PAPER_DEPARTURE
    persist: int = 3

    def reset(self) -> None:
        self._recent: deque[float] = deque(maxlen=self.window)
        self._index = 0
        self._run_sign = 0
        self._run_start = 0
        self._run_length = 0
        self._found: list[int] = []

    @property
    def changepoints(self) -> np.ndarray:
        return np.asarray(self._found, dtype=np.int64)

    def update(self, x: float) -> list[int]:
        sign = 0
        if len(self._recent) == self.window:
            median = float(np.median(self._recent))
            relative = x / median - 1.0
            sign = int(np.sign(relative)) if abs(relative) > self.departure else 0
        self._recent.append(x)
        index, self._index = self._index, self._index + 1
        if sign == 0 or sign != self._run_sign:
            self._run_sign, self._run_start, self._run_length = sign, index, 0
        self._run_length += sign != 0
        if self._run_length == self.persist:
            self._found.append(self._run_start)
            return [self._run_start]
        return []

    def detect(self, series) -> np.ndarray:
        self.reset()
        self._found = self.detect_many(as_series(series)[None, :])[0].tolist()
        return self.changepoints

    def detect_many(self, matrix: np.ndarray) -> list[np.ndarray]:
        """Change points of every row of ``matrix``, those :meth:`update` finds point by point:
        a departure's sign per point after the first window, then each run of ``persist`` or
        more equal signs dated at its first point."""
        values = np.asarray(matrix, dtype=np.float64)
        rows, points = values.shape
        signs = np.zeros((rows, points), dtype=np.int8)
        if points > self.window:
            before = np.lib.stride_tricks.sliding_window_view(values[:, :-1], self.window, axis=1)
            relative = values[:, self.window:] / np.median(before, axis=-1) - 1.0
            signs[:, self.window:] = np.sign(relative) * (np.abs(relative) > self.departure)
        found = []
        for row in signs:
            starts = np.flatnonzero(np.diff(row, prepend=0))
            lengths = np.diff(starts, append=points)
            found.append(starts[(row[starts] != 0) & (lengths >= self.persist)].astype(np.int64))
        return found

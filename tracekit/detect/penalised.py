"""PELT and binary segmentation with the literature's default settings: those of R's
``changepoint`` package (Killick & Eckley 2014) as the TCPD benchmark runs it (``cpt.mean``,
normal mean-change cost, MBIC penalty, series scaled by R's ``scale()``).

Cost of a segment: twice its Gaussian negative log-likelihood with unit variance, ``sum x^2 -
(sum x)^2 / n``, plus ``log n`` for the MBIC (Zhang & Siegmund 2007), whose penalty is
``3 log N`` per change. Exact positions: every index is a candidate and a segment may hold a
single point (``changepoint``'s ``minseglen`` for a mean change). Several columns are
independent dimensions: costs add up, and each change pays the penalty once per dimension
(a change moves every mean), which is R's for one column.

Both run over cumulative sums, vectorised across candidate positions: O(1) numpy work per
candidate where ruptures calls a Python cost function per candidate (x1000 slower at 10^4 points).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from tracekit.core.errors import TracekitError
from tracekit.detect.base import OfflineDetector, as_series
from tracekit.detect.bocd_map import standardise

MBIC_CHANGE_PENALTY = 3.0
"""MBIC's penalty per change, in units of ``log N`` (changepoint's ``penalty = "MBIC"``)."""

R_BINSEG_MAX_CHANGES = 5
"""``changepoint``'s default ``Q`` for binary segmentation (TCPD's default experiment)."""


ROUNDING_DEVIATION = 1e-8
"""On a scaled column (deviation 1) a deviation within segments below this is rounding error:
the segments are noiseless and the column keeps its scale."""


def as_matrix(values) -> np.ndarray:
    """``values`` as points x dimensions (a 1-D series is one dimension), finite."""
    matrix = np.asarray(values, dtype=np.float64)
    if matrix.ndim == 1:
        return as_series(matrix)[:, None]
    if matrix.ndim != 2:
        raise TracekitError(f"a series must be 1-D or points x columns, got shape {matrix.shape}")
    for column in matrix.T:
        as_series(column)
    return matrix


def scale_columns(matrix: np.ndarray) -> np.ndarray:
    """Each column as R's ``scale()`` leaves it (TCPD scales every dataset this way)."""
    return np.column_stack([standardise(column) for column in matrix.T])


class NormalMeanCost:
    """Segment costs of a points x dimensions series from cumulative sums."""

    def __init__(self, matrix: np.ndarray):
        zero = np.zeros((1, matrix.shape[1]))
        self.sums = np.vstack([zero, np.cumsum(matrix, axis=0)])
        self.squares = np.vstack([zero, np.cumsum(matrix**2, axis=0)])
        self.dimensions = matrix.shape[1]

    def cost(self, starts, stops) -> np.ndarray:
        """MBIC cost of the segments ``[start, stop)`` (arrays of starts and stops broadcast)."""
        starts, stops = np.broadcast_arrays(starts, stops)
        length = (stops - starts).astype(np.float64)
        sums = self.sums[stops] - self.sums[starts]
        squares = self.squares[stops] - self.squares[starts]
        fit = (squares - sums**2 / length[..., None]).sum(axis=-1)
        return fit + self.dimensions * np.log(length)

    def split_gains(self, start: int, stop: int) -> np.ndarray:
        """Cost decrease of cutting ``[start, stop)`` at each of ``start + 1 .. stop - 1``."""
        cuts = np.arange(start + 1, stop)
        return self.cost(start, stop) - self.cost(start, cuts) - self.cost(cuts, stop)


def within_segment_deviation(matrix: np.ndarray, changepoints: np.ndarray) -> np.ndarray:
    """Per column, the noise deviation pooled over the segments (each around its own mean)."""
    pieces = np.split(matrix, changepoints)
    residual = sum(((p - p.mean(axis=0)) ** 2).sum(axis=0) for p in pieces)
    freedom = max(matrix.shape[0] - len(pieces), 1)
    deviation = np.sqrt(residual / freedom)
    return np.where(deviation > ROUNDING_DEVIATION, deviation, 1.0)


def mbic_penalty(points: int, dimensions: int) -> float:
    """Penalty per change: ``3 log N`` for each dimension whose mean the change moves."""
    return MBIC_CHANGE_PENALTY * dimensions * math.log(points)


def pelt(cost: NormalMeanCost, points: int, penalty: float) -> np.ndarray:
    """Optimal penalised partition by PELT (Killick, Fearnhead & Eckley 2012): exact, with the
    candidates that can no longer start the last segment pruned."""
    best = np.empty(points + 1)
    best[0] = -penalty
    previous = np.zeros(points + 1, dtype=np.int64)
    candidates = np.array([0])
    for stop in range(1, points + 1):
        totals = best[candidates] + cost.cost(candidates, stop) + penalty
        choice = int(np.argmin(totals))
        best[stop], previous[stop] = totals[choice], candidates[choice]
        candidates = np.append(candidates[totals - penalty <= best[stop]], stop)
    starts = []
    stop = points
    while stop > 0:
        stop = int(previous[stop])
        starts.append(stop)
    return np.asarray(sorted(starts)[1:], dtype=np.int64)


def binary_segmentation(cost: NormalMeanCost, points: int, penalty: float,
                        max_changes: int) -> np.ndarray:
    """Greedy binary segmentation as ``changepoint``'s ``BinSeg``: split where the cost falls
    most, keep splitting while that fall exceeds the penalty, at most ``max_changes`` times."""
    pieces = [(0, points)]
    found: list[int] = []
    while len(found) < max_changes:
        best_gain, best_cut, best_piece = -np.inf, -1, None
        for start, stop in pieces:
            if stop - start < 2:
                continue
            gains = cost.split_gains(start, stop)
            index = int(np.argmax(gains))
            if gains[index] > best_gain:
                best_gain, best_cut, best_piece = gains[index], start + 1 + index, (start, stop)
        if best_piece is None or not best_gain > penalty:
            break
        pieces.remove(best_piece)
        pieces += [(best_piece[0], best_cut), (best_cut, best_piece[1])]
        found.append(best_cut)
    return np.asarray(sorted(found), dtype=np.int64)


@dataclass
class MatrixDetector(OfflineDetector):
    """An offline detector that also reads several columns at once (points x columns)."""

    multivariate: ClassVar[bool] = True

    def detect(self, series) -> np.ndarray:
        """Change points of a 1-D series or of a points x columns matrix (all columns)."""
        matrix = as_matrix(series)
        self.reset()
        self._cache = self._search_matrix(matrix)
        return self._cache

    def _search(self, series: np.ndarray) -> np.ndarray:
        return self._search_matrix(series[:, None])

    def _search_matrix(self, matrix: np.ndarray) -> np.ndarray:
        raise NotImplementedError


@dataclass
class PenalisedDetector(MatrixDetector):
    """Penalised search on the scaled series; one column or several."""

    penalty: float = 0.0
    """Penalty per change (per dimension); 0 means the MBIC default ``3 log N``."""
    refit_noise: int = 0
    """Times the unit noise is re-measured as the pooled deviation within the segments found,
    and the search rerun; 0 keeps R's ``scale()``, whose deviation includes the changes."""

    def _search_matrix(self, matrix: np.ndarray) -> np.ndarray:
        points, dimensions = matrix.shape
        if points < 2:
            return np.empty(0, np.int64)
        penalty = self.penalty * dimensions or mbic_penalty(points, dimensions)
        scaled = scale_columns(matrix)
        found = self.segment(NormalMeanCost(scaled), points, penalty)
        for _ in range(self.refit_noise):
            scaled = scaled / within_segment_deviation(scaled, found)
            found = self.segment(NormalMeanCost(scaled), points, penalty)
        return found

    def segment(self, cost: NormalMeanCost, points: int, penalty: float) -> np.ndarray:
        raise NotImplementedError


@dataclass
class Pelt(PenalisedDetector):
    name = "pelt"
    description = "PELT, normal mean cost, MBIC penalty (R changepoint's defaults)"

    def segment(self, cost, points, penalty):
        return pelt(cost, points, penalty)


@dataclass
class BinarySegmentation(PenalisedDetector):
    name = "binseg"
    description = "binary segmentation, normal mean cost, MBIC, Q = 5 (R changepoint's defaults)"

    max_changes: int = R_BINSEG_MAX_CHANGES

    def segment(self, cost, points, penalty):
        return binary_segmentation(cost, points, penalty, self.max_changes)

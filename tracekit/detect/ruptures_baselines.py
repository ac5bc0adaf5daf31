"""The two-window method of ruptures (Truong et al. 2020) behind the detectors' interface (PELT
and binary segmentation with R's defaults are in ``penalised.py``).

It sees the whole series, so ``update`` only stores points and ``changepoints`` runs the search
on what it has. Scale-free: the series is standardised by a robust noise estimate (MAD of first
differences, insensitive to the changes themselves), the cost is the Gaussian mean shift
(``l2``) and the penalty the BIC / SIC ``2 log n`` per change in noise-variance units.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tracekit.detect.base import MAD_TO_SIGMA, OfflineDetector


def robust_standardise(series: np.ndarray) -> np.ndarray:
    """Centre on the median and divide by the noise level seen in first differences."""
    noise = MAD_TO_SIGMA * float(np.median(np.abs(np.diff(series) - np.median(np.diff(series)))))
    noise /= math.sqrt(2)
    if not noise > 0:
        noise = float(np.std(series)) or 1.0
    return (series - np.median(series)) / noise


def _ruptures():
    """ruptures, imported on first use: with the scipy.stats it imports it costs 0.6 s to every
    process that imports the detectors (each Dask worker too), and most runs use none of these
    baselines."""
    import ruptures

    return ruptures


@dataclass
class RupturesDetector(OfflineDetector):
    """Offline ruptures search with a BIC penalty on the robustly standardised series."""

    model: str = "l2"
    min_size: int = 2
    jump: int = 5
    """Candidate positions on a grid of this step (ruptures' default)."""
    penalty: float = 0.0
    """Penalty per change; 0 means the BIC default 2 log n."""

    def _search(self, series: np.ndarray) -> np.ndarray:
        if series.size < 2 * self.min_size:
            return np.empty(0, np.int64)
        signal = robust_standardise(series)
        penalty = self.penalty or 2 * math.log(series.size)
        ends = self.algorithm(signal).predict(pen=penalty)
        return np.asarray(ends[:-1], dtype=np.int64)

    def algorithm(self, signal: np.ndarray):
        raise NotImplementedError


@dataclass
class TwoWindow(RupturesDetector):
    name = "rpt-window"
    description = "two adjacent sliding windows (ruptures Window)"

    width: int = 40

    def algorithm(self, signal):
        width = min(self.width, 2 * (signal.size // 2))
        return _ruptures().Window(width=width, model=self.model, min_size=self.min_size,
                               jump=self.jump).fit(signal)

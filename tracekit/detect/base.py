"""The one interface every change-point detector implements, and the normalisation they share.

A detector reads a numeric series and reports change points: the 0-based index of the first
point of each new segment. It works both ways with identical results:

- online: :meth:`Detector.update` takes one point and returns the change points that point
  confirms; :meth:`Detector.flush` ends the stream;
- offline: :meth:`Detector.detect` runs the same code over a whole series.

``changepoints`` is everything found so far, so after the last point and ``flush`` it equals what
``detect`` returns on the whole series. A change is dated at its first point but reported later
(the points a detector needs to be sure); :meth:`Detector.confirm` gives both, the alarm delay
being the difference.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from tracekit.core.errors import TracekitError

MAD_TO_SIGMA = 1.4826
"""Scale factor that turns a median absolute deviation into a Gaussian standard deviation."""


def as_series(values) -> np.ndarray:
    """``values`` as a 1-D float64 array; a clear error for missing or infinite values."""
    series = np.asarray(values, dtype=np.float64)
    if series.ndim != 1:
        raise TracekitError(f"a series must be one-dimensional, got shape {series.shape}")
    bad = np.flatnonzero(~np.isfinite(series))
    if bad.size:
        raise TracekitError(f"series has {bad.size} missing or infinite values (first at index "
                            f"{bad[0]}); drop or fill them first")
    return series


@dataclass
class Detector(ABC):
    """Online change-point detector; subclasses are dataclasses whose fields are parameters."""

    name: ClassVar[str]
    description: ClassVar[str]

    def __post_init__(self) -> None:
        self.reset()

    @abstractmethod
    def reset(self) -> None:
        """Forget every point seen so far."""

    @abstractmethod
    def update(self, x: float) -> list[int]:
        """Take the next point; return the change points it confirms (possibly none)."""

    def flush(self) -> list[int]:
        """End of the stream: return change points that were waiting for more points."""
        return []

    @property
    @abstractmethod
    def changepoints(self) -> np.ndarray:
        """Every change point found so far, sorted, as int64 indices."""

    def detect(self, series) -> np.ndarray:
        """Change points of a whole series (the same code path as feeding it point by point)."""
        values = as_series(series)
        self.reset()
        for x in values.tolist():
            self.update(x)
        self.flush()
        return self.changepoints

    def confirm(self, series) -> tuple[np.ndarray, np.ndarray]:
        """Change points of a whole series fed point by point, sorted, and for each the index
        of the point whose ``update`` reported it (the last point for those only ``flush``
        reports): what an operator watching the job live would have seen, and when."""
        values = as_series(series)
        self.reset()
        found: list[int] = []
        confirmed: list[int] = []
        for index, x in enumerate(values.tolist()):
            reported = self.update(x)
            found += reported
            confirmed += [index] * len(reported)
        reported = self.flush()
        found += reported
        confirmed += [values.size - 1] * len(reported)
        order = np.argsort(found, kind="stable")
        return (np.asarray(found, dtype=np.int64)[order],
                np.asarray(confirmed, dtype=np.int64)[order])


@dataclass
class OfflineDetector(Detector):
    """A detector that needs the whole series: ``update`` only buffers the point, and
    ``changepoints`` searches everything buffered so far (cached until the next point)."""

    def reset(self) -> None:
        self._values: list[float] = []
        self._cache: np.ndarray | None = None

    def update(self, x: float) -> list[int]:
        self._values.append(x)
        self._cache = None
        return []

    def flush(self) -> list[int]:
        """Every change point: an offline search reports only once the series has ended."""
        return self.changepoints.tolist()

    @property
    def changepoints(self) -> np.ndarray:
        if self._cache is None:
            self._cache = self._search(np.asarray(self._values, dtype=np.float64))
        return self._cache

    def detect(self, series) -> np.ndarray:
        self.reset()
        self._values = as_series(series).tolist()
        return self.changepoints

    @abstractmethod
    def _search(self, series: np.ndarray) -> np.ndarray:
        """Change points of the whole buffered series."""


def median(values) -> float:
    """Median of a 1-D series: ``np.median`` without its per-call checks, which cost several
    times the selection itself on the few points verification takes thousands of medians of
    (same value)."""
    values = np.asarray(values, dtype=np.float64)
    half = values.size // 2
    if values.size % 2:
        return float(np.partition(values, half)[half])
    low, high = np.partition(values, (half - 1, half))[half - 1 : half + 1]
    return float(low + high) / 2.0


def reference_level(warmup: np.ndarray, min_noise: float) -> tuple[np.ndarray, np.ndarray]:
    """Healthy level and relative noise of each series from its first points (last axis).

    The level is the median and the noise the robust relative spread (MAD), floored at
    ``min_noise``. Dividing by a level measured on the series itself makes detectors independent
    of the unit (seconds or milliseconds) and, unlike whole-series standardisation, it is known
    after a short warm-up, so online and offline agree. A few slow first iterations (compilation,
    allocator warm-up) do not move a median.
    """
    level = np.median(warmup, axis=-1)
    if not np.all(level > 0):
        raise TracekitError("iteration-time detectors need a positive series; a warm-up median "
                            f"is {float(np.min(level))}")
    spread = MAD_TO_SIGMA * np.median(np.abs(warmup - level[..., None]), axis=-1) / level
    return level, np.maximum(spread, min_noise)

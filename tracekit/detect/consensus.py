"""The default of ``tracekit changepoints``: the changes two unlike detectors agree on.

PELT with R's defaults (``penalised.py``) measures the noise by the whole series' deviation,
which the changes themselves inflate, so it misses the smaller ones; re-measured within the
segments it finds (``refit_noise = 1``) it finds them, and also splits trends and seasonal
swings, where a mean-shift model with one noise level is wrong. Textbook BOCD (``bocd-map``,
Normal-Gamma: every segment its own noise level) errs elsewhere: it splits outliers and
variance changes off. A change both report, dated within ``agreement`` points of each other, is
one neither model's misfit explains. It is dated where PELT puts it (the likelihood's optimum).

Several columns: PELT reads them together; BOCD votes with the changes it finds in any column.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from tracekit.detect.base import OfflineDetector
from tracekit.detect.bocd_map import BocdMap
from tracekit.detect.penalised import Pelt, as_matrix

AGREEMENT_POINTS = 5
"""Two detectors date one change within this many points of each other: TCPD's tolerance for
a human annotation (van den Burg & Williams 2020), whose annotators dated changes by eye."""


@dataclass
class Consensus(OfflineDetector):
    name = "consensus"
    description = "changes PELT (noise within segments) and textbook BOCD both find (default)"

    multivariate: ClassVar[bool] = True

    agreement: int = AGREEMENT_POINTS

    def detect(self, series) -> np.ndarray:
        """Change points of a 1-D series or of a points x columns matrix (all columns)."""
        matrix = as_matrix(series)
        self.reset()
        self._cache = self._search_matrix(matrix)
        return self._cache

    def _search(self, series: np.ndarray) -> np.ndarray:
        return self._search_matrix(series[:, None])

    def _search_matrix(self, matrix: np.ndarray) -> np.ndarray:
        proposed = Pelt(refit_noise=1).detect(matrix)
        votes = np.unique(np.concatenate([BocdMap().detect(c) for c in matrix.T]))
        if not votes.size:
            return votes.astype(np.int64)
        nearest = np.abs(proposed[:, None] - votes[None, :]).min(axis=1)
        return proposed[nearest <= self.agreement]

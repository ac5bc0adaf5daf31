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

import numpy as np

from tracekit.detect.bocd_map import BocdMap
from tracekit.detect.penalised import MatrixDetector, Pelt

AGREEMENT_POINTS = 5
"""Two detectors date one change within this many points of each other: TCPD's tolerance for
a human annotation (van den Burg & Williams 2020), whose annotators dated changes by eye."""


@dataclass
class Consensus(MatrixDetector):
    name = "consensus"
    description = "changes PELT (noise within segments) and textbook BOCD both find (default)"

    agreement: int = AGREEMENT_POINTS

    def _search_matrix(self, matrix: np.ndarray) -> np.ndarray:
        proposed = Pelt(refit_noise=1).detect(matrix)
        votes = np.unique(np.concatenate([BocdMap().detect(c) for c in matrix.T]))
        if not votes.size:
            return votes.astype(np.int64)
        nearest = np.abs(proposed[:, None] - votes[None, :]).min(axis=1)
        return proposed[nearest <= self.agreement]

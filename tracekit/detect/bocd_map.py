"""Textbook BOCD with the maximum-a-posteriori segmentation of R's ``ocp`` package
(Pagotto 2019, ``onlineCPD(...)$changepoint_lists$maxCPs``), as the TCPD benchmark runs it
(van den Burg & Williams 2020): series standardised by its mean and sample standard deviation,
hazard 1/100, Normal-Gamma prior (mu0 = 0, kappa = 1, alpha = 1, beta = 1), run lengths whose
tail probability is below 1e-4 truncated.

The recursion and the segmentation follow ocp step by step, so anyone can check the result
against R: at point t the best segmentation ending at t is, over the surviving run lengths r,
the best segmentation ending where the run starts plus ``log P(r_t = r | x_1:t)``; each
position keeps a back-pointer and the change points are read back from the last point. The only
deviation is that the Student-t density is computed in log space (ocp exponentiates first, which
underflows to an error on extreme points).

Whole-series standardisation needs the whole series, so online this detector standardises with
the statistics of the points seen so far; use ``detect`` (or ``flush``) for the TCPD result.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import gammaln

from tracekit.detect.base import OfflineDetector
from tracekit.detect.bocd import DEFAULT_HAZARD, NormalGamma

OCP_TRUNCATION = 1e-4
"""Run lengths whose tail probability is below this are dropped (ocp ``truncRlim`` as TCPD sets
it, "as suggested by the paper")."""

TEXTBOOK_PRIOR = NormalGamma(mu0=0.0, kappa0=1.0, alpha0=1.0, beta0=1.0)
"""TCPD's BOCPD default prior on the standardised series."""

DOUBLE_XMIN = np.finfo(np.float64).tiny
"""R's ``.Machine$double.xmin``: ocp clamps probabilities there to keep logs finite."""


def standardise(series: np.ndarray) -> np.ndarray:
    """R's ``scale()``: centre on the mean, divide by the sample standard deviation."""
    spread = float(np.std(series, ddof=1)) if series.size > 1 else 0.0
    return (series - series.mean()) / (spread if spread > 0 else 1.0)


def map_changepoints(series: np.ndarray, hazard: float = DEFAULT_HAZARD,
                     prior: NormalGamma = TEXTBOOK_PRIOR,
                     truncation: float = OCP_TRUNCATION) -> np.ndarray:
    """ocp's ``maxCPs`` for a (standardised) series, as 0-based first indices of new segments."""
    points = series.size
    run_prob = np.ones(1)  # P(r | x_1:t), index = run length
    mu, kappa = np.array([prior.mu0]), np.array([prior.kappa0])
    alpha, beta = np.array([prior.alpha0]), np.array([prior.beta0])
    # ocp's 1-based ``probmaxes`` / ``logprobcps`` layout: position t + 2 holds the best
    # segmentation after point t (its log probability and, in back, the start of its last
    # segment); position 1 is the empty root. ocp pairs a run starting at x_j with position j,
    # and so do we.
    best = np.zeros(points + 3)
    back = np.zeros(points + 3, dtype=np.int64)
    back[2] = 1
    for t in range(1, points + 1):
        if run_prob.size > 1:
            keep = max(int(np.count_nonzero(np.cumsum(run_prob[::-1])[::-1] >= truncation)), 1)
            run_prob, mu, kappa = run_prob[:keep], mu[:keep], kappa[:keep]
            alpha, beta = alpha[:keep], beta[:keep]
        x = series[t - 1]
        scale2 = beta * (kappa + 1) / (alpha * kappa)
        nu = 2 * alpha
        log_pred = (gammaln(nu / 2 + 0.5) - gammaln(nu / 2) - 0.5 * np.log(nu * np.pi * scale2)
                    - (nu + 1) / 2 * np.log1p((x - mu) ** 2 / (nu * scale2)))
        joint = np.exp(np.maximum(np.log(run_prob) + log_pred, np.log(DOUBLE_XMIN)))
        new = np.concatenate(([joint.sum() * hazard], joint * (1 - hazard)))
        new /= new.sum()
        new = np.maximum(new, DOUBLE_XMIN)
        beta = np.concatenate(([prior.beta0], beta + kappa * (x - mu) ** 2 / (2 * (kappa + 1))))
        mu = np.concatenate(([prior.mu0], (kappa * mu + x) / (kappa + 1)))
        kappa = np.concatenate(([prior.kappa0], kappa + 1))
        alpha = np.concatenate(([prior.alpha0], alpha + 0.5))
        length = run_prob.size
        # candidate start positions t + 1 - length .. t + 1, i.e. run lengths length .. 0
        scores = best[t + 1 - length : t + 2] + np.log(new[::-1])
        choice = int(np.argmax(scores))  # first maximum, as R's which.max
        best[t + 2] = scores[choice]
        back[t + 2] = t + 1 - length + choice
        run_prob = new
    starts = []
    position = back[points + 2]
    while position > 1:
        starts.append(position)
        position = back[position]
    return np.asarray(sorted(p - 1 for p in starts if p <= points), dtype=np.int64)


@dataclass
class BocdMap(OfflineDetector):
    """BOCD returning the MAP segmentation exactly as R's ocp does under TCPD's defaults."""

    name = "bocd-map"
    description = "textbook BOCD, MAP segmentation of R's ocp (TCPD defaults)"

    hazard: float = DEFAULT_HAZARD
    truncation: float = OCP_TRUNCATION
    mu0: float = 0.0
    kappa0: float = 1.0
    alpha0: float = 1.0
    beta0: float = 1.0

    def _search(self, series: np.ndarray) -> np.ndarray:
        prior = NormalGamma(self.mu0, self.kappa0, self.alpha0, self.beta0)
        return map_changepoints(standardise(series), self.hazard, prior, self.truncation)

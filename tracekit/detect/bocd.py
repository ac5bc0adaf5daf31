"""Bayesian online change-point detection (Adams & MacKay 2007, arXiv:0710.3742).

Observations are Gaussian with unknown mean and variance (Normal-Gamma prior, Student-t
predictive), the hazard is constant, and everything is computed in log space. The run-length
posterior keeps only run lengths whose probability is not negligible (at most
``max_run_lengths`` of them), so the cost per point is bounded and the total cost is linear in
the series length. Several series (the ranks of a job) step through time together as rows of one
array, which is how a whole job reaches its throughput.

The reporting pitfall. In the textbook recursion the change mass at time t is
``H * sum_r P(r_{t-1}, x_1:t-1) * pi_t(r)``, which is exactly ``H * P(x_t | x_1:t-1)``, so after
normalisation ``P(r_t = 0 | x_1:t) = H`` whatever the data: the published rule "report when
P(r_t = 0) > 0.9" never fires. We report instead through the probability that the current run is
short, ``P(1 <= r_t <= short_run | x_1:t)``: it rises above the threshold within one or two
points of a real change (the long run can no longer explain the data) and its arg-max locates
the change (``t - r + 1``). A change is reported once, at its first point.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.special import gammaln

from tracekit.detect.base import Detector, as_series, reference_level
from tracekit.detect.bocd_kernel import BoundSteps, compiled

PAPER_THRESHOLD = 0.9
"""Greyhound (ATC 2025) reports a change when the change probability exceeds 0.9."""

DEFAULT_HAZARD = 1 / 100
"""Prior probability of a change at each point: one change per 100 points on average, the
hazard of the ocp R package and of the TCPD benchmark's BOCPD default."""


@dataclass(frozen=True)
class NormalGamma:
    """Normal-Gamma prior on a segment's mean and precision (in normalised units)."""

    mu0: float = 0.0
    kappa0: float = 1.0
    alpha0: float = 1.0
    beta0: float = 1.0


class _StudentConstants:
    """``log Gamma(a + 1/2) - log Gamma(a) - log(2 a pi) / 2`` for ``a = alpha0 + n/2``, by run
    length n, grown on demand (one gather per step instead of two lgamma calls)."""

    def __init__(self, alpha0: float):
        self.alpha0 = alpha0
        self.table = np.empty(0)

    def __call__(self, n: np.ndarray) -> np.ndarray:
        self.ensure(int(n.max()) + 1)
        return self.table[n]

    def ensure(self, needed: int) -> None:
        """Grow the table to at least ``needed`` run lengths."""
        if needed > self.table.size:
            size = max(needed, 2 * self.table.size, 1024)
            alpha = self.alpha0 + 0.5 * np.arange(size)
            self.table = gammaln(alpha + 0.5) - gammaln(alpha) - 0.5 * np.log(2 * alpha * np.pi)


class RunLengthPosterior:
    """The run-length posterior of ``n_series`` series stepped together.

    Column j of every array is the run that started at the same time in every series (a new
    column is appended at each step), so the run length ``n`` is shared by all rows. A column is
    dropped once its probability is below ``prune`` in every series; when more than
    ``max_run_lengths`` remain, the least probable go.
    """

    def __init__(self, n_series: int, hazard: float, prior: NormalGamma, prune: float,
                 max_run_lengths: int):
        self.prior = prior
        self.log_hazard = math.log(hazard)
        self.log_growth = math.log1p(-hazard)
        self.log_prune = math.log(prune)
        self.max_run_lengths = max_run_lengths
        self.constants = _StudentConstants(prior.alpha0)
        capacity = 2 * max_run_lengths + 2
        self.log_prob = np.full((n_series, capacity), -np.inf)
        self.mu = np.zeros((n_series, capacity))
        self.beta = np.zeros((n_series, capacity))
        self.n = np.zeros(capacity, dtype=np.int64)
        self.size = 0
        self._append()
        self.log_prob[:, 0] = 0.0

    def _append(self) -> None:
        """A new run (no points yet) with the prior and probability H."""
        if self.size == self.n.size:
            self._compact()
        j = self.size
        self.log_prob[:, j] = self.log_hazard
        self.mu[:, j] = self.prior.mu0
        self.beta[:, j] = self.prior.beta0
        self.n[j] = 0
        self.size += 1

    def _compact(self) -> None:
        size = self.size
        best = self.log_prob[:, :size].max(axis=0)
        keep = np.flatnonzero(best >= self.log_prune)
        if keep.size > self.max_run_lengths:
            top = np.argpartition(best[keep], -self.max_run_lengths)[-self.max_run_lengths:]
            keep = np.sort(keep[top])
        for array in (self.log_prob, self.mu, self.beta):
            array[:, : keep.size] = array[:, keep]
        self.n[: keep.size] = self.n[keep]
        self.size = keep.size

    def step(self, z: np.ndarray) -> None:
        """Absorb one point per series (``z`` has one value per row)."""
        k = self.size
        n = self.n[:k]
        kappa = self.prior.kappa0 + n
        alpha = self.prior.alpha0 + 0.5 * n
        mu, beta = self.mu[:, :k], self.beta[:, :k]
        deviation = z[:, None] - mu
        scale2 = beta * ((kappa + 1) / (alpha * kappa))
        log_pred = (self.constants(n) - 0.5 * np.log(scale2)
                    - (alpha + 0.5) * np.log1p(deviation * deviation / (2 * alpha * scale2)))
        joint = self.log_prob[:, :k] + log_pred
        top = joint.max(axis=1, keepdims=True)
        log_evidence = top + np.log(np.exp(joint - top).sum(axis=1, keepdims=True))
        # Growth keeps (1 - H) of the mass and the new run gets H: already normalised.
        self.log_prob[:, :k] = joint - log_evidence + self.log_growth
        beta += kappa * deviation * deviation / (2 * (kappa + 1))
        mu += deviation / (kappa + 1)
        n += 1
        self._append()

    def short_run(self, max_run: int) -> tuple[np.ndarray, np.ndarray]:
        """``P(1 <= r <= max_run)`` per series and the most probable such run length (0 when no
        run that short survives)."""
        n = self.n[: self.size]
        first = int(np.searchsorted(-n, -max_run))  # columns are in decreasing n
        short = self.log_prob[:, first : self.size - 1]
        if short.shape[1] == 0:
            return np.zeros(self.log_prob.shape[0]), np.zeros(self.log_prob.shape[0], np.int64)
        return np.exp(short).sum(axis=1), n[first + short.argmax(axis=1)]


@dataclass
class BocdRun:
    """BOCD over ``n_series`` series that advance together, with the alarm rule."""

    detector: Bocd
    n_series: int
    t: int = 0
    posterior: RunLengthPosterior = field(init=False)
    last_start: np.ndarray = field(init=False)
    steps: BoundSteps | None = field(init=False, default=None)
    """The C recursion bound to this run's arrays, once it has stepped."""

    def __post_init__(self) -> None:
        d = self.detector
        self.posterior = RunLengthPosterior(self.n_series, d.hazard, d.prior, d.prune,
                                            d.max_run_lengths)
        self.last_start = np.zeros(self.n_series, np.int64)

    def advance_block(self, z: np.ndarray) -> np.ndarray:
        """Absorb ``z[:, i]`` (one normalised point per series) for every i; the change start
        per series and point, -1 for none. Compiled where a C compiler is installed."""
        kernel = compiled()
        if kernel is None:
            return np.column_stack([self.advance(z[:, i]) for i in range(z.shape[1])])
        d, p = self.detector, self.posterior
        if self.steps is None:
            self.steps = kernel(
                p.log_prob, p.mu, p.beta, p.n, self.last_start,
                np.array([d.prior.mu0, d.prior.kappa0, d.prior.alpha0, d.prior.beta0]),
                np.array([p.log_hazard, p.log_growth, p.log_prune, d.threshold]),
                np.array([d.max_run_lengths, d.short_run], np.int64))
        p.constants.ensure(int(p.n[: p.size].max()) + z.shape[1] + 1)
        starts = np.empty(z.shape, np.int64)
        p.size, self.t = self.steps(z, p.size, self.t, p.constants.table, starts)
        return starts

    def advance(self, z: np.ndarray) -> np.ndarray:
        """Absorb one normalised point per series with numpy; the change start per series,
        -1 for none."""
        d = self.detector
        self.posterior.step(z)
        probability, run = self.posterior.short_run(d.short_run)
        start = self.t - run + 1
        self.t += 1
        alarm = (probability > d.threshold) & (start > self.last_start) & (self.t > d.short_run)
        self.last_start = np.where(alarm, start, self.last_start)
        return np.where(alarm, start, -1)


@dataclass
class Bocd(Detector):
    """Textbook BOCD on the series normalised by its warm-up level and noise."""

    name = "bocd"
    description = "Bayesian online change-point detection (Adams & MacKay 2007)"

    hazard: float = DEFAULT_HAZARD
    threshold: float = PAPER_THRESHOLD
    short_run: int = 5
    """A change is reported when P(run length <= short_run) exceeds the threshold."""
    warmup: int = 20
    """Points used to measure the healthy level and noise that normalise the series."""
    min_noise: float = 0.002
    """Floor of the relative noise (0.2 %), so a perfectly flat warm-up does not blow up z."""
    prune: float = 1e-4
    """Run lengths below this probability in every series are dropped (the ocp package and the
    TCPD benchmark truncate at the same 1e-4)."""
    max_run_lengths: int = 32
    """At most this many run lengths survive a compaction: bounds the cost per point."""

    @property
    def prior(self) -> NormalGamma:
        return NormalGamma()

    def reset(self) -> None:
        self._values: list[float] = []
        self._run: BocdRun | None = None
        self._level = self._noise = 1.0
        self._found: list[int] = []

    @property
    def changepoints(self) -> np.ndarray:
        return np.asarray(self._found, dtype=np.int64)

    def _start(self) -> list[int]:
        warmup = np.asarray(self._values)
        level, noise = reference_level(warmup[None, :], self.min_noise)
        self._level, self._noise = float(level[0]), float(noise[0])
        self._run = BocdRun(self, 1)
        return self._advance(np.asarray(self._values))

    def _advance(self, x: np.ndarray) -> list[int]:
        z = ((x / self._level - 1.0) / self._noise)[None, :]
        starts = self._run.advance_block(z)[0]
        found = starts[starts >= 0].tolist()
        self._found += found
        return found

    def update(self, x: float) -> list[int]:
        self._values.append(x)
        if self._run is not None:
            return self._advance(np.array([x]))
        return self._start() if len(self._values) == self.warmup else []

    def flush(self) -> list[int]:
        return self._start() if self._run is None and len(self._values) > 1 else []

    def detect(self, series) -> np.ndarray:
        self.reset()
        self._found = [int(c) for c in self.detect_many(as_series(series)[None, :])[0]]
        return self.changepoints

    def detect_many(self, matrix: np.ndarray) -> list[np.ndarray]:
        """Change points of every row of ``matrix`` (series of equal length, e.g. the ranks of
        one job), stepping all rows together: one array operation per point for the whole job."""
        return [np.asarray([start for start, _ in row], dtype=np.int64)
                for row in self.alarms_many(matrix)]

    def alarms_many(self, matrix: np.ndarray) -> list[list[tuple[int, int]]]:
        """Per row, each reported change as (first point of the new segment, index of the point
        that raised the alarm)."""
        values = np.asarray(matrix, dtype=np.float64)
        rows, points = values.shape
        if points < 2:
            return [[] for _ in range(rows)]
        level, noise = reference_level(values[:, : min(self.warmup, points)], self.min_noise)
        z = (values / level[:, None] - 1.0) / noise[:, None]
        starts = BocdRun(self, rows).advance_block(z)
        found: list[list[tuple[int, int]]] = [[] for _ in range(rows)]
        for row, t in zip(*np.nonzero(starts >= 0), strict=True):
            found[row].append((int(starts[row, t]), int(t)))
        return found

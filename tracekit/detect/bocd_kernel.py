"""The BOCD recursion compiled with numba: the same arithmetic as
:class:`tracekit.detect.bocd.RunLengthPosterior` and :class:`~tracekit.detect.bocd.BocdRun`,
one loop over run lengths per point instead of a dozen numpy calls.

Per point the vectorised numpy recursion pays ~20 numpy calls of fixed overhead whatever the
number of surviving run lengths (~30), which caps one series near 15-20k points/s. Compiled,
the same recursion costs what its arithmetic costs. It is built once ahead of time into a
cached extension module (:mod:`tracekit.core.compiled`: processes that detect, Dask workers among
them, do not import numba), else JIT-compiled. numba is optional: without it
:func:`compiled` returns None and the numpy recursion runs, giving the same change points
(tested on every labeled series when numba is installed).

Online and offline both call :func:`steps` (one point or a whole block), so they run the very
same machine code and agree bit for bit.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from tracekit.core import compiled as compiled_kernels

OPTIONS = {"error_model": "numpy"}
"""numba compiler flags of both builds: a zero divisor gives inf / nan as in numpy (the
recursion meets one when a run's scale underflows), not an exception."""


def _steps(z, log_prob, mu, beta, n, size, t, last_start, constants, prior, rates, limits,
           starts):
    """Absorb ``z[:, i]`` for every i; write each alarm's change start into ``starts[:, i]``
    (-1 for none); return the new (size, t).

    ``prior`` = (mu0, kappa0, alpha0, beta0); ``rates`` = (log hazard, log(1 - hazard),
    log prune, threshold); ``limits`` = (max run lengths, short run). Arrays are updated in
    place with the layout of ``RunLengthPosterior`` (columns in decreasing run length).
    """
    rows, points = z.shape
    capacity = n.size
    mu0, kappa0, alpha0, beta0 = prior[0], prior[1], prior[2], prior[3]
    log_hazard, log_growth, log_prune, threshold = rates[0], rates[1], rates[2], rates[3]
    max_runs, short_run = limits[0], limits[1]
    for i in range(points):
        for row in range(rows):
            x = z[row, i]
            top = -np.inf
            for j in range(size):
                kappa = kappa0 + n[j]
                alpha = alpha0 + 0.5 * n[j]
                deviation = x - mu[row, j]
                scale2 = beta[row, j] * ((kappa + 1) / (alpha * kappa))
                joint = log_prob[row, j] + (
                    constants[n[j]] - 0.5 * math.log(scale2)
                    - (alpha + 0.5) * math.log1p(deviation * deviation / (2 * alpha * scale2)))
                log_prob[row, j] = joint
                top = max(top, joint)
                beta[row, j] += kappa * deviation * deviation / (2 * (kappa + 1))
                mu[row, j] += deviation / (kappa + 1)
            total = 0.0
            for j in range(size):
                total += math.exp(log_prob[row, j] - top)
            log_evidence = top + math.log(total)
            for j in range(size):
                log_prob[row, j] = log_prob[row, j] - log_evidence + log_growth
        for j in range(size):
            n[j] += 1
        if size == capacity:  # compaction: drop negligible run lengths, keep the likeliest
            best = np.full(size, -np.inf)
            for j in range(size):
                for row in range(rows):
                    best[j] = max(best[j], log_prob[row, j])
            keep = np.flatnonzero(best >= log_prune)
            if keep.size > max_runs:
                keep = np.sort(keep[np.argsort(best[keep], kind="mergesort")[-max_runs:]])
            for k in range(keep.size):
                j = keep[k]
                n[k] = n[j]
                for row in range(rows):
                    log_prob[row, k] = log_prob[row, j]
                    mu[row, k] = mu[row, j]
                    beta[row, k] = beta[row, j]
            size = keep.size
        n[size] = 0
        for row in range(rows):
            log_prob[row, size] = log_hazard
            mu[row, size] = mu0
            beta[row, size] = beta0
        size += 1
        first = 0  # first column with a run no longer than short_run
        while n[first] > short_run:
            first += 1
        t += 1
        for row in range(rows):
            starts[row, i] = -1
            if first >= size - 1:
                continue
            probability, best_j = 0.0, first
            for j in range(first, size - 1):
                probability += math.exp(log_prob[row, j])
                if log_prob[row, j] > log_prob[row, best_j]:
                    best_j = j
            start = t - n[best_j]
            if probability > threshold and start > last_start[row] and t > short_run:
                last_start[row] = start
                starts[row, i] = start
    return size, t


_compiled = None


def compiled():
    """The compiled :func:`_steps`, or None when numba is not installed (built once, cached
    on disk beside the module)."""
    global _compiled
    if _compiled is None:
        _compiled = compiled_kernels.kernel("bocd_steps", Path(__file__), _ahead_of_time,
                                            OPTIONS)
    return _compiled


def _ahead_of_time():
    """:func:`_steps` and its signature, for :mod:`tracekit.core.compiled` to build."""
    from numba import types

    def array(dtype, dimensions, readonly=False):
        return types.Array(dtype, dimensions, "C", readonly=readonly)

    matrix, counts = array(types.float64, 2), array(types.int64, 1)
    vector = array(types.float64, 1)
    signature = types.UniTuple(types.int64, 2)(
        array(types.float64, 2, readonly=True), matrix, matrix, matrix, counts, types.int64,
        types.int64, counts, vector, vector, vector, counts, array(types.int64, 2))
    return _steps, signature

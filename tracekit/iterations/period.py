"""The period of one rank's collective-call sequence, and the call that marks it.

The published baseline (Greyhound, ATC 2025) takes the smallest lag whose autocorrelation of the
call sequence exceeds 0.95. A call sequence is categorical, so :func:`match_acf` measures the
share of calls that equal the call ``k`` places later (the sum of per-symbol indicator
autocorrelations, computed with FFTs).

That share collapses when records are dropped (every dropped call shifts the alignment of all
pairs that straddle it) and is high at sub-periods (a layer's all-reduces repeat every few calls).
:func:`find_period` therefore decides on *anchored* candidates: a symbol that occurs once per
period at regular spacing cuts the sequence into intervals, and the candidate is scored by the
share of calls that fit the per-interval pattern (its *coverage*), which drops and insertions
only dent locally. The smallest candidate whose coverage is within :data:`COVERAGE_SLACK` of the
best wins, so sub-periods lose (the once-per-iteration calls do not fit them) and multiples of
the period (logging every N iterations) do not win over the period itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ACF_THRESHOLD = 0.95
"""M: the autocorrelation a lag must exceed to be a period (Greyhound, USENIX ATC 2025, §4.1)."""

ACF_MAX_SYMBOLS = 64
"""The ACF sums exact indicator autocorrelations of this many most frequent symbols; rarer
symbols (each well under 1 % of calls) are left out, which can only lower the ACF."""

ACF_WINDOW_PERIODS = 8
ACF_WINDOW_CALLS = 1 << 16
"""The baseline ACF looks at the first ``ACF_WINDOW_PERIODS`` periods, at most this many calls:
lags up to two periods then rest on at least six periods of pairs, and the FFT cost per rank
stays bounded."""

GAP_TOLERANCE = 0.05
"""A gap between two occurrences of a symbol is regular when it is within this share (or 2
calls) of the symbol's median gap: room for a few dropped records per period."""

GAP_SAMPLE = 8192
"""Median and regularity of a symbol's gaps are estimated from at most this many gaps, evenly
spread (the most frequent symbol of a long trace has millions)."""

MIN_REGULAR_SHARE = 0.8
"""A symbol is an anchor candidate when at least this share of its gaps are regular."""

MIN_ANCHORS = 4
"""Fewest occurrences of an anchor (so at least three whole intervals) to call a rank periodic."""

COVERAGE_SLACK = 0.01
"""A smaller candidate period wins when its coverage is within this of the best coverage."""

MIN_COVERAGE = 0.5
"""Below this coverage no candidate explains the sequence: the rank has no periodic structure."""


@dataclass(frozen=True)
class Period:
    """A rank's period: the anchor symbol, calls per iteration and the per-iteration pattern."""

    anchor: int
    """Symbol code that occurs once per iteration and marks the boundaries."""
    calls: int
    """Calls per iteration (sum of the pattern)."""
    pattern: dict[int, int]
    """Symbol code -> calls of that symbol in one iteration."""
    coverage: float
    """Share of calls (between the first and last anchor) that fit the pattern."""
    acf: float
    """Match autocorrelation at lag ``calls`` over the baseline window (1.0 = exactly periodic)."""
    baseline_lag: int | None
    """The published baseline's period: smallest lag whose ACF exceeds :data:`ACF_THRESHOLD`."""


def match_acf(symbols: np.ndarray, max_lag: int) -> np.ndarray:
    """Share of positions ``i`` with ``symbols[i] == symbols[i + k]`` for ``k = 0 .. max_lag``.

    Sum over symbols of the autocorrelation of each symbol's 0/1 indicator, by FFT in
    O(S n log n) for S symbols, normalised by the ``n - k`` pairs at each lag.
    """
    n = len(symbols)
    max_lag = min(max_lag, n - 1)
    if n < 2 or max_lag < 1:
        return np.ones(max(max_lag + 1, 1))
    values, counts = np.unique(symbols, return_counts=True)
    top = values[np.argsort(counts)[::-1][:ACF_MAX_SYMBOLS]]
    size = 1 << int(np.ceil(np.log2(2 * n)))
    power = np.zeros(size // 2 + 1)
    for value in top:
        spectrum = np.fft.rfft((symbols == value).astype(np.float64), size)
        power += spectrum.real**2 + spectrum.imag**2
    matches = np.fft.irfft(power, size)[: max_lag + 1]
    return np.rint(matches) / (n - np.arange(max_lag + 1))


def baseline_lag(acf: np.ndarray, threshold: float = ACF_THRESHOLD) -> int | None:
    """The smallest lag ``k >= 1`` whose ACF exceeds ``threshold`` (None when none does)."""
    above = np.flatnonzero(acf[1:] > threshold)
    return int(above[0]) + 1 if len(above) else None


def anchor_candidates(symbols: np.ndarray) -> dict[int, tuple[int, float]]:
    """Symbols whose occurrences are regularly spaced: symbol -> (median gap in calls, share
    of regular gaps)."""
    order = np.argsort(symbols, kind="stable")
    sorted_symbols = symbols[order]
    starts = np.flatnonzero(np.r_[True, sorted_symbols[1:] != sorted_symbols[:-1]])
    ends = np.r_[starts[1:], len(symbols)]
    found: dict[int, tuple[int, float]] = {}
    for start, end in zip(starts, ends, strict=True):
        if end - start < MIN_ANCHORS:
            continue
        gaps = np.diff(order[start:end])
        gaps = gaps[:: -(-len(gaps) // GAP_SAMPLE)]
        median_gap = int(np.median(gaps))
        regular = np.abs(gaps - median_gap) <= max(2, GAP_TOLERANCE * median_gap)
        share = float(regular.mean())
        if share >= MIN_REGULAR_SHARE and median_gap >= 1:
            found[int(sorted_symbols[start])] = (median_gap, share)
    return found


def interval_counts(symbols: np.ndarray, anchor: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions of ``anchor`` and the count of each symbol in each whole interval between
    consecutive anchors (rows: intervals, columns: symbol codes)."""
    positions = np.flatnonzero(symbols == anchor)
    first, last = positions[0], positions[-1]
    inside = symbols[first:last]
    interval = np.cumsum(inside == anchor) - 1
    width = int(symbols.max()) + 1
    counts = np.bincount(interval * width + inside, minlength=(len(positions) - 1) * width)
    return positions, counts.reshape(len(positions) - 1, width)


MODE_COUNT_CAP = 4096
"""Counts per interval above this are clipped when taking the mode (bounds its histogram)."""


def modal_pattern(counts: np.ndarray) -> np.ndarray:
    """Per symbol, the most common count per interval (zeros included)."""
    clipped = np.minimum(counts, MODE_COUNT_CAP)
    top = int(clipped.max()) + 1
    symbols = counts.shape[1]
    flat = (clipped + top * np.arange(symbols)).ravel()
    histogram = np.bincount(flat, minlength=top * symbols).reshape(symbols, top)
    return histogram.argmax(axis=1)


def interval_ratio(counts: np.ndarray, pattern: np.ndarray) -> np.ndarray:
    """Per interval, the median over the pattern's symbols of count / count per iteration: about
    how many iterations the interval holds. Dropped records and extra calls each move only a
    few symbols; an interval merged over a missing anchor moves them all."""
    symbols = np.flatnonzero(pattern)
    if not len(symbols):
        return np.ones(len(counts))
    return np.median(counts[:, symbols] / pattern[symbols], axis=1)


def coverage(counts: np.ndarray, pattern: np.ndarray) -> float:
    """Share of calls that fit the pattern, an interval holding ``k`` iterations allowing ``k``
    times the pattern: calls outside it (extra work) do not fit."""
    total = counts.sum()
    if not total:
        return 0.0
    repeats = np.maximum(np.rint(interval_ratio(counts, pattern)), 1)
    return float(np.minimum(counts, pattern * repeats[:, None]).sum() / total)


def find_period(
    symbols: np.ndarray,
    threshold: float = ACF_THRESHOLD,
    preference: np.ndarray | None = None,
) -> Period | None:
    """The period of ``symbols`` (one rank's call codes ``0 .. S-1`` in issue order), or None
    when no anchored candidate explains at least :data:`MIN_COVERAGE` of the calls.

    Candidates are scored with their most regular symbol; the anchor of the winner is then the
    symbol of that spacing with the highest ``preference`` (per symbol code; e.g. communicator
    size, so boundaries sit on the job-wide synchronisation), then the most regular.
    """
    symbols = np.asarray(symbols, dtype=np.int64)
    candidates = anchor_candidates(symbols)
    by_gap: dict[int, list[int]] = {}
    for symbol, (gap, _) in candidates.items():
        by_gap.setdefault(gap, []).append(symbol)
    scored = []
    for gap in sorted(by_gap):
        probe = max(by_gap[gap], key=lambda s: (candidates[s][1], -s))
        _, counts = interval_counts(symbols, probe)
        pattern = modal_pattern(counts)
        scored.append((gap, coverage(counts, pattern), pattern))
    if not scored:
        return None
    best = max(score for _, score, _ in scored)
    if best < MIN_COVERAGE:
        return None
    gap, score, pattern = next(s for s in scored if s[1] >= best - COVERAGE_SLACK)
    same = [s for s, (g, _) in candidates.items()
            if abs(g - gap) <= GAP_TOLERANCE * gap and pattern[s] == 1]
    rank = preference if preference is not None else np.zeros(int(symbols.max()) + 1)
    anchor = max(same or by_gap[gap], key=lambda s: (rank[s], candidates[s][1], -s))
    calls = int(pattern.sum())
    window = symbols[:min(ACF_WINDOW_CALLS, ACF_WINDOW_PERIODS * max(calls, 1))]
    acf = match_acf(window, min(len(window) - 1, max(calls, 1) * 2))
    return Period(
        anchor=anchor,
        calls=calls,
        pattern={int(s): int(c) for s, c in enumerate(pattern) if c},
        coverage=score,
        acf=float(acf[calls]) if calls < len(acf) else float("nan"),
        baseline_lag=baseline_lag(acf, threshold),
    )

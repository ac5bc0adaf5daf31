"""The period of one rank's collective-call sequence, and the call that marks it.

The published baseline (Greyhound, ATC 2025) takes the smallest lag whose autocorrelation of the
call sequence exceeds 0.95. A call sequence is categorical, so :func:`match_acf` measures the
share of calls that equal the call ``k`` places later (the sum of per-symbol indicator
autocorrelations, computed with FFTs).

That share collapses when records are dropped (every dropped call shifts the alignment of all
pairs that straddle it) and is high at sub-periods: when the TP all-reduces of a micro-batch
dominate, the few once-per-iteration calls (grad norm, loss, the timing barrier) cannot pull it
under 0.95 at the micro-batch lag. :func:`find_period` therefore works per signature: every
symbol that repeats regularly has its own period (``k`` occurrences every ``p`` calls, found
from the spacing of occurrences ``k`` apart), each own period is a candidate, and a candidate
is scored by its *coverage*: the sequence cut at one symbol of that period, the share of calls
that fit the per-interval pattern, which drops and insertions only dent locally. The period is
the smallest well-covering candidate at which the job-wide synchronisation (the steady symbol
on the largest communicator with the smallest payload) repeats, so the rare once-per-iteration
calls decide against sub-periods however few they are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

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
"""Two spacings of a signature agree when within this share (or one call) of each other: room
for a few dropped records per period, and no room for the micro-batch structure (a TP call
every call but one in four is not spaced regularly)."""

GAP_SAMPLE = 8192
"""Median and regularity of a symbol's gaps are estimated from at most this many gaps, evenly
spread (the most frequent symbol of a long trace has millions)."""

MIN_REGULAR_SHARE = 0.8
"""A symbol is spaced regularly when at least this share of its gaps agree with their median."""

MIN_ANCHORS = 4
"""Fewest periods (so at least three whole intervals) a symbol must span to call it steady."""

MAX_MULTIPLICITY = 32
"""A symbol may occur up to this many times per period with irregular gaps in between (the
found-inf and grad-norm all-reduces back to back, the TP all-reduces of a few micro-batches):
its occurrences ``k`` apart are then spaced regularly. Symbols that occur more often are
per-layer calls, regular on their own or not needed: the period is found from rarer ones."""

COVERAGE_SLACK = 0.01
"""A smaller candidate period wins when its coverage is within this of the best coverage."""

MIN_COVERAGE = 0.5
"""Below this coverage no candidate explains the sequence: the rank has no periodic structure."""


@dataclass(frozen=True)
class Spacing:
    """How a steady symbol repeats: ``multiplicity`` occurrences every ``calls`` calls."""

    calls: int
    multiplicity: int
    regular_share: float


@dataclass(frozen=True)
class Period:
    """A rank's period: the anchor symbol, calls per iteration and the per-iteration pattern."""

    anchor: int
    """Code that occurs once per iteration and marks the boundaries: a symbol, or (when the
    boundary symbol occurs several times per iteration) the extra code :func:`mark_anchor`
    gives its closing occurrence."""
    anchor_symbol: int
    """The symbol the boundary calls are."""
    multiplicity: int
    """Occurrences of ``anchor_symbol`` per iteration."""
    calls: int
    """Calls per iteration (sum of the pattern)."""
    pattern: dict[int, int]
    """Code -> calls of that code in one iteration."""
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


def _tolerance(calls: float) -> float:
    return max(1.0, GAP_TOLERANCE * calls)


RADIX_CODES = 1 << 16
"""Fewer distinct codes than this fit 16-bit sort keys."""


def steady_symbols(symbols: np.ndarray) -> dict[int, Spacing]:
    """Symbols that repeat regularly through the sequence, each with its own period: the
    smallest ``k`` at which occurrences ``k`` apart are regularly spaced, and that spacing.
    Bursts (evaluation, checkpoint, setup calls) are not regular at any ``k``."""
    # codes are 0 .. S-1: as 16-bit keys the stable sort is a radix sort, 5x faster than on
    # 64-bit ones (0.015 CPU-s of 540k calls)
    small = symbols.astype(np.uint16) if symbols.max() < RADIX_CODES else symbols
    order = np.argsort(small, kind="stable")
    sorted_symbols = symbols[order]
    starts = np.flatnonzero(np.r_[True, sorted_symbols[1:] != sorted_symbols[:-1]])
    ends = np.r_[starts[1:], len(symbols)]
    found: dict[int, Spacing] = {}
    for start, end in zip(starts, ends, strict=True):
        positions = order[start:end]
        for k in range(1, MAX_MULTIPLICITY + 1):
            if len(positions) < MIN_ANCHORS * k:
                break
            gaps = positions[k:] - positions[:-k]
            gaps = gaps[:: -(-len(gaps) // GAP_SAMPLE)]
            median_gap = int(np.median(gaps))
            share = float((np.abs(gaps - median_gap) <= _tolerance(median_gap)).mean())
            if share >= MIN_REGULAR_SHARE:
                found[int(sorted_symbols[start])] = Spacing(median_gap, k, share)
                break
    return found


def repeats_at(spacing: Spacing, calls: int) -> bool:
    """Whether a symbol of this spacing repeats every ``calls`` calls (its period divides it)."""
    times = round(calls / spacing.calls)
    return times >= 1 and abs(calls - times * spacing.calls) <= _tolerance(calls)


def mark_anchor(symbols: np.ndarray, symbol: int, multiplicity: int) -> tuple[np.ndarray, int]:
    """The sequence with one occurrence of ``symbol`` per period as its own code, and that
    code. With several occurrences per period the marked one is the *closing* one: the
    occurrence followed by the longest stretch without the symbol (the last all-reduce of the
    optimizer step), so the boundary sits where the iteration ends."""
    if multiplicity == 1:
        return symbols, symbol
    positions = np.flatnonzero(symbols == symbol)
    following = np.r_[np.diff(positions), len(symbols) - positions[-1]]
    # the longest stretch among the occurrences of one period either side; a tie (two
    # equally long stretches per period) marks both, and the split merges the intervals
    # that then hold no iteration
    reach = multiplicity - 1
    padded = np.pad(following, reach, constant_values=-1)
    closing = sliding_window_view(padded, 2 * reach + 1).max(axis=1) == following
    marked = symbols.copy()
    code = int(symbols.max()) + 1
    marked[positions[closing]] = code
    return marked, code


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
    when no candidate explains at least :data:`MIN_COVERAGE` of the calls.

    Every steady symbol's own period is a candidate, scored by its coverage with the most
    preferred symbol of that period as anchor (``preference`` per symbol code, e.g. the
    communicator size: boundaries go on the job-wide synchronisation). Among candidates within
    :data:`COVERAGE_SLACK` of the best, the period is the smallest at which the most preferred
    steady symbol repeats: a sub-period (a micro-batch) fails it even when the once-per-
    iteration calls are too few to dent the coverage, and a multiple (timers logged every N
    iterations) is not the smallest.
    """
    symbols = np.asarray(symbols, dtype=np.int64)
    rank = preference if preference is not None else np.zeros(int(symbols.max()) + 1)
    steady = steady_symbols(symbols)
    if not steady:
        return None
    scored = []
    for calls in _candidate_periods(steady):
        anchor = max((s for s, spacing in steady.items() if abs(spacing.calls - calls)
                      <= _tolerance(calls)),
                     key=lambda s: (rank[s], steady[s].regular_share, -s))
        marked, code = mark_anchor(symbols, anchor, steady[anchor].multiplicity)
        _, counts = interval_counts(marked, code)
        pattern = modal_pattern(counts)
        scored.append((calls, coverage(counts, pattern), pattern, anchor, code))
    best = max(score for _, score, *_ in scored)
    if best < MIN_COVERAGE:
        return None
    passing = [entry for entry in scored if entry[1] >= best - COVERAGE_SLACK]
    sync = steady[max(steady, key=lambda s: (rank[s], steady[s].regular_share, -s))]
    _, score, pattern, anchor, code = next(
        (entry for entry in passing if repeats_at(sync, entry[0])), passing[0])
    calls = int(pattern.sum())
    window = symbols[:min(ACF_WINDOW_CALLS, ACF_WINDOW_PERIODS * max(calls, 1))]
    acf = match_acf(window, min(len(window) - 1, max(calls, 1) * 2))
    return Period(
        anchor=code,
        anchor_symbol=anchor,
        multiplicity=steady[anchor].multiplicity,
        calls=calls,
        pattern={int(s): int(c) for s, c in enumerate(pattern) if c},
        coverage=score,
        acf=float(acf[calls]) if calls < len(acf) else float("nan"),
        baseline_lag=baseline_lag(acf, threshold),
    )


def _candidate_periods(steady: dict[int, Spacing]) -> list[int]:
    """The distinct own periods of the steady symbols, smallest first (periods within the
    tolerance of a smaller one are the same candidate)."""
    candidates: list[int] = []
    for calls in sorted({spacing.calls for spacing in steady.values()}):
        if not candidates or calls - candidates[-1] > _tolerance(candidates[-1]):
            candidates.append(calls)
    return candidates

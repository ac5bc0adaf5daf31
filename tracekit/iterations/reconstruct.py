"""Per-rank iteration times from the ``collectives`` table.

Each rank's calls, in issue order, become symbols (op, communicator size, bytes, peer); the
period and its anchor come from :mod:`tracekit.iterations.period`. Consecutive anchor calls
bound one iteration. An interval that holds the calls of several iterations (the anchor record
was dropped) is split at a secondary once-per-iteration call, shifted by its usual offset from
the anchor, or left out when none is there: iterations are never invented. A process restart
(new pid) starts a new segment with its own period, so a schedule change after a restart is
followed instead of drifting. Across ranks, the boundaries of the job-wide synchronisation are
one job-wide boundary each: one numbering for the job, each boundary at its last arrival.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from tracekit.core import schema
from tracekit.core.errors import TracekitError
from tracekit.core.parallel import (
    WORKER_LOSS,
    Executor,
    LocalExecutor,
    RankScans,
    map_all,
    partition_size,
    per_rank,
)
from tracekit.iterations.period import (
    ACF_THRESHOLD,
    Period,
    find_period,
    interval_counts,
    interval_ratio,
    mark_anchor,
)

SOURCE = "acf"
"""Value of ``iterations.source`` for reconstructed rows."""

QUALITY_OK = "ok"
"""Both boundaries are anchor calls and the calls between fit the pattern (some may be missing:
dropped records do not move a boundary)."""
QUALITY_DISTURBED = "disturbed"
"""Boundaries are anchor calls but extra calls ran in between (evaluation, logging, a changed
schedule): the duration includes work that is not a training iteration."""
QUALITY_RESYNC = "resync"
"""One boundary was placed from a secondary once-per-iteration call because the anchor record
is missing; accurate to that call's jitter."""

EXTRA_TOLERANCE = 0.05
"""An interval is disturbed when a symbol occurs more than this share above its modal count
(any call of a symbol outside the pattern counts): the mode of a frequent symbol sits a little
low when records are dropped."""

VARIANT_BYTES_OPS = ("alltoall",)
"""Ops whose payload varies from iteration to iteration (MoE token routing): their symbol
ignores bytes so they still repeat."""


@dataclass
class RankSummary:
    """What the reconstruction found on one rank (one segment per process run)."""

    rank: int
    calls: int
    period_calls: int | None = None
    pattern: str = ""
    iterations: int = 0
    recovered: int = 0
    """Iterations with a row (the rest are gaps: merged intervals that could not be split)."""
    mean_s: float | None = None
    acf: float | None = None
    baseline_lag: int | None = None
    segments: int = 1
    anchor_nranks: int | None = None
    """Communicator size of the boundary call (the job's largest: a job-wide synchronisation)."""
    warnings: list[str] = field(default_factory=list)

    @property
    def recovered_share(self) -> float:
        return self.recovered / self.iterations if self.iterations else 0.0


@dataclass
class Reconstruction:
    """Reconstructed ``iterations`` rows (canonical schema) and one summary per rank."""

    iterations: pl.DataFrame
    ranks: list[RankSummary]
    threshold: float = ACF_THRESHOLD
    """M of the published baseline the ranks' ``baseline_lag`` was taken with."""

    @property
    def warnings(self) -> list[str]:
        return [w for r in self.ranks for w in r.warnings]

    @property
    def periods(self) -> dict[int, int]:
        """Calls per iteration -> how many ranks have that period (ranks without one left out);
        PP stages and first / last stages issue different calls, so a job has several."""
        return dict(sorted(Counter(r.period_calls for r in self.ranks if r.period_calls).items()))

    @property
    def baseline_note(self) -> str | None:
        """One line naming the ranks where the published baseline (the smallest lag whose ACF
        exceeds M) is not the period, or None when it agrees everywhere."""
        off: dict[tuple[str, int], list[int]] = {}
        for r in self.ranks:
            if r.period_calls and r.baseline_lag != r.period_calls:
                lag = f"lag {r.baseline_lag}" if r.baseline_lag else "no such lag"
                off.setdefault((lag, r.period_calls), []).append(r.rank)
        if not off:
            return None
        parts = [f"{lag} where the period is {calls} calls on {_rank_list(ranks)}"
                 for (lag, calls), ranks in sorted(off.items(), key=lambda item: item[1][0])]
        return (f"the baseline (smallest lag with ACF > {self.threshold}) disagrees on "
                f"{sum(map(len, off.values()))} of {len(self.ranks)} ranks: " + "; ".join(parts))


RANKS_LISTED = 8
"""A note lists this many ranks by number, then how many more."""


def _rank_list(ranks: list[int]) -> str:
    listed = ", ".join(map(str, ranks[:RANKS_LISTED]))
    more = len(ranks) - RANKS_LISTED
    return f"rank{'s' if len(ranks) > 1 else ''} {listed}" + (f" and {more} more" if more > 0
                                                              else "")


def symbol_expr() -> pl.Expr:
    """The categorical symbol of a call: same op on a same-sized communicator moving the same
    bytes to the same peer. Communicator handles are left out, so a restart that recreates
    communicators keeps the symbols."""
    variant = pl.col("op").is_in(VARIANT_BYTES_OPS)
    size = pl.when(variant).then(None).otherwise(pl.col("bytes"))
    return pl.struct(pl.col("op"), pl.col("nranks"), size.alias("size"), pl.col("peer"))


RANKS_PER_BATCH = 16
"""Most ranks read from the table at a time: bounds memory on jobs of thousands of ranks while
the Parquet scan still skips the row groups of other ranks (fewer per batch when a cluster's
workers need more partitions, :func:`tracekit.core.parallel.partition_size`)."""


def reconstruct(
    collectives: pl.DataFrame | pl.LazyFrame | RankScans,
    threshold: float = ACF_THRESHOLD,
    executor: Executor | None = None,
    ranks: list[int] | None = None,
) -> Reconstruction:
    """Iteration rows (``source = "acf"``) and per-rank summaries for every rank in
    ``collectives`` (canonical schema; or one scan per rank,
    :func:`~tracekit.core.parallel.rank_scans`, so each rank reads its own parts).
    ``executor`` (default: a local loop) runs the batches of ranks; a batch that still fails
    after its retries fails the whole reconstruction with an error naming the rank and the
    cause (rows of some ranks only would be compared as if the others had none).
    ``ranks``: the ranks in ``collectives`` when known without reading it (a dataset's
    :meth:`~tracekit.core.dataset.Dataset.ranks`)."""
    frame = collectives.lazy() if isinstance(collectives, pl.DataFrame) else collectives
    if isinstance(frame, Mapping):
        ranks = sorted(frame) if ranks is None else ranks
    elif ranks is None:
        ranks = (frame.select(pl.col("rank").drop_nulls().unique().sort()).collect()
                 .to_series().to_list())
    executor = executor or LocalExecutor()
    size = partition_size(len(ranks), executor, RANKS_PER_BATCH)
    batches = [ranks[first:first + size] for first in range(0, len(ranks), size)]
    batches_done = map_all(
        executor, functools.partial(_reconstruct_batch, threshold=threshold),
        [(batch, list(per_rank(frame, batch).values())) for batch in batches],
        key=lambda partition: f"ranks {partition[0][0]}-{partition[0][-1]}")
    done = [rank for batch in batches_done for rank in batch]
    rows = [frame_rows for frame_rows, _ in done]
    summaries = [summary for _, summary in done]
    iterations = (pl.concat(rows) if rows else schema.table("iterations").empty())
    widest = max((s.anchor_nranks or 0 for s in summaries), default=0)
    synchronised = [s.rank for s in summaries if widest and s.anchor_nranks == widest]
    return Reconstruction(_number_job_wide(iterations, synchronised), summaries, threshold)


def _reconstruct_batch(
    partition: tuple[list[int], list[pl.LazyFrame]], threshold: float
) -> list[tuple[pl.DataFrame, RankSummary]]:
    """One batch of ranks (each rank's calls as a lazy scan): a partition of the work, run in
    this process or on a Dask worker. The ranks are read one at a time, so a worker holds one
    rank's calls, not the batch's (collecting a batch at once holds several times its size)."""
    batch, scans = partition
    done = []
    for rank, scan in zip(batch, scans, strict=True):
        part = _calls(scan)
        if part.count == 0:
            continue
        try:
            done.append(_reconstruct_rank(int(rank), part, threshold))
        except (TracekitError, *WORKER_LOSS):  # a lost worker is retried by the executor
            raise
        except Exception as error:  # noqa: BLE001 (named by rank so the user knows where)
            raise TracekitError(f"rank {rank}: {type(error).__name__}: {error}") from error
    return done


@dataclass
class _RankCalls:
    """One rank's calls in issue order, as the arrays the reconstruction reads."""

    job: str
    symbols: np.ndarray
    """Symbol code per call, ``1 .. S`` in the order of their fields (:func:`symbol_expr`)."""
    pids: np.ndarray
    nranks: np.ndarray
    bytes: np.ndarray
    marks_ns: np.ndarray | None
    """When each call completed (its start when it has no end); None without a clock."""
    names: dict[int, str]
    """Symbol code -> ``op[nranks]`` for the pattern description."""

    @property
    def count(self) -> int:
        return len(self.symbols)


def _calls(frame: pl.LazyFrame) -> _RankCalls:
    """The calls of one rank in issue order, each with its symbol code.

    A symbol is found by the hash of its fields and coded from the few distinct symbols, a
    tenth of the cost of a dense rank over every call's fields (a 64-bit hash collision among a
    rank's few dozen symbols is not a practical concern)."""
    calls = frame.select(
        "job", "op", "nranks", "bytes", "peer", "pid", "t_start_ns",
        pl.coalesce("t_end_ns", "t_start_ns").alias("_mark_ns"),
        symbol_expr().hash().alias("_key")).collect()
    starts = calls["t_start_ns"]
    if starts.null_count() or not starts.is_sorted():
        calls = calls.sort("t_start_ns", maintain_order=True, nulls_last=True)
    distinct = (calls.filter(pl.col("_key").is_first_distinct())
                .select("_key", symbol_expr().rank("dense").cast(pl.Int64).alias("_symbol"),
                        pl.concat_str(pl.col("op"), pl.lit("["),
                                      pl.col("nranks").cast(pl.String).fill_null("?"),
                                      pl.lit("]")).alias("_name"))
                .sort("_key"))
    keys = distinct["_key"].to_numpy()
    codes = distinct["_symbol"].to_numpy()
    return _RankCalls(
        job=calls["job"][0] if calls.height else "",
        symbols=codes[np.searchsorted(keys, calls["_key"].to_numpy())],
        pids=calls["pid"].fill_null(-1).to_numpy(),
        nranks=calls["nranks"].fill_null(0).to_numpy(),
        bytes=calls["bytes"].fill_null(0).to_numpy(),
        marks_ns=calls["_mark_ns"].to_numpy() if starts.null_count() == 0 else None,
        names=dict(zip(codes.tolist(), distinct["_name"].to_list(), strict=True)),
    )


def _reconstruct_rank(
    rank: int, calls: _RankCalls, threshold: float
) -> tuple[pl.DataFrame, RankSummary]:
    summary = RankSummary(rank=rank, calls=calls.count)
    if calls.marks_ns is None:
        summary.warnings.append(
            f"rank {rank}: calls have no timestamps (the source prints no clock): the period can "
            "be found but no iteration times; ingest a source with times (hook CSV, NCCL 2.26+ "
            "timestamps, Inspector)")
    pid = calls.pids
    breaks = np.flatnonzero(pid[1:] != pid[:-1]) + 1
    bounds = np.r_[0, breaks, calls.count]
    summary.segments = len(bounds) - 1
    symbols_all = calls.symbols
    times_all = calls.marks_ns
    # boundaries go on the job-wide synchronisation: the largest communicator, and on it the
    # smallest payload (Megatron's grad-norm / found-inf all-reduce)
    nranks = np.zeros(int(symbols_all.max()) + 1, dtype=np.int64)
    nranks[symbols_all] = calls.nranks
    preference = nranks.astype(np.float64)
    preference[symbols_all] += 1 / (2 + calls.bytes)
    frames, next_iteration, durations = [], 0, []
    periods: list[tuple[Period, int]] = []
    for start, end in zip(bounds[:-1], bounds[1:], strict=True):
        local, symbols = _dense(symbols_all[start:end])
        period = find_period(symbols, threshold, preference=preference[local])
        if period is None:
            summary.warnings.append(
                f"rank {rank}: no periodic structure in calls {start}..{end - 1} "
                f"({end - start} calls): no iteration rows for them")
            continue
        periods.append((period, int(nranks[local[period.anchor_symbol]])))
        symbols, _ = mark_anchor(symbols, period.anchor_symbol, period.multiplicity)
        local = np.r_[local, local[period.anchor_symbol]]
        split = _split_intervals(symbols, period)
        if times_all is None:
            summary.iterations += split.iterations
            continue
        starts, ends, quality = _boundaries(symbols, times_all[start:end], period, split)
        summary.iterations += split.iterations
        numbers = next_iteration + split.numbers
        next_iteration = int(numbers[-1]) + 1 if len(numbers) else next_iteration
        summary.recovered += len(starts)
        frames.append(pl.DataFrame({
            "job": calls.job, "rank": rank, "iteration": numbers, "t_start_ns": starts,
            "t_end_ns": ends,
            "duration_s": (ends - starts) / 1e9, "source": SOURCE, "quality": quality,
        }))
        durations.append((ends - starts) / 1e9)
        if not summary.pattern:
            summary.pattern = _describe(period, local, calls.names)
    if periods:
        main, summary.anchor_nranks = max(periods, key=lambda entry: entry[0].calls)
        summary.period_calls, summary.acf = main.calls, main.acf
        summary.baseline_lag = main.baseline_lag
    if durations and (joined := np.concatenate(durations)).size:
        summary.mean_s = float(joined.mean())
    frame = (pl.concat(frames) if frames else schema.table("iterations").empty())
    return schema.conform("iterations", frame.with_columns(
        pl.col("rank").cast(pl.Int32), pl.col("iteration").cast(pl.Int64),
        pl.col("t_start_ns").cast(pl.Int64), pl.col("t_end_ns").cast(pl.Int64),
        pl.col("duration_s").cast(pl.Float64), pl.col("job").cast(pl.String))), summary


@dataclass
class _Split:
    """Anchor positions kept and, per interval, how many iterations it holds."""

    positions: np.ndarray
    counts: np.ndarray
    per_interval: np.ndarray
    ratio: np.ndarray
    """Median over the pattern's symbols of count / count per iteration."""
    uncertain: np.ndarray
    """Intervals whose call counts do not say how many iterations they hold (a stretch of
    records is missing); their count is taken from their duration instead."""
    unique: np.ndarray
    numbers: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @property
    def iterations(self) -> int:
        return int(self.per_interval.sum())


MAX_MERGE_PASSES = 4
"""Spurious anchor calls (an interval holding no iteration) are merged away in a few passes."""


def _split_intervals(symbols: np.ndarray, period: Period) -> _Split:
    """How many iterations each anchor interval holds, judged by the pattern's other symbols
    (robust to dropped records and to extra calls, which each touch only a few symbols)."""
    pattern = np.zeros(int(symbols.max()) + 1, dtype=np.int64)
    for symbol, count in period.pattern.items():
        pattern[symbol] = count
    unique = np.flatnonzero(pattern == 1)
    unique = unique[unique != period.anchor]
    others = pattern.copy()
    others[period.anchor] = 0
    positions, counts = interval_counts(symbols, period.anchor)
    for _ in range(MAX_MERGE_PASSES):
        ratio = interval_ratio(counts, others)
        empty = np.flatnonzero(np.rint(ratio) == 0)
        if not len(empty) or len(counts) < 2:
            break
        # an interval that holds no iteration loses its closing anchor and joins the next
        # interval; the last one loses its opening anchor and joins the one before
        dropped = np.unique(np.where(empty + 1 < len(counts), empty + 1, empty))
        positions = np.delete(positions, dropped)
        counts = np.add.reduceat(counts, np.setdiff1d(np.arange(len(counts)), dropped), axis=0)
    ratio = interval_ratio(counts, others)
    per_interval = np.maximum(np.rint(ratio), 1).astype(np.int64)
    uncertain = np.abs(ratio - np.rint(ratio)) > AMBIGUOUS_RATIO
    return _Split(positions, counts, per_interval, ratio, uncertain, unique)


AMBIGUOUS_RATIO = 0.25
"""An interval whose symbol-count ratio is this far from a whole number of iterations is
uncertain (e.g. 1.4: a stretch of records is missing across a boundary)."""


def _boundaries(
    symbols: np.ndarray, times: np.ndarray, period: Period, split: _Split
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Start, end and quality of every recoverable iteration; fills ``split.numbers``."""
    positions, counts, per_interval = split.positions, split.counts, split.per_interval
    pattern = np.zeros(counts.shape[1], dtype=np.int64)
    for symbol, count in period.pattern.items():
        pattern[symbol] = count
    anchor_times = times[positions]
    durations = np.diff(anchor_times)
    extra = (counts > pattern + np.rint(EXTRA_TOLERANCE * pattern)).any(axis=1)
    certain_single = (per_interval == 1) & ~split.uncertain
    typical = np.median(durations[certain_single]) if certain_single.any() else np.nan
    if split.uncertain.any() and np.isfinite(typical) and typical > 0:
        # the counts bracket the number of iterations; the duration picks within the bracket
        # (never beyond it: a checkpoint pause is not hundreds of iterations). Calls of symbols
        # outside the pattern are extra work (evaluation, logging) that inflates the counts:
        # then only the lower bound holds.
        foreign = (counts[:, pattern == 0] > 0).any(axis=1)[split.uncertain]
        ratio = split.ratio[split.uncertain]
        high = np.where(foreign, np.floor(ratio), np.ceil(ratio))
        by_time = np.clip(np.rint(durations[split.uncertain] / typical), np.floor(ratio), high)
        per_interval = per_interval.copy()
        per_interval[split.uncertain] = np.maximum(1, by_time).astype(np.int64)
        split.per_interval = per_interval
    first_number = np.r_[0, np.cumsum(per_interval)[:-1]]
    single = per_interval == 1
    starts = [anchor_times[:-1][single]]
    ends = [anchor_times[1:][single]]
    quality = [np.where(extra[single], QUALITY_DISTURBED, QUALITY_OK)]
    numbers = [first_number[single]]
    merged = np.flatnonzero(~single)
    if len(merged):
        secondaries = _secondary_offsets(symbols, times, positions, split)
        for j in merged:
            cut = _resync(symbols, times, positions[j], positions[j + 1], per_interval[j],
                          secondaries)
            if cut is None:
                continue
            edges = np.r_[anchor_times[j], cut, anchor_times[j + 1]]
            starts.append(edges[:-1])
            ends.append(edges[1:])
            quality.append(np.full(len(edges) - 1, QUALITY_RESYNC))
            numbers.append(first_number[j] + np.arange(len(edges) - 1))
    order = np.argsort(np.concatenate(numbers), kind="stable")
    split.numbers = np.concatenate(numbers)[order]
    return (np.concatenate(starts)[order], np.concatenate(ends)[order],
            np.concatenate(quality)[order])


def _secondary_offsets(
    symbols: np.ndarray, times: np.ndarray, positions: np.ndarray, split: _Split
) -> list[tuple[int, int, bool]]:
    """Once-per-iteration symbols that can stand in for a missing anchor record: (symbol,
    median time to the nearer anchor in ns, whether that anchor follows it), nearest first."""
    clean = np.flatnonzero(split.per_interval == 1)
    offsets = []
    for symbol in split.unique:
        where = np.flatnonzero(symbols == symbol)
        interval = np.searchsorted(positions, where, side="right") - 1
        ok = np.isin(interval, clean)
        if not ok.any():
            continue
        after_ns = float(np.median(times[where[ok]] - times[positions[interval[ok]]]))
        before_ns = float(np.median(times[positions[interval[ok] + 1]] - times[where[ok]]))
        follows = before_ns < after_ns
        offsets.append((min(after_ns, before_ns), int(symbol), follows))
    return [(symbol, int(delta), follows) for delta, symbol, follows in sorted(offsets)]


def _resync(
    symbols: np.ndarray, times: np.ndarray, first: int, last: int, iterations: int,
    secondaries: list[tuple[int, int, bool]],
) -> np.ndarray | None:
    """Inner boundaries of an interval holding ``iterations`` iterations, from the nearest
    secondary symbol that occurs exactly that often in it; None when none does."""
    inside = symbols[first:last]
    for symbol, delta_ns, follows in secondaries:
        where = np.flatnonzero(inside == symbol)
        if len(where) != iterations:
            continue
        if follows:
            cut = times[first + where[:-1]] + delta_ns
        else:
            cut = times[first + where[1:]] - delta_ns
        if np.all(np.diff(np.r_[times[first], cut, times[last]]) > 0):
            return cut
    return None


def _dense(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct codes of a segment and the segment re-coded ``0 .. S-1`` (linear time)."""
    present = np.zeros(int(codes.max()) + 1, dtype=bool)
    present[codes] = True
    return np.flatnonzero(present), (np.cumsum(present) - 1)[codes]


def _describe(period: Period, local: np.ndarray, symbol_names: dict[int, str]) -> str:
    """The pattern in words: calls per op and communicator size, most frequent first."""
    totals: dict[str, int] = {}
    for symbol, count in period.pattern.items():
        name = symbol_names[int(local[symbol])]
        totals[name] = totals.get(name, 0) + count
    return " ".join(f"{count}x{name}" for name, count in
                    sorted(totals.items(), key=lambda item: (-item[1], item[0])))


BOUNDARY_MERGE = 0.5
"""Boundaries of different ranks closer than this share of the median iteration are the same
job-wide boundary (clock offsets and arrival skew are far smaller than an iteration)."""


def _number_job_wide(iterations: pl.DataFrame, synchronised: list[int]) -> pl.DataFrame:
    """One numbering for the whole job: the same number is the same iteration on every rank.

    The boundaries of the ``synchronised`` ranks (anchored on the job-wide synchronisation)
    are clustered in time into job-wide boundaries, numbered in order; each such row takes the
    number of its closing boundary and the boundaries' latest times (the collective completes
    when the last rank reaches it; a log of enqueue times shows each rank's arrival, early by
    its skew). A boundary seen on one rank only (a split the others did not make) still gets a
    number, so numbers can skip but never disagree. Other ranks are shifted as a whole onto
    that numbering by their nearest ends (onto the rank with most rows when none is
    synchronised, or when their boundaries do not line up: see :func:`_cluster_boundaries`)."""
    if iterations.height == 0:
        return iterations
    on = pl.col("rank").is_in(synchronised)
    numbered = _cluster_boundaries(iterations.filter(on)) if synchronised else None
    if numbered is not None:
        reference = numbered.select("t_end_ns", pl.col("iteration").alias("_reference"))
        others = iterations.filter(~on)
    else:
        biggest = (iterations.group_by("rank").len()
                   .sort(["len", "rank"], descending=[True, False])["rank"][0])
        numbered = iterations.head(0)
        reference = (iterations.filter(pl.col("rank") == biggest)
                     .select("t_end_ns", pl.col("iteration").alias("_reference")))
        others = iterations
    shifts = (
        others.sort("t_end_ns")
        .join_asof(reference.sort("t_end_ns"), on="t_end_ns", strategy="nearest")
        .group_by("rank")
        .agg((pl.col("_reference") - pl.col("iteration")).mode().min().alias("_shift"))
    )
    shifted = others.join(shifts, on="rank", how="left").with_columns(
        pl.col("iteration") + pl.col("_shift").fill_null(0)).drop("_shift")
    aligned = pl.concat([numbered, shifted])
    return (aligned.with_columns(pl.col("iteration") - pl.col("iteration").min())
            .sort("rank", "iteration"))


def _cluster_boundaries(rows: pl.DataFrame) -> pl.DataFrame | None:
    """``rows`` renumbered by job-wide boundary and moved to its latest time; None when the
    ranks' boundaries do not line up (some rank has two in one: the ranks do not wait for each
    other, or their clocks are half an iteration apart), so time says nothing about which
    iterations are the same.

    Boundaries closer than :data:`BOUNDARY_MERGE` iterations are one; so are neighbouring
    groups that each miss some ranks and share none (every rank reaches a collective once:
    after a checkpoint the ranks reach the next barrier seconds apart). Between two
    neighbouring boundaries lie as many iterations as the ranks that see both count at the
    least (a gap holds two; an evaluation window that one stage counts as two is one; a
    restart, between the last boundary of one run and the first of the next, holds none)."""
    # The idea: every iteration's start and end is a point (rank, time). Sorted by time, the
    # points fall into groups separated by gaps; groups become boundaries; the boundaries are
    # numbered by how many iterations lie between them; each row then takes its end point's
    # number and its points' boundary times.
    gap_ns = BOUNDARY_MERGE * float(rows["duration_s"].median()) * 1e9
    points, point_of = _boundary_points(rows)
    groups = points.with_columns(_group=((pl.col("ns").diff() > gap_ns).fill_null(False)
                                         .cum_sum()))
    ranks_of_group = groups.group_by("_group", maintain_order=True).agg(pl.col("rank").unique())
    boundary_of_group = _merge_partial_groups([set(ranks) for ranks in ranks_of_group["rank"]],
                                              rows["rank"].n_unique())
    points = groups.join(ranks_of_group.select(
        "_group", pl.Series("boundary", boundary_of_group, pl.Int64)), on="_group")
    if points.select("rank", "boundary").is_duplicated().any():
        return None  # a rank reaches one boundary twice: its iterations are not the others'
    points = points.with_columns(at_ns=pl.col("ns").max().over("boundary"))
    points = points.join(_boundary_numbers(points), on="boundary")
    return _renumbered(rows, points, point_of)


def _boundary_points(rows: pl.DataFrame) -> tuple[pl.DataFrame, np.ndarray]:
    """Every row's start then every row's end as points, one per rank and time (``rank``,
    ``ns``, ``index``: the iteration a point starts, ``point``: its number in time order),
    and the point each start and end is (``rows.height`` starts, then as many ends).

    A stable sort and a look at the previous point dedupe them (cheaper than a hash unique);
    each start and end remembers its point, so the rows get their boundaries back without a
    join."""
    starts = rows.select("rank", pl.col("t_start_ns").alias("ns"), pl.col("iteration")
                         .alias("index"))
    ends = rows.select("rank", pl.col("t_end_ns").alias("ns"), (pl.col("iteration") + 1)
                       .alias("index"))
    ordered = (
        pl.concat([starts, ends]).with_row_index("start_or_end")
        .sort("ns", "rank", maintain_order=True)
        .with_columns(new=pl.col("ns").ne_missing(pl.col("ns").shift(1))
                      | pl.col("rank").ne_missing(pl.col("rank").shift(1)))
        .with_columns(point=pl.col("new").cum_sum() - 1)
    )
    point_of = np.empty(ordered.height, dtype=np.int64)
    point_of[ordered["start_or_end"].to_numpy()] = ordered["point"].to_numpy()
    return ordered.filter("new").drop("start_or_end", "new"), point_of


def _merge_partial_groups(group_ranks: list[set[int]], everyone: int) -> list[int]:
    """The boundary of each group of near points, in time order. A group joins the boundary
    before it when both miss some ranks and they share none (the ranks reaching a barrier
    seconds apart after a checkpoint); otherwise it starts a new one."""
    numbers: list[int] = []
    boundary, reached = -1, set()  # the current boundary and the ranks seen at it
    for ranks in group_ranks:
        partial = len(reached) < everyone and len(ranks) < everyone
        if not (reached and partial and reached.isdisjoint(ranks)):
            boundary, reached = boundary + 1, set()
        reached |= ranks
        numbers.append(boundary)
    return numbers


def _boundary_numbers(points: pl.DataFrame) -> pl.DataFrame:
    """Each boundary's iteration number (``boundary``, ``number``): the count of iterations
    before it, where between neighbours lie as many as the ranks that see both count at the
    least (none when no rank sees both: one iteration)."""
    by_rank = points.sort("rank", "ns")
    steps = (
        by_rank.with_columns(
            apart=pl.col("boundary").shift(-1).over("rank") - pl.col("boundary"),
            step=pl.col("index").shift(-1).over("rank") - pl.col("index"))
        .filter(pl.col("apart") == 1)
        .group_by("boundary").agg(pl.col("step").min())
    )
    return (
        points.select("boundary").unique().join(steps, on="boundary", how="left")
        .sort("boundary")
        .select("boundary", number=pl.col("step").fill_null(1).clip(0).cum_sum().shift(1)
                .fill_null(0))
    )


def _renumbered(rows: pl.DataFrame, points: pl.DataFrame, point_of: np.ndarray
                ) -> pl.DataFrame:
    """``rows`` with the number of their end point's boundary (less one) and their points'
    boundary times."""
    at_ns = np.empty(points.height, dtype=np.int64)
    number = np.empty(points.height, dtype=np.int64)
    at_ns[points["point"].to_numpy()] = points["at_ns"].to_numpy()
    number[points["point"].to_numpy()] = points["number"].to_numpy()
    start, end = point_of[:rows.height], point_of[rows.height:]
    return rows.with_columns(
        pl.Series("iteration", number[end] - 1), pl.Series("t_start_ns", at_ns[start]),
        pl.Series("t_end_ns", at_ns[end]),
        pl.Series("duration_s", (at_ns[end] - at_ns[start]) / 1e9))

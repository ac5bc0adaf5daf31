"""Stragglers by peer comparison: each rank's own time per iteration against its comparable peers.

A change-point detector sees a slowdown only as a change in a series: a worker slow from the
first step has none, and one rank slowing down in a loosely synchronised job is hidden by the
job-level median. Comparing, iteration by iteration, each rank's own time with the median of
its peers (the other ranks of its group) shows both: a rank whose ratio to its peers stays above
``1 + MIN_STRAGGLER_EXCESS`` for at least a fail-slow's length (``FAIL_SLOW_MIN_ITERATIONS``
iterations, counted as the iterations the logged points stand for, :mod:`tracekit.detect.spans`;
a rolling median over that many points) is a candidate. Each rank is then judged against
itself as well as its peers, with ``CONFIDENCE_Z`` standard errors to spare (BOCD+V's judgement
of a level):

- a rank slower than the threshold in every third of the run is a *persistent* straggler: a
  steady offset, reported once over the whole run with its size, not cut into episodes where
  its noise crosses the threshold;
- otherwise a candidate is an episode when its ratio is above the threshold and above the
  rank's own usual ratio (outside its candidates) by the threshold: a worker that is x1.095
  its peers on average and noisy drifts above x1.10 for a dozen iterations now and then (the
  real Alibaba PAI job), which is its noise, not a fail-slow; the job, whose step is already
  set by its slowest worker, slows by the step over the rank's own level, not over its peers'.
  A persistent straggler's candidates that step up by the threshold over its offset are
  episodes too.

Candidates of several ranks that overlap are one episode naming them all: when several workers
slow down together, the leave-one-out median of the others stays with the healthy ones while
fewer than half are slow.

Own time and peers come from what the dataset holds, best first:

- op traces (the what-if format): a rank's compute (forward and backward ops) per step; peers
  are the ranks of the same pipeline stage (the same layers: tensor-parallel partners and the
  same position in every data-parallel replica), so a stage that holds more layers is not a
  straggler (that is the pipeline imbalance attribution reports);
- collective calls with end times (hook CSV, profiler plugins) and per-rank iterations: a
  rank's time per iteration outside the calls (a rank waiting for a straggler waits inside
  them); peers are the ranks of the same pipeline stage under Megatron's default rank order
  when the layout is known, else all ranks;
- per-rank iteration times (per-worker step tables): a worker's step time; peers are all
  workers. Iterations reconstructed from enqueue-only NCCL logs end together on every rank, so
  there no rank stands out and no episode is found.

Blocking slowdown (the what-if of "Understanding Stragglers in Large Model Training Using
What-if Analysis", actual over ideal step time): in synchronous training every rank waits for
the straggler, so its extra own time (own minus its peers' median) delays the job step. The
ideal step is the actual one (slowest rank) minus the culprits' largest excess; an episode's
``slowdown`` is its actual over ideal time, ``baseline_s`` the mean ideal step, ``lost_s`` the
difference.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl
from scipy.ndimage import median_filter

from tracekit.core import schema
from tracekit.core.culprits import PEERS_DETECTOR
from tracekit.core.parallel import (
    RANKS_PER_BLOCK,
    Executor,
    LocalExecutor,
    RankScans,
    map_all,
    per_rank,
)
from tracekit.core.schema import COMPUTE_OPS
from tracekit.core.thresholds import FAIL_SLOW_MIN_ITERATIONS, FAIL_SLOW_RATIO, SUSPECT_RATIO
from tracekit.detect.base import MAD_TO_SIGMA
from tracekit.detect.bocd_verify import CONFIDENCE_Z, MEDIAN_STANDARD_ERROR
from tracekit.detect.spans import fail_slow_points, reach

NAME = PEERS_DETECTOR
"""The detector name of peer-comparison episodes in the ``episodes`` table."""

MIN_STRAGGLER_EXCESS = SUSPECT_RATIO - 1.0
"""A straggler is more than 10 % slower than its peers' median: Greyhound's profiling
threshold, the same 10 % the fail-slow labels use."""

MIN_PEERS = 1
"""A rank needs at least one comparable peer to be compared with."""

MIN_RUN_POINTS = 3
"""A candidate holds at least this many logged points, however many iterations they stand for:
the spread of fewer says nothing of its level."""

COMPUTE_SOURCE, OUTSIDE_SOURCE = "op_traces compute", "time outside collectives"
"""Own times that are part of a rank's step, not the step itself (a per-worker step table)."""

AROUND_POINTS = 50
"""A straggler episode's job step is compared with this many points either side of it (the
change-point detectors' ``baseline_window``)."""

PERSISTENT_PARTS = 3
"""A persistent straggler is slower than the threshold in each of this many equal parts of the
run: from its start to its end, not a change early in the run that lasts."""


@dataclass
class OwnTimes:
    """Per-rank own time per iteration (ranks x iterations) with each rank's peer group."""

    source: str
    ranks: np.ndarray
    groups: np.ndarray
    iterations: pl.DataFrame  # iteration, t_start_ns, t_end_ns, step_s (the job's step time)
    own_s: np.ndarray


def own_times(iterations: pl.DataFrame, op_traces: pl.DataFrame,
              collectives: pl.LazyFrame | RankScans | None = None,
              layout: pl.DataFrame | None = None,
              executor: Executor | None = None) -> OwnTimes | None:
    """The best own-time matrix the dataset holds (module docstring), ``iterations`` being those
    of one source; None without per-rank times of at least two ranks. ``executor`` runs the
    time outside collectives by blocks of ranks."""
    per_rank = iterations.filter(pl.col("rank").is_not_null(), pl.col("duration_s").is_finite())
    compute = op_traces.filter(pl.col("op").is_in(COMPUTE_OPS), pl.col("pp_stage").is_not_null())
    outside = (None if collectives is None
               else outside_collectives(per_rank, collectives, executor))
    if compute.height:
        own = (compute.group_by("rank", "step")
               .agg(pl.col("duration_s").sum(), pl.col("pp_stage").first().alias("group"))
               .rename({"step": "iteration"}))
        source = COMPUTE_SOURCE
    elif outside is not None:
        own = outside.with_columns(pipeline_stage(layout).alias("group"))
        source = OUTSIDE_SOURCE
    elif per_rank.height:
        own = per_rank.group_by("rank", "iteration").agg(pl.col("duration_s").median(),
                                                         pl.lit(0).alias("group"))
        source = f"{per_rank['source'][0]} iterations"
    else:
        return None
    if own["rank"].n_unique() < 2:
        return None
    steps = (per_rank.group_by("iteration")
             .agg(pl.col("duration_s").max().alias("step_s"), pl.col("t_start_ns").min(),
                  pl.col("t_end_ns").max()))
    ranks = own.group_by("rank").agg(pl.col("group").first()).sort("rank")
    timeline = (own.select("iteration").unique().sort("iteration")
                .join(steps, on="iteration", how="left", maintain_order="left"))
    rows = ranks["rank"].search_sorted(own["rank"]).to_numpy()
    columns = timeline["iteration"].search_sorted(own["iteration"]).to_numpy()
    matrix = np.full((ranks.height, timeline.height), np.nan)
    matrix[rows, columns] = own["duration_s"].to_numpy()
    return OwnTimes(source, ranks["rank"].to_numpy(), ranks["group"].to_numpy(), timeline,
                    matrix)


def outside_collectives(iterations: pl.DataFrame, collectives: pl.LazyFrame | RankScans,
                        executor: Executor | None = None) -> pl.DataFrame | None:
    """Each rank's time per iteration outside collective calls (its compute and host work: a
    rank that waits for a straggler waits inside the calls), from calls with an end time;
    overlapping calls count once. None when the calls have no end times (NCCL debug logs).
    ``collectives``: the calls, or one scan per rank of ``iterations`` (a dataset's
    :func:`~tracekit.core.parallel.rank_scans`). ``executor`` runs the blocks of
    :data:`RANKS_PER_BLOCK` ranks (default: a local loop)."""
    spans = (iterations.filter(pl.col("t_start_ns").is_not_null(),
                               pl.col("t_end_ns").is_not_null())
             .select("rank", "iteration", pl.col("t_start_ns").alias("iteration_ns"),
                     pl.col("t_end_ns").alias("iteration_end_ns"), "duration_s")
             .sort("iteration_ns"))
    if spans.is_empty():
        return None
    ranks = spans["rank"].unique().sort().to_list()
    blocks = [ranks[first:first + RANKS_PER_BLOCK]
              for first in range(0, len(ranks), RANKS_PER_BLOCK)]
    outside = map_all(executor or LocalExecutor(), _outside_calls,
                      [(block, list(per_rank(collectives, block).values()),
                        spans.filter(pl.col("rank").is_in(block))) for block in blocks],
                      key=lambda partition: f"own times of ranks {partition[0][0]}-"
                                            f"{partition[0][-1]}")
    ranks_done = [rank for block in outside for rank in block]
    if not any(with_calls for _, with_calls in ranks_done):
        return None
    return pl.concat([frame for frame, _ in ranks_done])


def _outside_calls(partition: tuple[list[int], list[pl.LazyFrame], pl.DataFrame]
                   ) -> list[tuple[pl.DataFrame, int]]:
    """Per rank of a block, its time outside calls per iteration and how many of its
    iterations hold calls (a partition of :func:`outside_collectives`, run in this process or
    on a Dask worker)."""
    block, scans, spans = partition
    return [_outside_rank(calls, spans.filter(pl.col("rank") == rank))
            for rank, calls in zip(block, scans, strict=True)]


def _outside_rank(calls: pl.LazyFrame, spans: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """One rank's time outside its calls per iteration of ``spans`` (its iterations, sorted by
    start) and how many iterations hold calls. Inside is the union of the calls' intervals,
    each call counted in the iteration it starts in, if before that iteration's end. Over the
    arrays of the rank's two time columns, each iteration's calls found by bisecting the
    sorted starts: the same times as polars' sort, as-of join and group-by in half the CPU
    (0.02 CPU-s of 540k calls)."""
    times = calls.select("t_start_ns", "t_end_ns").collect()
    if times["t_start_ns"].null_count() or times["t_end_ns"].null_count():
        times = times.drop_nulls()
    start, end = times["t_start_ns"].to_numpy(), times["t_end_ns"].to_numpy()
    if not times["t_start_ns"].is_sorted():
        order = np.argsort(start, kind="stable")
        start, end = start[order], end[order]
    # a call overlapping earlier ones counts from where they ended
    covered = np.r_[start[:1], np.maximum(start[1:], np.maximum.accumulate(end)[:-1])]
    total = np.r_[0, np.cumsum(np.clip(end - covered, 0, None))]
    # an iteration's calls start at or after it starts, before the next one and its own end
    first = np.searchsorted(start, spans["iteration_ns"].to_numpy())
    stop = np.minimum(np.searchsorted(start, spans["iteration_end_ns"].to_numpy()),
                      np.r_[first[1:], start.size])
    inside_ns = np.where(stop > first, total[np.maximum(stop, first)] - total[first], 0)
    outside_s = np.clip(spans["duration_s"].to_numpy() - inside_ns / 1e9, 0, None)
    return (spans.select("rank", "iteration", pl.Series("duration_s", outside_s)),
            int(np.count_nonzero(stop > first)))


def pipeline_stage(layout: pl.DataFrame | None) -> pl.Expr:
    """A rank's pipeline stage under Megatron's default rank order (pipeline outermost: ranks
    ``[s * world / pp, (s + 1) * world / pp)`` are stage ``s``); 0 without a known layout."""
    known = None if layout is None else layout.filter(pl.col("pp_size").is_not_null(),
                                                      pl.col("world_size").is_not_null())
    if known is None or known.is_empty():
        return pl.lit(0)
    row = known.row(0, named=True)
    return pl.col("rank") // max(row["world_size"] // row["pp_size"], 1)


def peer_medians(values: np.ndarray) -> np.ndarray:
    """For every row, the per-column median of the *other* rows (leave-one-out), from one sort:
    removing the row at sorted position k shifts the order statistics above k down by one.
    Missing values (NaN) sort last and are not counted."""
    count = np.sum(np.isfinite(values), axis=0) - 1  # peers of each column
    order = np.argsort(values, axis=0, kind="stable")
    ordered = np.take_along_axis(values, order, axis=0)
    position = np.empty_like(order)
    np.put_along_axis(position, order, np.arange(values.shape[0])[:, None], axis=0)

    def statistic(index: np.ndarray) -> np.ndarray:
        shifted = np.where(position <= index, index + 1, index)
        shifted = np.clip(shifted, 0, values.shape[0] - 1)
        return np.take_along_axis(ordered, shifted, axis=0)

    low = np.maximum((count - 1) // 2, 0)[None, :]
    high = np.maximum(count // 2, 0)[None, :]
    medians = (statistic(low) + statistic(high)) / 2.0
    return np.where(count[None, :] >= MIN_PEERS, medians, np.nan)


def _slow_runs(flags: np.ndarray, covers: np.ndarray) -> list[tuple[int, int]]:
    """``(first, stop)`` of every run of True at least a fail-slow long (in the iterations its
    points stand for, ``covers`` from :func:`~tracekit.detect.spans.reach`)."""
    edges = np.diff(np.concatenate(([0], flags.astype(np.int8), [0])))
    starts, stops = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    return [(int(a), int(b)) for a, b in zip(starts, stops, strict=True)
            if b - a >= MIN_RUN_POINTS and covers[b] - covers[a] >= FAIL_SLOW_MIN_ITERATIONS]


def is_straggler(ratios: np.ndarray) -> bool:
    """Whether a run of a rank's ratios to its peers is slower than the threshold with
    confidence: its median's lower 3-sigma bound (noise from the run's own MAD) is above it."""
    ratios = ratios[np.isfinite(ratios)]
    if ratios.size == 0:
        return False
    level = float(np.median(ratios))
    noise = MAD_TO_SIGMA * float(np.median(np.abs(ratios - level)))
    error = CONFIDENCE_Z * MEDIAN_STANDARD_ERROR * noise / np.sqrt(ratios.size)
    return level - error > 1.0 + MIN_STRAGGLER_EXCESS


def is_persistent(ratios: np.ndarray) -> bool:
    """Whether a rank is a straggler in every one of :data:`PERSISTENT_PARTS` parts of the run."""
    return ratios.size >= PERSISTENT_PARTS * MIN_RUN_POINTS and all(
        is_straggler(part) for part in np.array_split(ratios, PERSISTENT_PARTS))


def rank_runs(ratios: np.ndarray, smooth: np.ndarray, covers: np.ndarray
              ) -> tuple[list[tuple[int, int]], float | None]:
    """One rank's straggler runs (points ``[first, stop)``) from its ratios to its peers and
    their rolling median, and its steady offset when it is persistent (then the first run is
    the whole run), else None: the module docstring's judgement."""
    threshold = 1.0 + MIN_STRAGGLER_EXCESS
    persistent = is_persistent(ratios)
    if persistent:  # its candidates step up from its offset
        usual = float(np.nanmedian(ratios))
        candidates = _slow_runs(smooth > usual * threshold, covers)
    else:
        candidates = _slow_runs(smooth > threshold, covers)
        outside = np.ones(ratios.size, dtype=bool)
        for first, stop in candidates:
            outside[first:stop] = False
        rest = ratios[outside & np.isfinite(ratios)]
        usual = float(np.median(rest)) if rest.size >= MIN_RUN_POINTS else float(
            np.nanmedian(ratios))
    runs = [(first, stop) for first, stop in candidates
            if (persistent or is_straggler(ratios[first:stop]))
            and is_straggler(ratios[first:stop] / usual)]
    return ([(0, ratios.size)] + runs, usual) if persistent else (runs, None)


def _merge(runs: list[tuple[int, int, int]]) -> list[tuple[int, int, list[int]]]:
    """Overlapping runs of several ranks as one episode with all of them as culprits."""
    merged: list[tuple[int, int, list[int]]] = []
    for first, stop, row in sorted(runs):
        if merged and first < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(stop, merged[-1][1]), merged[-1][2] + [row])
        else:
            merged.append((first, stop, [row]))
    return merged


def straggler_episodes(job: str, iterations: pl.DataFrame, op_traces: pl.DataFrame,
                       collectives: pl.LazyFrame | RankScans | None = None,
                       layout: pl.DataFrame | None = None,
                       min_slowdown: float = 0.05,
                       executor: Executor | None = None) -> pl.DataFrame:
    """Peer-comparison episodes of one job, in the ``episodes`` schema (detector ``peers``);
    ``iterations`` are those of the source detection runs on. As for the change-point
    detectors, an episode slows the job by more than ``min_slowdown`` (its blocking slowdown):
    a straggler the job does not wait for is no fail-slow of the job; one that starts and ends
    in the run, measured on a part of its step (compute, time outside calls), also slows the
    job's step by a fail-slow's ratio (:func:`_slows_the_job`). ``executor`` runs the own
    times' blocks of ranks (default: a local loop)."""
    times = own_times(iterations, op_traces, collectives, layout, executor)
    if times is None:
        return schema.table("episodes").empty()
    peers = np.full_like(times.own_s, np.nan)
    for group in np.unique(times.groups):
        members = times.groups == group
        peers[members] = peer_medians(times.own_s[members])
    # no ratio where the peers' median is 0 or missing (a group of one, an idle stretch)
    ratio = np.divide(times.own_s, peers, out=np.full_like(peers, np.nan),
                      where=np.isfinite(peers) & (peers > 0))
    # a rank's ratio over a fail-slow's length: single slow iterations (a GC pause) do not count
    numbers = times.iterations["iteration"].to_numpy()
    covers = reach(numbers)
    smooth = median_filter(np.nan_to_num(ratio, nan=1.0), size=(1, fail_slow_points(numbers)),
                           mode="nearest")
    runs, persistent, offsets = [], [], {}
    for row in range(smooth.shape[0]):
        found, offset = rank_runs(ratio[row], smooth[row], covers)
        if offset is not None:
            persistent.append((*found.pop(0), [row]))
            offsets[row] = offset
        runs += [(first, stop, row) for first, stop in found]
    if not runs and not persistent:
        return schema.table("episodes").empty()
    # a persistent straggler's offset delays the job all run, its faults by their step over it
    excess = np.nan_to_num(np.clip(times.own_s - peers, 0.0, None))
    steady = excess.copy()
    for row, offset in offsets.items():
        steady[row] = np.minimum(excess[row], np.nan_to_num((offset - 1.0) * peers[row]))
        excess[row] = np.nan_to_num(np.clip(times.own_s[row] - offset * peers[row], 0.0, None))
    step_s = times.iterations["step_s"].fill_null(np.nan).to_numpy()
    step_s = np.where(np.isfinite(step_s), step_s, np.nanmax(times.own_s, axis=0))
    episodes = [_episode(times, ratio, delays, step_s, covers, first, stop, rows, kind)
                for kind, delays, found in ((True, steady, persistent),
                                            (False, excess, _merge(runs)))
                for first, stop, rows in found]
    episodes = [e for e in episodes if e["slowdown"] > 1.0 + min_slowdown
                and (e["persistent"] or times.source not in (COMPUTE_SOURCE, OUTSIDE_SOURCE)
                     or _slows_the_job(step_s, runs, e["first"], e["stop"]))]
    if not episodes:
        return schema.table("episodes").empty()
    ideal_job_s = float(step_s.sum() - sum(e["lost_s"] for e in episodes))
    frame = pl.DataFrame(episodes, schema_overrides={"t_start_ns": pl.Int64,
                                                     "t_end_ns": pl.Int64}).drop("first", "stop")
    frame = frame.sort("start_iteration", "ranks").with_columns(
        pl.lit(job).alias("job"), pl.lit(NAME).alias("detector"),
        pl.int_range(1, pl.len() + 1, dtype=pl.Int32).alias("episode"),
        (pl.col("lost_s") / ideal_job_s).alias("jct_slowdown"))
    return schema.conform("episodes", frame)


def _slows_the_job(step_s: np.ndarray, runs: list[tuple[int, int, int]], first: int,
                   stop: int) -> bool:
    """Whether the job's step over points ``[first, stop)`` is a fail-slow's
    :data:`FAIL_SLOW_RATIO` times its level on the :data:`AROUND_POINTS` points either side
    that no straggler run holds; true when fewer than :data:`MIN_RUN_POINTS` are left. The
    blocking slowdown counts every second of a straggler's excess as the job's, but a stage
    that waits anyway (a pipeline's slack) absorbs some of it: a thermal GPU x1.27 over its
    peers slowed a job of two pipeline stages x1.06."""
    held = np.zeros(step_s.size, dtype=bool)
    for start, end, _ in runs:
        held[start:end] = True
    around = np.r_[first - AROUND_POINTS:first, stop:stop + AROUND_POINTS]
    around = around[(around >= 0) & (around < step_s.size)]
    healthy = step_s[around[~held[around]]]
    healthy = healthy[np.isfinite(healthy)]
    if healthy.size < MIN_RUN_POINTS:
        return True
    return float(np.nanmean(step_s[first:stop])) >= FAIL_SLOW_RATIO * float(np.median(healthy))


def _episode(times: OwnTimes, ratio: np.ndarray, excess: np.ndarray, step_s: np.ndarray,
             covers: np.ndarray, first: int, stop: int, rows: list[int],
             persistent: bool) -> dict:
    """One straggler episode: the culprits' excess delays every step it spans."""
    delay = excess[rows, first:stop].max(axis=0)
    actual = step_s[first:stop]
    ideal = actual - delay
    timeline = times.iterations
    ranks = sorted(int(times.ranks[row]) for row in set(rows))
    length = _length(stop - first, int(covers[stop] - covers[first]))
    return {
        "first": first, "stop": stop,
        "t_start_ns": timeline["t_start_ns"][first],
        "t_end_ns": timeline["t_end_ns"][stop - 1] if stop < timeline.height else None,
        "start_iteration": int(timeline["iteration"][first]),
        "end_iteration": int(timeline["iteration"][stop - 1]),
        "iterations": int(covers[stop] - covers[first]), "points": stop - first,
        "duration_s": float(actual.sum()), "baseline_s": float(ideal.mean()),
        "slowdown": float(actual.sum() / ideal.sum()), "lost_s": float(delay.sum()),
        "ranks": ",".join(map(str, ranks)), "persistent": persistent,
        "evidence": (f"rank(s) {', '.join(map(str, ranks))}: own time ({times.source}) "
                     f"x{float(np.nanmedian(ratio[rows, first:stop])):.2f} their peers' median "
                     + (f"all run, a steady offset ({length})" if persistent
                        else f"over {length}")),
    }


def _length(points: int, iterations: int) -> str:
    """How long a stretch is, in iterations, and in logged points when they differ."""
    return (f"{iterations} iterations" if points == iterations
            else f"{iterations} iterations in {points} logged points")

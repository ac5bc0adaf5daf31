"""From iteration times to fail-slow episodes: the job-level series, change points, episodes.

In synchronous training every rank waits for the slowest, so all ranks slow down together. The
job is judged on a robust job-level series (the per-iteration median across ranks, which one
noisy rank cannot move); each rank's own series is also run through the detector and its events
kept, so attribution can see which ranks changed first or most.

An episode is a maximal run of segments (between change points) whose level is above the
healthy level by more than ``min_slowdown``. The first healthy level is the fastest sustained
level of the job: the lowest median among segments of at least ``MIN_BASELINE_POINTS`` points.
An episode ends where the job is back within ``min_slowdown`` of it, or where it recovers: a
sustained segment a fail-slow faster than the one before, within ``RECOVERY_BAND`` of the
healthy level, which then becomes the healthy level (a job between two faults runs a few
percent off its first level; judged against that first level, every fault after the first
would merge into one episode that never ends), unless the segment after it is back within
``min_slowdown`` of the healthy level: then it was a weaker fault that followed the first
too closely for the detector to part them (x1.11 two iterations after x1.25), and the
episode goes on through it. Slow segments ending within the warm-up
(``WARMUP_ITERATIONS``) are never an episode; a slow stretch shorter than a fail-slow
(``FAIL_SLOW_MIN_ITERATIONS``) is a burst of disturbances (a run of GC pauses the sliding
window flags), never an episode either. Both count the iterations the logged points stand for
(:mod:`tracekit.detect.spans`), not the points.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from tracekit.core import schema
from tracekit.core.dataset import Dataset, open_dataset
from tracekit.core.errors import InputError
from tracekit.core.parallel import (
    RANKS_PER_BLOCK,
    Executor,
    LocalExecutor,
    map_all,
    rank_scans,
    record_build,
)
from tracekit.core.thresholds import FAIL_SLOW_RATIO, WARMUP_ITERATIONS
from tracekit.detect.base import Detector
from tracekit.detect.peers import NAME as PEER_DETECTOR
from tracekit.detect.peers import straggler_episodes
from tracekit.detect.registry import make_detector
from tracekit.detect.spans import holds_a_fail_slow, in_iterations, reach
from tracekit.detect.verdict import VERDICT_DETECTOR, VERDICT_SOURCES

SOURCE_PREFERENCE = ("acf", "framework")
"""Iteration sources in order of preference: ACF reconstruction sees every rank."""

MIN_RANK_SHARE = 0.5
"""The job-level median is taken where at least half the job's ranks report the iteration: past
the end of most workers (a per-worker step table whose workers stop at different times) the
median of the few left is another population, not the job slowing down or speeding up (the
real Alibaba PAI job: its last worker alone, 13 % faster than the job, made the whole run look
x1.17 slow)."""

MIN_BASELINE_POINTS = 5
"""Segments shorter than this cannot set the healthy baseline (a lucky fast burst)."""

JOB_DETECTORS = ("window", "bocd", "bocd+v", "bocd+b")
"""Change-point detectors ``tracekit detect`` runs by default: the paper's three and ours, side
by side; the peer comparison (``peers``) runs beside them."""

RECOVERY_BAND = 0.15
"""A job that recovers from a fault may settle up to 15 % off its first healthy level (the real
128-GPU Megatron log with nine on/off slow-link faults: 3-15 % between faults); a level further
off, after a drop, is a fault easing (x4 then x2), still the same episode."""

RANK_MATCH_ITERATIONS = 5
"""A rank's event belongs to an episode when it falls at most this many iterations before it."""


@dataclass
class JobSeries:
    """The job-level series (one row per iteration) and the per-rank matrix aligned with it."""

    job: pl.DataFrame
    ranks: list[int]
    matrix: np.ndarray  # ranks x iterations, duration_s


def job_series(iterations: pl.DataFrame) -> JobSeries:
    """The iterations of the preferred source as a job-level series and a per-rank matrix.

    A rank missing an iteration gets the job-level value there, so every row has full length,
    and a rank with several rows for one iteration gets their median. Rows are placed by
    position instead of pivoted: a pivot of 256 ranks x 10,000 iterations cost 1.8 CPU-s of
    the machine that runs the command, 0.4 this way."""
    job = job_iterations(iterations)
    per_rank = _preferred_iterations(iterations).filter(
        pl.col("rank").is_not_null(), pl.col("iteration").is_in(job["iteration"].implode()))
    ranks = per_rank["rank"].unique().sort()
    if ranks.is_empty():
        return JobSeries(job, [], np.empty((0, job.height)))
    rows, columns = _cells(per_rank, ranks, job)
    if np.bincount(rows * job.height + columns).max() > 1:
        per_rank = per_rank.group_by("rank", "iteration").agg(pl.col("duration_s").median())
        rows, columns = _cells(per_rank, ranks, job)
    matrix = np.repeat(job["duration_s"].to_numpy()[None, :], ranks.len(), axis=0)
    matrix[rows, columns] = per_rank["duration_s"].to_numpy()
    return JobSeries(job, ranks.to_list(), matrix)


def _cells(per_rank: pl.DataFrame, ranks: pl.Series, job: pl.DataFrame
           ) -> tuple[np.ndarray, np.ndarray]:
    """Row (rank) and column (iteration) of every row of ``per_rank`` in the matrix."""
    return (ranks.search_sorted(per_rank["rank"]).to_numpy().astype(np.int64),
            job["iteration"].search_sorted(per_rank["iteration"]).to_numpy().astype(np.int64))


def _preferred_iterations(iterations: pl.DataFrame) -> pl.DataFrame:
    """The finite iterations of the preferred source, samples taken at each rank's own phase
    put on a common grid (:func:`sampling_phase_step`)."""
    preferred = _source_rows(iterations)
    step = sampling_phase_step(preferred)
    if step is None:
        return preferred
    first = preferred["iteration"].min()
    return preferred.with_columns(
        (first + ((pl.col("iteration") - first) / step).round().cast(pl.Int64) * step)
        .alias("iteration"))


def _source_rows(iterations: pl.DataFrame) -> pl.DataFrame:
    """The finite iterations of the preferred source, as logged."""
    sources = set(iterations["source"].drop_nulls().unique().to_list())
    source = next((s for s in SOURCE_PREFERENCE if s in sources), min(sources, default=None))
    if source is None:
        raise InputError("no iterations to detect on; ingest collectives or framework logs "
                         "first (the iterations table is empty)")
    return iterations.filter(pl.col("source") == source, pl.col("duration_s").is_finite())


def sampling_phase_step(preferred: pl.DataFrame) -> int | None:
    """The ranks' common sampling step when each samples at its own phase (a step table whose
    "step" is the sample time: worker 0 at 1, 11, 21 s, worker 1 at 4, 14, 24 s), else None.
    Their numbers then never line up, so no number has :data:`MIN_RANK_SHARE` of the ranks and
    no peer to compare with; snapped to a grid of that step from the first number, each sample
    joins the others of its period."""
    ranked = preferred.filter(pl.col("rank").is_not_null())
    ranks = ranked["rank"].n_unique()
    if ranks < 2 or ranked["iteration"].n_unique() * MIN_RANK_SHARE <= ranked.height / ranks:
        return None
    steps = (ranked.sort("rank", "iteration")
             .group_by("rank").agg(pl.col("iteration").diff().median().alias("step")))["step"]
    step = int(steps.median() or 1)
    return step if step > 1 else None


def job_iterations(iterations: pl.DataFrame) -> pl.DataFrame:
    """The job-level series detection runs on: per iteration of the preferred source, the
    median duration across ranks, the first start and the last end; only iterations that at
    least :data:`MIN_RANK_SHARE` of the job's ranks report, or a job-level row (rank null)."""
    preferred = _preferred_iterations(iterations)
    job_ranks = preferred["rank"].drop_nulls().n_unique()  # 0 for a job-level log: all kept
    return (preferred.group_by("iteration")
            .agg(pl.col("duration_s").median(), pl.col("t_start_ns").min(),
                 pl.col("t_end_ns").max(), pl.col("rank").drop_nulls().n_unique().alias("_ranks"),
                 pl.col("rank").is_null().any().alias("_job_row"))
            .filter((pl.col("_ranks") >= MIN_RANK_SHARE * job_ranks) | pl.col("_job_row"))
            .drop("_ranks", "_job_row")
            .sort("iteration"))


def segment_means(durations: np.ndarray, changepoints: np.ndarray) -> np.ndarray:
    """Mean of every segment between consecutive change points."""
    bounds = np.concatenate(([0], changepoints, [durations.size]))
    return np.add.reduceat(durations, bounds[:-1]) / np.diff(bounds)


def change_events(job: str, rank: int | None, detector: str, series: pl.DataFrame,
                  durations: np.ndarray, changepoints: np.ndarray,
                  confirmed: np.ndarray | None = None) -> pl.DataFrame:
    """One ``events`` row per change point, with the mean before and after it and, given
    ``confirmed`` (the index of the point that reported each), the confirming iteration."""
    means = segment_means(durations, changepoints)
    frame = pl.DataFrame({
        "job": job, "rank": rank, "detector": detector,
        "iteration": series["iteration"].gather(changepoints),
        "ts_ns": series["t_start_ns"].gather(changepoints),
        "before_s": means[:-1], "after_s": means[1:],
        "confirmed_iteration": None if confirmed is None
        else series["iteration"].gather(confirmed),
    }, schema_overrides={"job": pl.String, "rank": pl.Int32, "detector": pl.String,
                         "before_s": pl.Float64, "after_s": pl.Float64,
                         "confirmed_iteration": pl.Int64})
    frame = frame.with_columns((pl.col("after_s") / pl.col("before_s")).alias("ratio"))
    return schema.conform("events", frame)


def find_episodes(job: str, detector: str, series: pl.DataFrame, changepoints: np.ndarray,
                  min_slowdown: float, rank_events: pl.DataFrame | None = None) -> pl.DataFrame:
    """Episodes of one job-level series segmented at ``changepoints``."""
    durations = series["duration_s"].to_numpy()
    bounds = np.concatenate(([0], changepoints, [durations.size])).astype(np.int64)
    levels = np.array([np.median(durations[a:b]) for a, b in zip(bounds[:-1], bounds[1:],
                                                                    strict=True)])
    long = np.diff(bounds) >= MIN_BASELINE_POINTS
    baseline = float(levels[long].min() if long.any() else levels.min())
    numbers = series["iteration"].to_numpy()
    covers = reach(numbers)[bounds]  # iteration where each segment starts
    past_warmup = covers[1:] - covers[0] > WARMUP_ITERATIONS  # the segment reaches past it
    rows = []
    for first, stop, healthy in _slow_stretches(levels, long, past_warmup, baseline,
                                                min_slowdown):
        iterations = int(covers[stop] - covers[first])
        if holds_a_fail_slow(numbers, int(bounds[stop] - bounds[first]), iterations):
            rows.append(_episode(series, durations, int(bounds[first]), int(bounds[stop]),
                                 iterations, healthy, rank_events))
    frame = pl.DataFrame(rows, schema_overrides={"t_end_ns": pl.Int64, "ranks": pl.String})
    if frame.is_empty():
        return schema.table("episodes").empty()
    frame = frame.with_columns(
        pl.lit(job).alias("job"), pl.lit(detector).alias("detector"),
        pl.int_range(1, pl.len() + 1, dtype=pl.Int32).alias("episode"),
        (pl.col("lost_s") / (durations.size * baseline)).alias("jct_slowdown"))
    return schema.conform("episodes", frame)


def _slow_stretches(levels: np.ndarray, long: np.ndarray, past_warmup: np.ndarray,
                    baseline: float, min_slowdown: float) -> list[tuple[int, int, float]]:
    """``(first, stop, healthy level)`` of every run of slow segments: above the healthy level
    by more than ``min_slowdown``, ended by a return to it or by a recovery (module
    docstring), after which the recovered level is the healthy one."""
    stretches = []
    healthy = baseline
    first = None
    for segment, level in enumerate(levels):
        slow = level > healthy * (1 + min_slowdown) and past_warmup[segment]
        # the job back at its healthy level right after a slow "recovered" level: that level
        # was a weaker fault the detector did not part from the one before (a gap of two)
        relapsed = slow and segment + 1 < levels.size and long[segment + 1] and \
            levels[segment + 1] <= healthy * (1 + min_slowdown)
        recovered = (first is not None and long[segment] and not relapsed
                     and levels[segment - 1] >= level * FAIL_SLOW_RATIO
                     and level <= healthy * (1 + RECOVERY_BAND))
        if first is not None and (recovered or not slow):
            stretches.append((first, segment, healthy))
            first = None
            if recovered:
                healthy = float(level)
                slow = False
        if first is None and slow:
            first = segment
        elif first is None and long[segment]:
            healthy = min(healthy, float(level))  # back below a recovered level
    if first is not None:
        stretches.append((first, levels.size, healthy))
    return stretches


def _episode(series: pl.DataFrame, durations: np.ndarray, first: int, stop: int,
             covered: int, baseline: float, rank_events: pl.DataFrame | None) -> dict:
    """The episode of points ``[first, stop)``, which stand for ``covered`` iterations."""
    iterations = series["iteration"]
    start_iteration, end_iteration = int(iterations[first]), int(iterations[stop - 1])
    ranks = None
    if rank_events is not None and rank_events.height:
        near = rank_events.filter(
            pl.col("iteration").is_between(start_iteration - RANK_MATCH_ITERATIONS,
                                           end_iteration))
        ranks = ",".join(str(r) for r in sorted(near["rank"].unique().to_list())) or None
    episode = durations[first:stop]
    return {
        "t_start_ns": series["t_start_ns"][first],
        "t_end_ns": series["t_end_ns"][stop - 1] if stop < durations.size else None,
        "start_iteration": start_iteration, "end_iteration": end_iteration,
        "iterations": covered, "points": stop - first, "duration_s": float(episode.sum()),
        "baseline_s": baseline, "slowdown": float(episode.mean() / baseline),
        "lost_s": float((episode - baseline).sum()), "ranks": ranks,
    }


def detect_series(detector: Detector, matrix: np.ndarray) -> list[np.ndarray]:
    """Run a detector over every row; BOCD-family detectors step all rows together.

    Equal rows are run once: the ranks of a synchronous job reconstructed from its collectives
    share every boundary, so their series are one (64 ranks, 1 distinct series). The result
    is the same as running every copy: a row is detected alone except for BOCD's joint
    pruning, which keeps a run length by its largest probability over the rows, and a copy of
    a row does not change a largest value."""
    if matrix.shape[0] == 0:
        return []
    # rows equal to the bit are copies (a dict of their bytes: np.unique(axis=0) sorts them)
    first: dict[bytes, int] = {}
    for index, row in enumerate(matrix):
        first.setdefault(row.tobytes(), index)
    distinct = matrix[list(first.values())]
    many = getattr(detector, "detect_many", None)
    found = list(many(distinct)) if many is not None else [detector.detect(row)
                                                           for row in distinct]
    copy = dict(zip(first, found, strict=True))
    return [copy[row.tobytes()] for row in matrix]


@dataclass
class _RankBlock:
    """One partition of :func:`detect_rank_events`: a detector over a block of ranks' rows."""

    job: str
    name: str
    detector: Detector
    ranks: list[int]
    matrix: np.ndarray
    iterations: pl.DataFrame

    def run(self) -> pl.DataFrame:
        """The block's change events, ready to write."""
        changes = detect_series(self.detector, self.matrix)
        return pl.concat([change_events(self.job, rank, self.name, self.iterations, row, found)
                          for rank, row, found in zip(self.ranks, self.matrix, changes,
                                                      strict=True)])


@dataclass
class _JobLevel:
    """One partition: a detector over the job-level series, fed point by point as an online
    detector would be (the confirmation points), beside the rank blocks instead of after them
    on the calling machine."""

    job: str
    name: str
    detector: Detector
    series: pl.DataFrame

    def run(self) -> tuple[pl.DataFrame, np.ndarray]:
        """The job-level change events and change points."""
        durations = self.series["duration_s"].to_numpy()
        changes, confirmed = self.detector.confirm(durations)
        return (change_events(self.job, None, self.name, self.series, durations, changes,
                              confirmed), changes)


def _run(partition: _RankBlock | _JobLevel):
    """A detection partition, run in this process or on a Dask worker."""
    return partition.run()


def _rank_blocks(job: str, detectors: dict[str, Detector], series: JobSeries) -> list[_RankBlock]:
    """Every detector over every block of :data:`RANKS_PER_BLOCK` ranks, in rank order."""
    return [_RankBlock(job, name, detector, series.ranks[first:first + RANKS_PER_BLOCK],
                       series.matrix[first:first + RANKS_PER_BLOCK], series.job)
            for name, detector in detectors.items()
            for first in range(0, len(series.ranks), RANKS_PER_BLOCK)]


def _rank_events(detectors: dict[str, Detector], blocks: list[_RankBlock],
                 events: list[pl.DataFrame]) -> dict[str, pl.DataFrame]:
    """Each detector's events of all its blocks, in rank order."""
    found: dict[str, list[pl.DataFrame]] = {name: [] for name in detectors}
    for block, block_events in zip(blocks, events, strict=True):
        found[block.name].append(block_events)
    return {name: pl.concat([schema.table("events").empty(), *frames])
            for name, frames in found.items()}


def _key(partition: _RankBlock | _JobLevel) -> str:
    if isinstance(partition, _JobLevel):
        return f"{partition.name} on the job-level series"
    return f"{partition.name} on ranks {partition.ranks[0]}-{partition.ranks[-1]}"


def detect_rank_events(job: str, detectors: dict[str, Detector], series: JobSeries,
                       executor: Executor | None = None) -> dict[str, pl.DataFrame]:
    """Every rank's change events for each detector: one partition per detector and block of
    ranks, so the result is the same whichever executor runs them, and each partition returns
    its events ready to write (the client only concatenates)."""
    blocks = _rank_blocks(job, detectors, series)
    return _rank_events(detectors, blocks,
                        map_all(executor or LocalExecutor(), _run, blocks, key=_key))


def load_kernels() -> None:
    """Load the compiled kernels of :data:`JOB_DETECTORS` (built ahead of time and cached,
    :mod:`tracekit.core.compiled`) by running each on a short series, as a rank block and as the
    job-level series do: a warm Dask worker's first detection partition then pays none of it
    (``tracekit.core.parallel.WARM_UP``)."""
    points = np.linspace(1.0, 1.1, 2 * WARMUP_ITERATIONS)
    for name in JOB_DETECTORS:
        detector = make_detector(name)
        detect_series(detector, np.vstack([points, points]))
        detector.confirm(points)


@dataclass
class Detection:
    events: pl.DataFrame
    episodes: pl.DataFrame
    notes: list[str] = field(default_factory=list)
    """What the user should know about the series detected on (gapped iteration numbers)."""


def gap_notes(numbers: pl.Series) -> list[str]:
    """A note when the iteration numbers detected on have gaps (a log every N steps, a trace of
    sampled steps, lost lines): detectors see one point per logged iteration, so their minimum
    lengths count logged iterations, while episodes keep the real iteration numbers."""
    if numbers.len() < 2:
        return []
    span = int(numbers.max()) - int(numbers.min()) + 1
    missing = span - numbers.n_unique()
    if missing <= 0:
        return []
    step = int(numbers.sort().diff().drop_nulls().median())
    return [f"iteration numbers have gaps: {missing:,} of the {span:,} from {numbers.min()} to "
            f"{numbers.max()} are missing" + (f" (one every {step} logged)" if step > 1 else "")
            + "; change-point detectors count logged points, episode lengths the iterations "
            "those points stand for"]


def detect_dataset(dataset: Dataset | str | Path, detectors: list[str] | None = None,
                   params: dict | None = None, min_slowdown: float = 0.05,
                   executor: Executor | None = None) -> Detection:
    """Run ``detectors`` (default :data:`JOB_DETECTORS` and the peer comparison, ``peers``) on a
    dataset's iterations; write and return ``events`` and ``episodes`` (replacing earlier ones).
    ``params`` go to every change-point detector, so pass them with a single detector.
    ``executor`` runs the job-level series and the blocks of ranks (default: a local loop);
    the manifest records which ran them."""
    if not isinstance(dataset, Dataset):
        dataset = open_dataset(dataset)
    iterations = dataset.table("iterations").collect()
    series = job_series(iterations)
    if series.job.height == 0:
        raise InputError("the iterations table has no finite durations", str(dataset.path))
    names = detectors or [*JOB_DETECTORS, PEER_DETECTOR]
    if VERDICT_DETECTOR in names:  # the verdict is made of its sources' episodes
        names = list(dict.fromkeys(n for name in names for n in (
            VERDICT_SOURCES if name == VERDICT_DETECTOR else (name,))))
    numbers = series.job["iteration"].to_numpy()  # parameters given are the user's, as given
    chosen = {name: make_detector(name, **params) if params else
              in_iterations(make_detector(name), numbers)
              for name in names if name != PEER_DETECTOR}
    executor = executor or LocalExecutor()
    # the job-level series first: each is one long partition (point by point), the blocks fill in
    levels = [_JobLevel(dataset.job, name, detector, series.job)
              for name, detector in chosen.items()]
    blocks = _rank_blocks(dataset.job, chosen, series)
    found = map_all(executor, _run, [*levels, *blocks], key=_key)
    rank_events = _rank_events(chosen, blocks, found[len(levels):])
    events, episodes = [], []
    for level, (job_events, job_changes) in zip(levels, found[:len(levels)], strict=True):
        events.append(pl.concat([job_events, rank_events[level.name]]))
        episodes.append(find_episodes(dataset.job, level.name, series.job, job_changes,
                                      min_slowdown, rank_events[level.name]))
    if PEER_DETECTOR in names:
        episodes.append(straggler_episodes(
            dataset.job, _preferred_iterations(iterations), dataset.table("op_traces").collect(),
            rank_scans(dataset, "collectives",
                       iterations["rank"].drop_nulls().unique().sort().to_list()),
            dataset.table("parallel_layout").collect(), min_slowdown, executor))
    step = sampling_phase_step(_source_rows(iterations))
    detection = Detection(pl.concat([schema.table("events").empty(), *events]),
                          pl.concat([schema.table("episodes").empty(), *episodes]),
                          gap_notes(series.job["iteration"]) + ([] if step is None else [
                              f"ranks sample at their own times: their samples are put on a "
                              f"common grid of one every {step}, whose numbers episodes carry"]))
    with dataset.updating():
        dataset.write_table("events", detection.events)
        dataset.write_table("episodes", detection.episodes)
        record_build(dataset, "detect", executor, ranks_per_block=RANKS_PER_BLOCK)
    return detection

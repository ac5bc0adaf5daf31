"""Localise and explain each fail-slow: which rank, GPU, host or link, and why.

``attribute_dataset(path)`` fills the verdict columns of every episode (kind, cause, target,
confidence, evidence) and its cost when missing, and judges pipeline-stage imbalance from op
traces. The job-wide signals are computed by partitions (:mod:`.job_signals`). Signals, one
module each: communicator instances (:mod:`.groups`, :mod:`.instances`), arrival skew and own
compute time (:mod:`.arrival`), cross-group profiling (:mod:`.profiling`), an episode's timing
reduced from bounded pieces (:mod:`.timing`), link localisation (:mod:`.links`), monitoring
evidence (:mod:`.evidence`), their combination (:mod:`.verdict`), stage imbalance
(:mod:`.stages`) and, for profiler traces, the time split per call and iteration with its job
verdict (:mod:`.time_split`). A job whose collective calls have no times is decided from its
monitoring alone (:func:`_from_monitoring`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from tracekit.attribute.evidence import SCRAPE_NS, Window, scrape_interval_ns
from tracekit.attribute.job_signals import JobSignals, scratch_folder, signals_in_windows
from tracekit.attribute.stages import StageVerdict, op_split, stage_imbalance
from tracekit.attribute.telemetry import monitoring_reach
from tracekit.attribute.time_split import TimeVerdict, split_dataset, with_time_split
from tracekit.attribute.timing import episode_timings, shared_reads
from tracekit.attribute.verdict import (
    CONFIDENCE_TIMING,
    INSUFFICIENT,
    Signals,
    Verdict,
    decide,
    from_monitoring,
)
from tracekit.attribute.windows import episode_runs
from tracekit.core import schema
from tracekit.core.culprits import LOCALISING_DETECTORS, named_ranks
from tracekit.core.dataset import Dataset, open_dataset
from tracekit.core.identity import rank_gpus
from tracekit.core.parallel import Executor, LocalExecutor, map_all, record_build
from tracekit.core.thresholds import WARMUP_ITERATIONS

VERDICT_COLUMNS = ("kind", "cause", "target", "confidence", "inferred", "evidence")

MONITORING_TABLES = ("gpu_metrics", "host_metrics", "nic_counters")


@dataclass
class Attribution:
    """Attributed episodes (the whole ``episodes`` table, as written), the stage verdict of
    jobs with op traces and the time-split verdict of jobs with profiler traces."""

    episodes: pl.DataFrame
    stages: StageVerdict | None
    time_split: TimeVerdict | None = None


def attribute_dataset(dataset: Dataset | str | Path,
                      executor: Executor | None = None) -> Attribution:
    """Attribute every episode of ``dataset`` and write them back to its ``episodes`` table.
    ``executor`` runs the partitions: batches of ranks, bins of communicator groups, then one
    episode each (default: a local loop)."""
    if not isinstance(dataset, Dataset):
        dataset = open_dataset(dataset)
    episodes = dataset.table("episodes").collect()
    op_traces = dataset.table("op_traces").collect()
    timed = split_dataset(dataset)
    executor = executor or LocalExecutor()
    if episodes.is_empty():  # recorded all the same: it is up to date with this detect run
        with dataset.updating():
            record_build(dataset, "attribute", executor, episodes=0)
        return Attribution(episodes, stage_imbalance(op_traces), timed)
    attributed, partitions = _attribute(dataset, episodes, executor)
    attributed = with_detected_culprits(episodes, attributed, op_traces)
    if timed is not None:
        attributed = with_time_split(attributed, dataset.table("time_split").collect())
    stages = stage_imbalance(op_traces, named_ranks(attributed))
    with dataset.updating():
        dataset.write_table("episodes", attributed)
        record_build(dataset, "attribute", executor, partitions=partitions)
    return Attribution(attributed, stages, timed)


def attribute_episodes(dataset: Dataset, episodes: pl.DataFrame,
                       executor: Executor | None = None) -> pl.DataFrame:
    """``episodes`` with the verdict columns filled from the dataset's other tables; the job's
    signals are computed and each episode decided by ``executor`` (default: a local loop)."""
    return _attribute(dataset, episodes, executor or LocalExecutor())[0]


def _attribute(dataset: Dataset, episodes: pl.DataFrame,
               executor: Executor) -> tuple[pl.DataFrame, dict[str, int]]:
    """The attributed episodes and the partitions of each step."""
    with episode_windows(dataset, episodes, executor) as (job, windows, ranks):
        if windows is None:
            verdicts = _from_monitoring(dataset, episodes)
        else:
            # A verdict depends on its window only, and the detectors often agree on an
            # episode: each distinct window is decided once, beside those it nearly coincides
            # with (their signals read once).
            names = {}
            for row, window in zip(episodes.iter_rows(named=True), windows, strict=True):
                names.setdefault(window, f"{row['detector']} episode {row['episode']}")
            partitions = [_Episodes(" + ".join(names[w] for w in together), tuple(together), job,
                                    ranks, str(dataset.path))
                          for together in shared_reads(names)]
            results = map_all(executor, _decide, partitions,
                              key=lambda partition: partition.name)
            decided = {window: verdict
                       for partition, verdicts in zip(partitions, results, strict=True)
                       for window, verdict in zip(partition.windows, verdicts, strict=True)}
            verdicts = [decided[window] for window in windows]
    filled = pl.DataFrame(
        [{c: getattr(v, c) for c in VERDICT_COLUMNS} for v in verdicts],
        schema={c: schema.EPISODES.schema[c] for c in VERDICT_COLUMNS})
    attributed = (_with_cost(dataset, episodes.drop(VERDICT_COLUMNS, strict=False)
                             .hstack(filled))
                  .select(schema.EPISODES.column_names))
    return attributed, {**job.partitions, "episodes": episodes.height}


@contextmanager
def episode_windows(dataset: Dataset, episodes: pl.DataFrame, executor: Executor
                    ) -> Iterator[tuple[JobSignals, list[Window] | None, pl.DataFrame | None]]:
    """The job's signals in the windows of ``episodes`` (:mod:`.windows`: each one's run and
    baseline, after the warm-up), each row's window and the ranks' GPUs
    (:func:`_rank_gpus`); windows and ranks are None when the job has no matched collective.
    The signals' parts last while the context is open; :func:`.timing.episode_timings` reads
    them (the verdicts, and the margins of ``benchmarks/accuracy_margins.py``)."""
    runs = episode_runs(episodes)
    warm = _warmup_end(dataset)
    with scratch_folder(dataset) as scratch:
        job = signals_in_windows(dataset, [run.widest(warm) for run in runs], executor, scratch)
        if not job.instance_count:
            yield job, None, None
            return
        trace_start, trace_end = _trace_span(dataset, job.span_ns, warm)
        yield (job, [run.window(trace_start, trace_end) for run in runs],
               _rank_gpus(dataset, job))


UNTIMED_STEPS = ("no collective calls with timestamps: no timing per group or rank, so the "
                 "cause is not observable from step times alone (ingest NCCL logs or the hook "
                 "CSV)")
"""Why an episode of steps without a clock is not attributed: no monitoring can be read at
its time either."""

NOT_OBSERVABLE = ("cause not observable from step times alone: no collective calls, op traces "
                  "or monitoring on the steps' clock say whether its compute or its "
                  "communication grew")


def with_detected_culprits(detected: pl.DataFrame, attributed: pl.DataFrame,
                           op_traces: pl.DataFrame) -> pl.DataFrame:
    """``attributed`` where a :data:`LOCALISING_DETECTORS` episode got no culprit: its
    detector's ranks as the target, with where their extra time went when op traces tell
    (compute against communication), else that step times cannot tell the cause. One answer:
    the verdict never drops the rank its detector found."""
    rows = []
    for found, row in zip(detected.iter_rows(named=True), attributed.iter_rows(named=True),
                          strict=True):
        if row["detector"] in LOCALISING_DETECTORS and not row["target"] and found["ranks"]:
            ranks = [int(r) for r in found["ranks"].split(",")]
            split = op_split(op_traces, ranks, row["start_iteration"], row["end_iteration"])
            why = NOT_OBSERVABLE if split is None else (
                f"{split.text(ranks)}, and no telemetry on the steps' clock says why")
            row |= {"kind": "unknown" if split is None else split.kind, "cause": INSUFFICIENT,
                    "target": "+".join(f"rank:{r}" for r in ranks),
                    "confidence": CONFIDENCE_TIMING, "inferred": False,
                    "evidence": f"{(found['evidence'] or '').split('; ')[0]}; {why}"}
        rows.append(row)
    return pl.DataFrame(rows, schema=attributed.schema)



@dataclass
class _Episodes:
    """One partition of the verdicts: windows decided together (:func:`.timing.shared_reads`)
    and where their signals are (small: the worker reads its cut of the job itself)."""

    name: str
    windows: tuple[Window, ...]
    job: JobSignals
    ranks: pl.DataFrame
    """:func:`_rank_gpus`"""
    dataset: str


def _decide(partition: _Episodes) -> list[Verdict]:
    """The verdicts of a partition's windows, run in this process or on a Dask worker: their
    timing reduced from the job's parts one at a time (:func:`.timing.episode_timings`), then
    each one's monitoring."""
    ranks, dataset = partition.ranks, open_dataset(partition.dataset)
    hosts = dict(ranks.select("rank", "host").iter_rows())
    timings = episode_timings(partition.job, partition.windows, ranks)
    return [decide(Signals(window, timing, ranks, hosts, *episode_monitoring(dataset, window)))
            for window, timing in zip(partition.windows, timings, strict=True)]


def _rank_gpus(dataset: Dataset, job: JobSignals) -> pl.DataFrame:
    """rank, host, cuda_dev and gpu (the physical GPU: :func:`~tracekit.core.identity.rank_gpus`,
    else the CUDA device) of every rank with matched collectives; found once for all the
    episodes, as it reads the job's whole gpu_metrics (a batch at a time)."""
    return _with_gpus(dataset, job.ranks)


def _with_gpus(dataset: Dataset, ranks: pl.DataFrame) -> pl.DataFrame:
    """``ranks`` (rank, host, cuda_dev) with the physical GPU of each."""
    gpus = rank_gpus(dataset.table("comms").collect(), dataset.table("gpu_metrics"))
    return (ranks.join(gpus.select("rank", "gpu"), on="rank", how="left")
            .with_columns(pl.col("gpu").fill_null(pl.col("cuda_dev"))))


def _from_monitoring(dataset: Dataset, episodes: pl.DataFrame) -> list[Verdict]:
    """The verdicts of a job whose collective calls have no times (NCCL before 2.26 with
    ``NCCL_DEBUG=INFO``; the iterations come from the training log): each episode's run over
    the iterations' span, decided from monitoring alone (:func:`.verdict.from_monitoring`),
    with the ranks, hosts and GPUs and the rings (each communicator's members by their rank
    in it) from the NCCL Init lines."""
    comms = dataset.table("comms").filter(pl.col("rank").is_not_null()).collect()
    ranks = _with_gpus(dataset, comms.sort("rank").unique("rank", keep="first",
                                                          maintain_order=True)
                       .select(pl.col("rank").cast(pl.Int32), "host", "cuda_dev"))
    rings = (comms.sort("comm_rank").group_by(pl.coalesce("comm_id", "comm"))
             .agg(pl.col("rank").unique(maintain_order=True))["rank"].to_list())
    steps = (dataset.table("iterations").filter(pl.col("t_start_ns").is_not_null())
             .select(pl.col("t_start_ns").min(), pl.col("t_end_ns").max()).collect())
    if steps.height == 0 or steps["t_start_ns"][0] is None:
        return [Verdict("unknown", INSUFFICIENT, None, 0.0, UNTIMED_STEPS)] * episodes.height
    start, end = _trace_span(dataset, (steps["t_start_ns"][0],
                                       steps["t_end_ns"][0] or steps["t_start_ns"][0]),
                             _warmup_end(dataset))
    runs = [run if since is None else run.healthy_by(since)
            for run, since in zip(episode_runs(episodes), _logged_since(dataset, episodes),
                                  strict=True)]
    windows = [run.window(start, end) for run in runs]
    decided = {window: from_monitoring(window, ranks, rings,
                                       *episode_monitoring(dataset, window))
               for window in set(windows)}
    return [decided[window] for window in windows]


def _logged_since(dataset: Dataset, episodes: pl.DataFrame) -> list[int | None]:
    """Per episode, on a log that prints every n-th iteration, where the logged point two
    before it ended (None on a dense log): a point averages the iterations since the one
    before it (Megatron's elapsed time per iteration over its log interval), so the point
    before the episode's first may hold the slowdown's first iterations averaged under the
    threshold, and the time since the point before that is neither healthy nor the episode's
    (a thermal GPU throttled 7 iterations before the point that showed it, or 2 iterations
    before the point before, had its readings counted "before" and was named a degradation;
    counted in the episode, a congestion's surge held in too few of its scrapes)."""
    logged = (dataset.table("iterations")
              .filter(pl.col("source") != "truth", pl.col("t_end_ns").is_not_null())
              .group_by("iteration").agg(pl.col("t_end_ns").max()).sort("iteration").collect())
    step = logged["iteration"].diff().median() if logged.height > 1 else None
    if step is None or step <= 1:
        return [None] * episodes.height
    return (episodes.select(pl.int_range(pl.len()).alias("_row"),
                            (pl.col("start_iteration") - int(step) - 1).alias("_logged"))
            .sort("_logged")
            .join_asof(logged.rename({"iteration": "_logged", "t_end_ns": "_since"}),
                       on="_logged", strategy="backward")
            .sort("_row")["_since"].to_list())


def episode_monitoring(dataset: Dataset, window: Window) -> list[pl.DataFrame]:
    """The :data:`MONITORING_TABLES` in the time the verdict of ``window`` reads
    (:func:`.telemetry.monitoring_reach`), not the whole job's: read for a 15 s scrape first,
    and again wider while the scrapes read are further apart than that. The ``ts_ns``
    predicate is pushed down to the Parquet scan."""
    tables = [dataset.table(name) for name in MONITORING_TABLES]
    read = monitoring_reach(window, SCRAPE_NS)
    while True:
        frames = [table.filter(pl.col("ts_ns").is_between(*read, closed="left")).collect()
                  for table in tables]
        start, end = monitoring_reach(window, max(scrape_interval_ns(f) for f in frames))
        if read[0] <= start and end <= read[1]:
            return frames
        read = min(read[0], start), max(read[1], end)


def _trace_span(dataset: Dataset, span_ns: tuple[int, int],
                warmup_end_ns: int | None) -> tuple[int, int]:
    """Where a healthy baseline may start (after the warm-up iterations) and the trace end,
    from the first and last collective instance."""
    start, end = span_ns
    return (start if warmup_end_ns is None else max(start, warmup_end_ns)), end + 1


def _warmup_end(dataset: Dataset) -> int | None:
    """The start of the first iteration past the warm-up (None without timed iterations)."""
    warm = (dataset.table("iterations").filter(pl.col("t_start_ns").is_not_null())
            .group_by("iteration").agg(pl.col("t_start_ns").min()).sort("iteration")
            .collect())
    # by iteration number: a training log that prints every 10th iteration has a tenth of
    # the rows
    warm = warm.filter(pl.col("iteration") >= pl.col("iteration").first() + WARMUP_ITERATIONS)
    return warm["t_start_ns"][0] if warm.height else None


def _with_cost(dataset: Dataset, episodes: pl.DataFrame) -> pl.DataFrame:
    """Fill ``lost_s`` and ``jct_slowdown`` where a detector left them empty: time over the
    healthy baseline inside the episode, as a share of the job's healthy completion time."""
    if episodes.filter(pl.col("lost_s").is_null() | pl.col("jct_slowdown").is_null()).is_empty():
        return episodes
    job = (dataset.table("iterations").group_by("iteration")
           .agg(pl.col("duration_s").median()).collect())
    iterations = job.height
    lost = [
        None if row["baseline_s"] is None or row["start_iteration"] is None else float(
            job.filter(pl.col("iteration").is_between(row["start_iteration"],
                                                      row["end_iteration"]))
            .select((pl.col("duration_s") - row["baseline_s"]).sum()).item())
        for row in episodes.iter_rows(named=True)]
    return episodes.with_columns(
        pl.col("lost_s").fill_null(pl.Series(lost, dtype=pl.Float64)),
    ).with_columns(pl.col("jct_slowdown").fill_null(
        pl.col("lost_s") / (pl.col("baseline_s") * iterations)))

"""Exports beside a report, for the tools people already use: the job's timeline as a Chrome /
Perfetto trace (HTA users open timelines in ui.perfetto.dev or chrome://tracing), the episode,
evidence and accuracy tables as CSV and Parquet (a spreadsheet, as TraceLens users get), and
one JSON summary per job for scripts and dashboards.

Trace layout (Chrome trace event format, JSON object form): process 1 holds one thread per rank
with an ``X`` (complete) slice per iteration; process 2 holds the verdict's episodes as slices
with cause, culprit, slowdown and evidence in ``args``; each culprit rank gets an instant
(``ph`` ``i``) on its own track where its episode starts. ``ts`` and ``dur`` are microseconds
since the job's first iteration (``otherData.t0_unix_ns`` gives the epoch).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from tracekit.core.dataset import Dataset, atomic_path
from tracekit.detect.verdict import shown_episodes
from tracekit.evaluate.scoring import Corpus, Evaluation
from tracekit.report.job import job_verdict
from tracekit.report.series import NORMALISED, dataset_axis, series_axis
from tracekit.report.verdict import by_start, culprits, evidence_clauses

EXPORT_FOLDER = "export"
"""Where a report's exports go, beside ``index.html``."""

RANKS_PID = 1
EPISODES_PID = 2
NS_PER_US = 1_000


@dataclass(frozen=True)
class Exported:
    """Where the exports went."""

    folder: Path
    files: list[Path]


def _us(column: str, t0_ns: int) -> pl.Expr:
    return ((pl.col(column) - t0_ns) / NS_PER_US)


def laid_end_to_end(iterations: pl.DataFrame, episodes: pl.DataFrame
                    ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Iterations and episodes on a clock made of the steps themselves, for data without one:
    each job step (its slowest rank's duration, in the series' unit as seconds) starts where
    the previous one ended, every rank's slice at its step's start."""
    steps = (iterations.group_by("iteration")
             .agg(pl.col("duration_s").filter(pl.col("duration_s").is_finite()).max()
                  .fill_null(0.0).alias("step_s"))
             .sort("iteration")
             .with_columns((pl.col("step_s").cum_sum() * 1e9).cast(pl.Int64).alias("_end"))
             .with_columns((pl.col("_end") - (pl.col("step_s") * 1e9).cast(pl.Int64))
                           .alias("_start")))
    laid = (iterations.drop("t_start_ns", "t_end_ns")
            .join(steps.select("iteration", "_start"), on="iteration", how="left")
            .with_columns(pl.col("_start").alias("t_start_ns"),
                          (pl.col("_start") + (pl.col("duration_s").fill_nan(0.0).fill_null(0.0)
                                               * 1e9).cast(pl.Int64)).alias("t_end_ns"))
            .drop("_start"))
    starts = dict(steps.select("iteration", "_start").iter_rows())
    ends = dict(steps.select("iteration", "_end").iter_rows())
    placed = episodes.with_columns(
        pl.col("start_iteration").replace_strict(starts, default=None, return_dtype=pl.Int64)
        .alias("t_start_ns"),
        pl.col("end_iteration").replace_strict(ends, default=None, return_dtype=pl.Int64)
        .alias("t_end_ns"))
    return laid, placed


def chrome_trace(iterations: pl.DataFrame, episodes: pl.DataFrame, job: str) -> dict:
    """The job's iterations per rank and its episodes as a Chrome trace event document; data
    without a clock is drawn on its steps laid end to end (``otherData.clock`` says which)."""
    timed = iterations.filter(pl.col("t_start_ns").is_not_null(), pl.col("t_end_ns").is_not_null())
    clock = "wall clock"
    if timed.is_empty() and iterations.height:
        timed, episodes = laid_end_to_end(iterations, episodes)
        clock = ("steps laid end to end (the data has no wall clock; "
                 + ("durations in seconds)" if series_axis(iterations).seconds
                    else "normalised durations drawn as seconds)"))
    per_rank = timed.filter(pl.col("rank").is_not_null())
    if per_rank.is_empty():  # a job-level framework series: one track
        per_rank = timed.with_columns(pl.lit(0, pl.Int32).alias("rank"))
    t0_ns = int(timed["t_start_ns"].min()) if timed.height else 0
    meta = [{"ph": "M", "pid": RANKS_PID, "tid": 0, "name": "process_name",
             "args": {"name": f"job {job}: iterations per rank"}},
            {"ph": "M", "pid": EPISODES_PID, "tid": 0, "name": "process_name",
             "args": {"name": "fail-slow episodes"}},
            {"ph": "M", "pid": EPISODES_PID, "tid": 1, "name": "thread_name",
             "args": {"name": "verdict"}}]
    ranks = per_rank["rank"].unique().sort().to_list()
    meta += [{"ph": "M", "pid": RANKS_PID, "tid": int(r), "name": "thread_name",
              "args": {"name": f"rank {r}"}} for r in ranks]
    meta += [{"ph": "M", "pid": RANKS_PID, "tid": int(r), "name": "thread_sort_index",
              "args": {"sort_index": int(r)}} for r in ranks]
    slices = per_rank.sort("rank", "t_start_ns").select(
        pl.lit("X").alias("ph"), pl.lit(RANKS_PID).alias("pid"), pl.col("rank").alias("tid"),
        pl.format("iteration {}", "iteration").alias("name"), pl.lit("iteration").alias("cat"),
        _us("t_start_ns", t0_ns).alias("ts"),
        ((pl.col("t_end_ns") - pl.col("t_start_ns")) / NS_PER_US).alias("dur"),
        pl.struct(pl.col("duration_s"), pl.col("quality")).alias("args")).to_dicts()
    t_end_ns = int(timed["t_end_ns"].max()) if timed.height else t0_ns
    marks = []
    for row in by_start(episodes).iter_rows(named=True):
        if row["t_start_ns"] is None:
            continue
        end_ns = row["t_end_ns"] if row["t_end_ns"] is not None else t_end_ns
        name = f"#{row['episode']} {row['cause'] or 'not attributed'}"
        args = {"culprit": row["target"], "cause": row["cause"], "slowdown": row["slowdown"],
                "lost_s": row["lost_s"], "jct_slowdown": row["jct_slowdown"],
                "iterations": f"{row['start_iteration']}-{row['end_iteration']}",
                "evidence": evidence_clauses(row["evidence"])}
        ts = (row["t_start_ns"] - t0_ns) / NS_PER_US
        marks.append({"ph": "X", "pid": EPISODES_PID, "tid": 1, "name": name, "cat": "fail-slow",
                      "ts": ts, "dur": (end_ns - row["t_start_ns"]) / NS_PER_US, "args": args})
        for rank in sorted(culprits(pl.DataFrame([row]))["rank"]):
            marks.append({"ph": "i", "s": "t", "pid": RANKS_PID, "tid": int(rank),
                          "name": f"culprit of {name}", "cat": "fail-slow", "ts": ts,
                          "args": args})
    return {"traceEvents": meta + slices + marks, "displayTimeUnit": "ms",
            "otherData": {"job": job, "t0_unix_ns": t0_ns if clock == "wall clock" else None,
                          "clock": clock}}


def evidence_table(episodes: pl.DataFrame) -> pl.DataFrame:
    """One row per evidence clause: the job, episode, clause number and text."""
    return (episodes.select("job", "episode", pl.col("evidence").fill_null("")
                            .str.split("; ").alias("clause"))
            .explode("clause").filter(pl.col("clause").str.len_chars() > 0)
            .with_columns(pl.int_range(1, pl.len() + 1).over("job", "episode").alias("n"))
            .select("job", "episode", "n", "clause"))


def job_summary(dataset: Dataset, detector: str | None = None) -> dict:
    """The job in one JSON-ready object: size, span, what its series allows (clock, unit,
    coverage), the verdict in words and its episodes. ``lost_s`` is null unless the series is
    in seconds, ``jct_slowdown`` unless every iteration is logged (``logged_share`` is the
    episodes' share of the logged steps' time)."""
    iterations = dataset.table("iterations").collect()
    all_episodes = dataset.table("episodes").collect()
    detector, episodes = shown_episodes(all_episodes, detector)
    said = job_verdict(iterations, dataset_axis(dataset), episodes, all_episodes,
                       dataset.table("events").collect(), dataset.table("op_traces").collect(),
                       detector)
    axis = said.axis
    timed = iterations.drop_nulls(["t_start_ns", "t_end_ns"])
    median = iterations["duration_s"].median() if iterations.height else None
    share = episodes["jct_slowdown"].sum()
    return {
        "job": dataset.job, "detector": detector,
        "iterations": iterations["iteration"].n_unique(),
        "ranks": iterations["rank"].drop_nulls().n_unique(),
        "span_s": (timed["t_end_ns"].max() - timed["t_start_ns"].min()) / 1e9
        if timed.height else None,
        "axis": {"clock": axis.clock, "unit": "s" if axis.seconds else NORMALISED,
                 "steps": "sample seconds" if axis.sample_seconds else "iterations",
                 "first_iteration": axis.first, "last_iteration": axis.last,
                 "coverage": axis.coverage},
        "median_iteration": median,
        "median_iteration_s": median if axis.seconds else None,
        "lost_s": episodes["lost_s"].sum() if axis.seconds else None,
        "jct_slowdown": share if axis.whole_job else None,
        "logged_share": share,
        "verdict": said.sentences,
        "below_threshold": said.below_threshold.to_dicts(),
        "stages": None if said.stages is None else {
            "cause": said.stages.cause, "target": said.stages.target,
            "ranks": said.stages.ranks, "evidence": said.stages.evidence},
        "episodes": [row | {"evidence": evidence_clauses(row["evidence"])}
                     for row in by_start(episodes).to_dicts()],
    }


def _write_json(path: Path, document: dict, indent: int | None = 1) -> Path:
    with atomic_path(path) as temporary:
        temporary.write_text(json.dumps(document, indent=indent, default=str) + "\n")
    return path


def write_tables(folder: Path, tables: dict[str, pl.DataFrame]) -> list[Path]:
    """Each table as ``NAME.csv`` and ``NAME.parquet`` under ``folder``."""
    written = []
    for name, frame in tables.items():
        csv, parquet = folder / f"{name}.csv", folder / f"{name}.parquet"
        with atomic_path(csv) as temporary:
            frame.write_csv(temporary)
        with atomic_path(parquet) as temporary:
            frame.write_parquet(temporary)
        written += [csv, parquet]
    return written


def export_job(dataset: Dataset, folder: str | Path, detector: str | None = None) -> Exported:
    """``trace.json`` (Perfetto / Chrome), ``summary.json``, and the episode and evidence
    tables as CSV and Parquet, under ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    _, episodes = shown_episodes(dataset.table("episodes").collect(), detector)
    files = [_write_json(folder / "trace.json",
                         chrome_trace(dataset.table("iterations").collect(), episodes,
                                      dataset.job), indent=None),
             _write_json(folder / "summary.json", job_summary(dataset, detector))]
    files += write_tables(folder, {"episodes": episodes, "evidence": evidence_table(episodes)})
    return Exported(folder, files)


def export_corpus(corpus: Corpus, evaluation: Evaluation | None, folder: str | Path,
                  detector: str | None = None) -> Exported:
    """The corpus' jobs, the shown detector's episodes and evidence, the accuracy tables (when
    labeled) as CSV and Parquet, and ``summaries/JOB.json`` for every job."""
    from tracekit.core.dataset import open_dataset

    folder = Path(folder)
    (folder / "summaries").mkdir(parents=True, exist_ok=True)
    _, episodes = shown_episodes(corpus.episodes, detector)
    tables = {"jobs": corpus.jobs, "episodes": episodes, "evidence": evidence_table(episodes)}
    if evaluation is not None:
        tables |= {"job_accuracy": evaluation.job_table,
                   "episode_accuracy": evaluation.episode_table,
                   "cause_accuracy": evaluation.cause_table}
    files = write_tables(folder, tables)
    for row in corpus.jobs.iter_rows(named=True):
        files.append(_write_json(folder / "summaries" / f"{row['job']}.json",
                                 job_summary(open_dataset(row["dataset"]), detector)))
    return Exported(folder, files)

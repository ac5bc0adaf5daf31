"""The report of one job: what happened, when, how badly, which culprit and why.

Built from a dataset's canonical tables only, so it works on whatever stages have run: without
episodes it says so; without attribution every episode reads "not attributed".
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from tracekit.attribute.evidence import CONGESTION_COUNTERS
from tracekit.attribute.stages import StageVerdict, stage_imbalance
from tracekit.core.culprits import named_ranks
from tracekit.core.dataset import Dataset, stale_stages
from tracekit.detect.verdict import change_point_detector, shown_episodes, with_verdict
from tracekit.evaluate.scoring import NOT_ATTRIBUTED, episode_matches
from tracekit.report.below_threshold import below_threshold_changes, below_threshold_sentence
from tracekit.report.document import Report, ReportFigure, ReportTable
from tracekit.report.figures import EVIDENCE_PANELS, host_multiples, iteration_timeline
from tracekit.report.series import SeriesAxis, dataset_axis
from tracekit.report.tables import percent
from tracekit.report.time_split import time_split_section
from tracekit.report.verdict import (
    CLOCKED,
    NOT_ATTRIBUTED_REASON,
    by_start,
    evidence_clauses,
    verdict_sentences,
)


def _utc(column: str) -> pl.Expr:
    return pl.from_epoch(pl.col(column), time_unit="ns").dt.strftime("%Y-%m-%d %H:%M:%S")


def episode_table(episodes: pl.DataFrame, axis: SeriesAxis = CLOCKED) -> pl.DataFrame:
    """Episodes as a reader wants them: when (clock time, else iterations only), cost in the
    series' unit, culprit, cause, evidence; unattributed episodes say so instead of leaving
    blanks. Seconds and the JCT share appear only where the series allows them (:mod:`.series`)."""
    columns = [pl.col("episode").alias("#")]
    if axis.clock:
        columns.append(_utc("t_start_ns").alias("start (UTC)"))
    if axis.whole_job:
        columns.append(pl.col("duration_s").round(1).alias("duration (s)"))
    columns.append(pl.format("{}-{}", "start_iteration", "end_iteration").alias(axis.span_name))
    if axis.sampled:
        columns.append(pl.coalesce("points", "iterations").alias(f"{axis.noun()}s"))
    columns.append(pl.format("x{}", pl.col("slowdown").round(3)).alias("slowdown"))
    if axis.seconds:
        columns.append(pl.col("lost_s").round(1).alias("lost (s)"))
    columns.append(percent(pl.col("jct_slowdown"), 2).alias(
        "JCT slowdown" if axis.whole_job else "share of logged time"))
    return by_start(episodes).select(
        *columns,
        pl.col("kind").fill_null("-"),
        pl.col("cause").fill_null(NOT_ATTRIBUTED),
        pl.col("target").fill_null("-").alias("culprit"),
        pl.col("confidence").round(2),
        pl.col("evidence").fill_null("-"),
    )


def detector_comparison(episodes: pl.DataFrame, axis: SeriesAxis = CLOCKED) -> pl.DataFrame:
    """Per detector: its episodes, the iterations (or sample seconds) they span and the time
    they lost (in seconds when the series is; else as a share of the logged steps' time)."""
    lost = (pl.col("lost_s").sum().round(1).alias("lost (s)") if axis.seconds
            else percent(pl.col("jct_slowdown").sum(), 2).alias("share of logged time"))
    return (episodes.group_by("detector")
            .agg(pl.len().alias("episodes"), pl.col("iterations").sum().alias(axis.span_name),
                 lost,
                 pl.col("ranks").drop_nulls().unique().sort().str.join("; ").alias("ranks"))
            .sort("detector"))


VERDICT_ORDER = ("confirmed", "unsuspected-slow", "slow", "refuted", "not-testable",
                 "healthy")
"""Validation verdicts, the ones that change what an operator does first."""


def validation_table(validations: pl.DataFrame) -> pl.DataFrame:
    """Hardware checks (``tracekit validate``) as a reader wants them: the episode they ran
    for, the unit, the verdict and the measurement behind it; suspects first."""
    rank = pl.col("verdict").replace_strict(
        {v: i for i, v in enumerate(VERDICT_ORDER)}, default=len(VERDICT_ORDER))
    return validations.sort("episode", rank, "check", "target", nulls_last=True).select(
        pl.col("episode").cast(pl.String).fill_null("-").alias("episode"),
        "check", "target",
        pl.when(pl.col("suspect")).then(pl.lit("yes")).otherwise(pl.lit("no")).alias("suspect"),
        "verdict",
        pl.format("x{}", pl.col("slowdown").round(3)).fill_null("-").alias("slowdown"),
        pl.format("x{}", (1 + pl.col("threshold")).round(3)).fill_null("-").alias("slow above"),
        pl.format("{} {}", pl.col("rate").round(2), pl.col("rate_unit")).fill_null("-")
        .alias("rate"),
        pl.col("evidence").fill_null("-"),
        pl.col("device").fill_null("-"),
        _utc("ts_ns").alias("checked (UTC)"),
    )


def _validation_section(report: Report, validations: pl.DataFrame) -> None:
    counts = validations.group_by("verdict").len()
    tally = dict(zip(counts["verdict"].to_list(), counts["len"].to_list(), strict=True))
    ordered = [v for v in VERDICT_ORDER if v in tally] + sorted(set(tally) - set(VERDICT_ORDER))
    section = report.section("Hardware validation")
    section.paragraphs.append(
        f"{validations.height} GEMM / P2P check result(s) (`tracekit validate`): "
        + ", ".join(f"{tally[v]} {v}" for v in ordered) + ". A suspect found slow is "
        "confirmed, one measured healthy is refuted; a unit the episode did not name is slow "
        "or healthy (a slow one is hardware the trace missed).")
    section.tables.append(ReportTable("Validation verdicts", validation_table(validations)))


@dataclass(frozen=True)
class JobVerdict:
    """What a job's verdict says, in the words of its series' axis: the report's verdict
    section and the export's summary read the same one."""

    axis: SeriesAxis
    sentences: list[str]
    below_threshold: pl.DataFrame
    """:func:`.below_threshold.below_threshold_changes`"""
    stages: StageVerdict | None


def job_verdict(iterations: pl.DataFrame, axis: SeriesAxis, episodes: pl.DataFrame,
                all_episodes: pl.DataFrame, events: pl.DataFrame, op_traces: pl.DataFrame,
                detector: str, unattributed: str = NOT_ATTRIBUTED_REASON) -> JobVerdict:
    """The verdict of ``detector``'s ``episodes`` in the words of the iterations' ``axis``
    (:func:`.series.dataset_axis`): a sentence per episode, per change below the fail-slow
    threshold, the pipeline stages of op traces, and what a gapped or normalised series cannot
    tell; ``unattributed`` says why an episode without a cause has none."""
    small = below_threshold_changes(events, iterations, episodes,
                                    change_point_detector(detector))
    stages = stage_imbalance(op_traces, named_ranks(all_episodes))
    median_s = iterations["duration_s"].median() if iterations.height else None
    sentences = verdict_sentences(episodes, median_s, axis, unattributed)
    sentences += [below_threshold_sentence(row, axis) for row in small.iter_rows(named=True)]
    if stages is not None:
        sentences.append(stage_sentence(stages))
    sentences += [s for s in (axis.coverage_sentence(), axis.units_sentence()) if s]
    return JobVerdict(axis, sentences, small, stages)


def stage_sentence(stages: StageVerdict) -> str:
    """The pipeline-stage verdict of op traces as the report's verdict says it."""
    if stages.target is None:
        return f"Pipeline stages: {stages.evidence}."
    return (f"The job's pace is set by a pipeline imbalance from its first step (a property of "
            f"its layout, not a fail-slow): {stages.evidence}.")


def _collect(dataset: Dataset, name: str) -> pl.DataFrame:
    return dataset.table(name).collect()


def _evidence(dataset: Dataset, t_min_ns: int, t_max_ns: int) -> tuple[pl.DataFrame,
                                                                        pl.DataFrame]:
    """GPU metrics and congestion counters (CNP, ECN marks) inside the job's time span (only
    what the figure shows)."""
    in_span = pl.col("ts_ns").is_between(t_min_ns, t_max_ns)
    metrics = [name for name, _, _ in EVIDENCE_PANELS]
    gpu = dataset.table("gpu_metrics").filter(in_span & pl.col("metric").is_in(metrics)).collect()
    nic = dataset.table("nic_counters").filter(
        in_span & pl.col("counter").is_in(CONGESTION_COUNTERS)).collect()
    return gpu, nic


def _why_unattributed(dataset: Dataset, stale: dict[str, str]) -> str:
    """Why an episode has no cause: attribution found none, is out of date, or never ran."""
    if "attribute" in stale:
        return "the attribution is out of date, see the summary"
    if "attribute" not in dataset.manifest.get("build", {}):
        return f"attribution has not run; run `tracekit attribute {dataset.path}`"
    return "no culprit or cause was found"


def job_report(dataset: Dataset, detector: str | None = None) -> Report:
    """The report of the job in ``dataset``: summary, episodes, timeline with evidence, and,
    when the dataset holds labels, how the detection compares with the ground truth."""
    iterations = _collect(dataset, "iterations")
    all_episodes = _collect(dataset, "episodes")
    detector, episodes = shown_episodes(all_episodes, detector)
    events_all = _collect(dataset, "events")
    events = events_all.filter(pl.col("detector") == change_point_detector(detector))
    labels = _collect(dataset, "labels")
    report = Report(f"tracekit report: job {dataset.job}")
    axis = dataset_axis(dataset)
    timed = iterations.filter(pl.col("t_start_ns").is_not_null(), pl.col("t_end_ns").is_not_null())
    job_s = (timed["t_end_ns"].max() - timed["t_start_ns"].min()) / 1e9 if timed.height else None
    detected = "detect" in dataset.manifest.get("build", {}) or all_episodes.height > 0
    stale = stale_stages(dataset)
    median_s = iterations["duration_s"].median() if iterations.height else None
    said = job_verdict(iterations, axis, episodes, all_episodes, events_all,
                       _collect(dataset, "op_traces"), detector,
                       _why_unattributed(dataset, stale))
    small = said.below_threshold
    if iterations.height and detected:
        verdict = report.section(f"Verdict ({detector})")
        verdict.lead = True
        verdict.paragraphs += said.sentences
        verdict.items += [f"#{row['episode']}: {clause}"
                          for row in by_start(episodes).iter_rows(named=True)
                          for clause in evidence_clauses(row["evidence"])]

    summary = report.section("Summary")
    summary.paragraphs += [f"Out of date: {stage} ({why})." for stage, why in stale.items()]
    if iterations.height == 0:
        summary.paragraphs.append(
            "No iterations in this dataset: no rank repeats a pattern of collective calls and "
            f"no framework log gives iteration times (`tracekit info {dataset.path}` shows what "
            "was ingested)." if "iterations" in dataset.manifest.get("build", {}) else
            f"No iterations in this dataset: run `tracekit iterations {dataset.path}`.")
    else:
        span = "" if job_s is None else f" over {job_s / 60:.1f} min"
        timing = ("no iteration has a duration" if median_s is None
                  else f"median iteration time {axis.value(median_s)}")
        stretch = f"{'seconds ' if axis.sample_seconds else ''}{axis.first}-{axis.last}"
        logged = (f"{axis.logged:,} {axis.noun()}s of {stretch}" if axis.sampled
                  else f"{axis.logged:,} {axis.noun()}s")
        who = (f"on {axis.ranks} ranks" if axis.ranks
               else "as one job-level series (no per-rank times)")
        summary.paragraphs.append(f"{logged}{span} {who}; {timing}.")
    if not detected:
        summary.paragraphs.append("Detection has not run on this dataset: run `tracekit detect`.")
    else:
        verdict = f"{episodes.height} fail-slow episode(s)" if episodes.height else "none"
        below = f"; {small.height} change(s) below the fail-slow threshold" if small.height else ""
        summary.paragraphs.append(f"Verdict ({detector}): {verdict}; {events.height} change "
                                  f"point(s) of {change_point_detector(detector)}{below}.")
    if episodes.height:
        lost, jct = episodes["lost_s"].sum(), episodes["jct_slowdown"].sum()
        if axis.whole_job:
            summary.paragraphs.append(f"Time lost to fail-slows: {lost:.1f} s "
                                      f"(JCT slowdown {100 * jct:.2f} %).")
        else:
            summary.paragraphs.append(
                f"Fail-slows took {100 * jct:.2f} % of the logged steps' time"
                + (f" ({lost:.1f} s)" if axis.seconds else "")
                + "; the job's own lost time is not known from "
                + ("a sample of its steps." if axis.sampled else "normalised step times."))
        summary.tables.append(ReportTable(f"Fail-slow episodes ({detector}); their evidence is "
                                          "listed under the verdict",
                                          episode_table(episodes, axis).drop("evidence")))
    time_split_section(report, dataset, episodes)
    if iterations.height and iterations["duration_s"].is_not_null().any():
        gpu, nic = (_evidence(dataset, timed["t_start_ns"].min(), timed["t_end_ns"].max())
                    if timed.height else (dataset.table("gpu_metrics").head(0).collect(),
                                          dataset.table("nic_counters").head(0).collect()))
        steps = "sample second" if axis.sample_seconds else "iteration"
        figure = iteration_timeline(timed if timed.height else iterations, events, episodes,
                                    gpu, nic, title=f"Job {dataset.job}: iteration time and "
                                    "evidence", small_changes=small,
                                    unit="s" if axis.seconds else "normalised", steps=steps)
        axis_words = "" if timed.height else f" on the {steps} axis (the log has no clock)"
        report.section("Timeline").figures.append(ReportFigure(
            "timeline", figure,
            f"Iteration time per rank{axis_words} with {change_point_detector(detector)} change "
            "points (dashed), changes below the fail-slow threshold (dotted) and fail-slow "
            "episodes (shaded, labeled with cause, culprit and slowdown), over the evidence "
            "recorded at the time."))
        multiples = (host_multiples(gpu, episodes, timed["t_start_ns"].min())
                     if timed.height else None)
        if multiples is not None:
            report.sections[-1].figures.append(ReportFigure(
                "sm_clock_per_host", multiples,
                "SM clock per host, one small panel each: where the GPU that left its peers "
                "sits."))
    if labels.height:
        truth = report.section("Ground truth")
        matches = episode_matches(labels, episodes, [detector])
        benign = labels.filter(~pl.col("fail_slow"))
        labels = labels.filter(pl.col("fail_slow"))
        if benign.height:
            counts = benign.group_by("cause").len().sort("len", "cause", descending=[True, False])
            truth.paragraphs.append(
                "Benign disturbances in the labels (not fail-slows): "
                + ", ".join(f"{row['cause']} x{row['len']}" for row in counts.iter_rows(named=True))
                + ".")
        truth.tables.append(ReportTable("Labeled fail-slows and their detection", labels.select(
            pl.col("episode").alias("label"), "fail_slow", "kind", "cause", "target",
            _utc("t_start_ns").alias("start (UTC)"),
            ((pl.col("t_end_ns") - pl.col("t_start_ns")) / 1e9).round(1).alias("duration (s)"),
            pl.col("severity").round(2),
        ).join(matches.select(pl.col("label_episode").alias("label"),
                              pl.col("detected_episode").alias("detected as"),
                              pl.col("delay_s").round(1).alias("delay (s)"),
                              pl.col("delay_iterations").alias("delay (iterations)"),
                              pl.col("target_correct").alias("culprit right"),
                              pl.col("cause_correct").alias("cause right")),
               on="label", how="left")))
    if all_episodes.height:
        comparison = report.section("Detector comparison")
        comparison.paragraphs.append(
            f"Episodes of every detector that ran; the verdict above is {detector}'s.")
        comparison.tables.append(ReportTable("Episodes per detector",
                                             detector_comparison(with_verdict(all_episodes), axis)))
    validations = _collect(dataset, "validations")
    if validations.height:
        _validation_section(report, validations)
    quarantined = sum(s.get("quarantined", 0) for s in dataset.manifest.get("sources", []))
    if quarantined:
        report.section("Input quality").paragraphs.append(
            f"{quarantined:,} input lines were quarantined (see the dataset's quarantine table).")
    return report

"""The report of a corpus of jobs: the paper's Table 1 (causes), Figure 1 (duration and
JCT-slowdown CDFs per category), Tables 3 and 4 (detector accuracy) and the iteration-time
reconstruction error per parallel layout."""

from __future__ import annotations

import polars as pl

from tracekit.characterise.jobs import (
    cause_table,
    fail_slow_durations,
    job_summary_from_episodes,
    job_summary_from_labels,
)
from tracekit.core.dataset import open_dataset
from tracekit.detect.verdict import VERDICT_DETECTOR
from tracekit.evaluate.scoring import Corpus, Evaluation, evaluate
from tracekit.report.document import Report, ReportFigure, ReportTable
from tracekit.report.figures import cdf_figure
from tracekit.report.series import dataset_axis
from tracekit.report.tables import (
    accuracy_tables,
    cause_accuracy_table,
    episode_accuracy_table,
    percent,
)

PAPER_MEAN_DURATION_MIN = {"compute": 10.0, "communication": 24.0, "large": 72.0}
"""Greyhound (ATC 2025) section 3: compute fail-slows last about 10 min on average, communication
ones about 24 min, those of large jobs 72 min. The paper prints its Figure 1 curves without
their data, so a report draws these means beside the measured CDFs."""

PAPER_MEAN_JCT_SLOWDOWN_PCT = {"compute": 11.79, "communication": 15.45, "large": 34.59}
"""Greyhound's Table 1: mean JCT slowdown of the 1-node probing (compute), 4-node probing
(communication) and large jobs."""

PAPER_LARGE_JCT_POINT = (50.0, 0.80)
"""Greyhound: 20 % of the large jobs were slowed by more than 50 %, a point of its Figure 1b."""


def paper_references(categories: list[str], means: dict[str, float], unit: str,
                     point: bool = False
                     ) -> tuple[tuple[str | None, str, float, float | None], ...]:
    """The paper's figures for the categories in this corpus, as :func:`cdf_figure`
    references."""
    marks = [(c, f"paper: {c} mean {means[c]:g}{unit}", means[c], None)
             for c in categories if c in means]
    if point and "large" in categories:
        marks.append(("large", "paper: 20 % of large jobs > 50 %", *PAPER_LARGE_JCT_POINT))
    return tuple(marks)


def reconstruction_table(errors: pl.DataFrame) -> pl.DataFrame:
    """Iteration-time reconstruction error per layout (the paper reports < 1.2 %)."""
    return (errors.group_by("layout").agg(
        jobs=pl.len(), iterations=pl.col("matched").sum(),
        median=pl.col("median_rel_error").median(), worst_p99=pl.col("p99_rel_error").max())
        .sort("layout")
        .select(pl.col("layout").fill_null("unknown"), "jobs", "iterations",
                percent(pl.col("median"), 2).alias("median error"),
                percent(pl.col("worst_p99"), 2).alias("worst p99 error")))


def without_job_time(jobs: pl.DataFrame) -> list[str]:
    """The jobs whose slowdown share is no JCT slowdown: their step times are normalised or a
    sample of the run (:attr:`.series.SeriesAxis.whole_job`), so an episode's share is of the
    logged steps' time, and the job's completion time is not in the data."""
    return [row["job"] for row in jobs.iter_rows(named=True)
            if not dataset_axis(open_dataset(row["dataset"])).whole_job]


def corpus_report(corpus: Corpus, title: str, detector: str | None = None,
                  evaluation: Evaluation | None = None) -> Report:
    """Characterisation (from labels when the corpus has them, else from ``detector``'s
    attributed episodes), accuracy of every detector, and reconstruction error."""
    report = Report(title)
    detector = detector or VERDICT_DETECTOR
    labeled = corpus.labels.height > 0
    counts = corpus.jobs.group_by("category").len().sort("category")
    overview = report.section("Corpus")
    overview.paragraphs.append(
        f"{corpus.jobs.height} jobs: " + ", ".join(
            f"{row['len']} {row['category']}" for row in counts.iter_rows(named=True)) + ".")
    jct = (corpus.episodes.filter(pl.col("detector").eq_missing(detector))
           .group_by("job").agg(pl.col("jct_slowdown").sum()))
    jct = corpus.jobs.select("job").join(jct, on="job", how="left").with_columns(
        pl.col("jct_slowdown").fill_null(0.0))
    if labeled:
        summary = job_summary_from_labels(corpus.jobs, corpus.labels, jct)
        durations = fail_slow_durations(corpus.labels, corpus.jobs)
        basis = f"causes and durations from the labels; JCT slowdown measured by {detector}"
    else:
        summary = job_summary_from_episodes(corpus.jobs, corpus.episodes, detector)
        durations = corpus.episodes.filter(pl.col("detector") == detector).join(
            corpus.jobs.select("job", "category"), on="job").select("job", "category",
                                                                    "duration_s")
        basis = f"causes, durations and JCT slowdown from {detector}'s attributed episodes"
    categories = counts["category"].to_list()
    partial = without_job_time(corpus.jobs)
    summary = summary.with_columns(pl.when(~pl.col("job").is_in(partial))
                                   .then(pl.col("jct_slowdown")))
    character = report.section("Characterisation")
    character.paragraphs.append(f"Basis: {basis}.")
    if partial:
        character.paragraphs.append(
            f"The JCT slowdown (its mean and CDF) leaves out {len(partial)} of "
            f"{corpus.jobs.height} jobs ({', '.join(partial)}): their step times are "
            "normalised or a sample of the run, so their slowdown is a share of the logged "
            "steps' time, not of the job's completion time.")
    character.tables.append(ReportTable("Jobs per fail-slow cause (like Greyhound's Table 1)",
                                        cause_table(summary)))
    character.figures.append(ReportFigure(
        "duration_cdf",
        cdf_figure(durations.with_columns(pl.col("duration_s") / 60), "duration_s", "category",
                   "Fail-slow duration per category", "fail-slow duration (min)", log_x=True,
                   references=paper_references(categories, PAPER_MEAN_DURATION_MIN, " min")),
        "CDF of fail-slow episode durations per job category (like Greyhound's Figure 1a); "
        "dotted: the paper's mean per category."))
    character.figures.append(ReportFigure(
        "jct_slowdown_cdf",
        cdf_figure(summary.with_columns(pl.col("jct_slowdown") * 100), "jct_slowdown",
                   "category", "JCT slowdown per category", "JCT slowdown", percent_x=True,
                   references=paper_references(categories, PAPER_MEAN_JCT_SLOWDOWN_PCT, " %",
                                               point=True)),
        "CDF of job-completion-time slowdown per job category (like Greyhound's Figure 1b); "
        "dotted: the paper's mean per category"
        + ("; jobs without a completion time left out, see above." if partial else ".")))
    if labeled:
        evaluation = evaluation or evaluate(corpus.jobs, corpus.labels, corpus.episodes)
        accuracy = report.section("Detector accuracy")
        accuracy.paragraphs.append(
            "Job level: a job is positive when it has a labeled fail-slow; a detector flags it "
            "when it reports an episode. FPR = FP / negatives, FNR = FN / positives.")
        accuracy.paragraphs.append(
            "Culprit and cause: share of the detected fail-slows whose attributed culprit "
            "(any spelling of the labeled rank, GPU or link; compound culprits as sets) and "
            "cause set equal the label's; \"not attributed\" when attribution did not run.")
        for category, table in accuracy_tables(evaluation.job_table,
                                               evaluation.episode_table).items():
            accuracy.tables.append(ReportTable(
                f"{category} jobs: accuracy, FPR and FNR with culprit and cause accuracy (like "
                "Greyhound's Tables 3 and 4)", table))
        accuracy.tables.append(ReportTable(
            "Episode level: overlap matching; delay from the labeled onset to the detected "
            "start, alarm delay to when the detector, run online, reported it",
            episode_accuracy_table(evaluation.episode_table)))
        accuracy.tables.append(ReportTable(
            f"Per labeled cause ({detector}): share of the fail-slows found, with the right "
            "culprit and with the right cause", cause_accuracy_table(evaluation.cause_table,
                                                                     detector)))
    if corpus.iteration_errors.height:
        report.section("Iteration-time reconstruction").tables.append(ReportTable(
            "ACF reconstruction error against the reference iteration times, per layout",
            reconstruction_table(corpus.iteration_errors)))
    return report

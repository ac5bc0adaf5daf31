"""Characterise many jobs the way the Greyhound paper does (its Table 1 and Figure 1).

A *job summary* has one row per job: its category (compute, communication, large), the
fail-slow causes it suffered, the total time it spent fail-slow and its JCT slowdown. The
summary comes from ground-truth labels (a labeled corpus) or from detected, attributed episodes
(an unlabeled one); the cause table and the CDFs are computed from it the same way.
"""

from __future__ import annotations

import polars as pl

NO_FAIL_SLOW = "no fail-slow"
SEVERAL = "several at once"
"""Row names of the paper's Table 1 for jobs with no, or with more than one, cause."""

CATEGORY_ORDER = ("compute", "communication", "large")
"""The paper's three populations: 1-node probing (compute), 4-node probing (communication),
large jobs (>= 512 GPUs)."""


def ecdf(frame: pl.DataFrame, value: str, by: str | None = None) -> pl.DataFrame:
    """Empirical CDF of ``value`` (per ``by`` group): each sorted value with the fraction of
    rows at or below it. Nulls are left out."""
    keys = [by] if by else []
    data = frame.filter(pl.col(value).is_not_null()).sort([*keys, value])
    index = pl.int_range(1, pl.len() + 1)
    fraction = (index / pl.len()).over(keys) if keys else index / pl.len()
    return data.select(*keys, value, fraction.alias("fraction"))


def _cause_row(causes: pl.Expr) -> pl.Expr:
    """Table 1 row of a job from its list of distinct causes."""
    return (pl.when(causes.list.len() == 0).then(pl.lit(NO_FAIL_SLOW))
            .when(causes.list.len() == 1).then(causes.list.first())
            .otherwise(pl.lit(SEVERAL)))


def job_summary_from_labels(jobs: pl.DataFrame, labels: pl.DataFrame,
                            jct_slowdown: pl.DataFrame | None = None) -> pl.DataFrame:
    """Job summary from ground truth: causes and fail-slow time from the labels (benign
    disturbances excluded); ``jct_slowdown`` (job, jct_slowdown) when the corpus knows it."""
    episodes = labels.filter(pl.col("fail_slow").fill_null(True)).select(
        "job", "cause", ((pl.col("t_end_ns") - pl.col("t_start_ns")) / 1e9).alias("duration_s"))
    return _summarise(jobs, episodes, jct_slowdown)


def job_summary_from_episodes(jobs: pl.DataFrame, episodes: pl.DataFrame,
                              detector: str) -> pl.DataFrame:
    """Job summary from one detector's episodes: causes from attribution (``unattributed``
    when missing), JCT slowdown as the sum of the episodes' shares."""
    chosen = episodes.filter(pl.col("detector") == detector)
    per_episode = chosen.select("job", pl.col("cause").fill_null("unattributed"), "duration_s")
    jct = chosen.group_by("job").agg(pl.col("jct_slowdown").sum())
    return _summarise(jobs, per_episode, jct)


def _summarise(jobs: pl.DataFrame, episodes: pl.DataFrame,
               jct_slowdown: pl.DataFrame | None) -> pl.DataFrame:
    causes = episodes.with_columns(pl.col("cause").str.split("+")).explode("cause").group_by(
        "job").agg(causes=pl.col("cause").str.strip_chars().unique().sort(),
                   fail_slow_episodes=pl.len(), fail_slow_s=pl.col("duration_s").sum())
    if jct_slowdown is None:
        jct_slowdown = pl.DataFrame(schema={"job": pl.String, "jct_slowdown": pl.Float64})
    summary = (jobs.select("job", "category").join(causes, on="job", how="left")
               .join(jct_slowdown.select("job", "jct_slowdown"), on="job", how="left"))
    return summary.with_columns(
        pl.col("causes").fill_null(pl.lit([], dtype=pl.List(pl.String))),
        pl.col("fail_slow_episodes").fill_null(0),
        pl.col("fail_slow_s").fill_null(0.0),
    ).with_columns(table_row=_cause_row(pl.col("causes"))).sort("category", "job")


def _ordered_categories(summary: pl.DataFrame) -> list[str]:
    present = summary["category"].unique().to_list()
    return [c for c in CATEGORY_ORDER if c in present] + sorted(
        c for c in present if c not in CATEGORY_ORDER)


def cause_table(summary: pl.DataFrame) -> pl.DataFrame:
    """The paper's Table 1: jobs per cause (rows) and category (columns), then the job count
    and the mean JCT slowdown (percent) of each category."""
    categories = _ordered_categories(summary)
    counts = summary.group_by("table_row", "category").len().pivot(
        on="category", index="table_row", values="len").fill_null(0)
    counts = counts.with_columns(pl.lit(0, pl.UInt32).alias(c) for c in categories
                                 if c not in counts.columns)
    single = sorted(r for r in counts["table_row"].to_list() if r not in (NO_FAIL_SLOW, SEVERAL))
    order = [r for r in (NO_FAIL_SLOW, *single, SEVERAL) if r in counts["table_row"].to_list()]
    body = (counts.join(pl.DataFrame({"table_row": order, "_o": range(len(order))}),
                        on="table_row").sort("_o")
            .select(pl.col("table_row").alias("cause"),
                    *[pl.col(c).cast(pl.String) for c in categories]))
    by_category = summary.group_by("category").agg(
        jobs=pl.len(), mean_jct=(100 * pl.col("jct_slowdown").mean()))
    totals = {row["category"]: row for row in by_category.iter_rows(named=True)}
    jobs_row = {"cause": "jobs", **{c: str(totals[c]["jobs"]) for c in categories}}
    jct_row = {"cause": "mean JCT slowdown", **{
        c: "n/a" if totals[c]["mean_jct"] is None else f"{totals[c]['mean_jct']:.2f} %"
        for c in categories}}
    return pl.concat([body, pl.DataFrame([jobs_row, jct_row])])


def fail_slow_durations(labels: pl.DataFrame, jobs: pl.DataFrame) -> pl.DataFrame:
    """Duration (s) of every labeled fail-slow episode with its job's category, for the
    duration CDF of Figure 1."""
    return (labels.filter(pl.col("fail_slow").fill_null(True))
            .join(jobs.select("job", "category"), on="job", how="inner")
            .select("job", "category", "episode",
                    ((pl.col("t_end_ns") - pl.col("t_start_ns")) / 1e9).alias("duration_s")))

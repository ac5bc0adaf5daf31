"""The time-split section of a job report (profiler traces): the job verdict, where each rank's
iteration time goes, how its collective calls split, and what grew in each episode."""

from __future__ import annotations

import polars as pl

from tracekit.attribute.time_split import episode_growth, job_verdict, rank_summary
from tracekit.core.dataset import Dataset
from tracekit.report.document import Report, ReportTable


def _ms(column: str, alias: str) -> pl.Expr:
    return (pl.col(column) * 1e3).round(2).alias(alias)


def time_split_section(report: Report, dataset: Dataset, episodes: pl.DataFrame) -> None:
    """Add the section when the dataset has a time split (nothing otherwise)."""
    split = dataset.table("time_split").collect()
    if split.is_empty():
        return
    calls = dataset.table("call_split").collect()
    hosts = dict(dataset.table("collectives").filter(pl.col("host").is_not_null())
                 .group_by("rank").agg(pl.col("host").first()).collect().iter_rows())
    verdict = job_verdict(split, calls, hosts)
    section = report.section("Time split (profiler trace)")
    section.lead = verdict.target is not None
    named = (f"{verdict.kind}, {verdict.cause}: {verdict.target} (confidence "
             f"{verdict.confidence:.2f})" if verdict.target else "no culprit")
    section.paragraphs.append(f"Job verdict from the time split: {named}. {verdict.evidence}.")
    section.paragraphs.append(
        f"{split['iteration'].n_unique()} iterations on {split['rank'].n_unique()} ranks, on "
        f"the {split['timeline'][0].upper()} timeline. An iteration's time is compute, exposed "
        "communication, copies, host-bound gaps (the next work launched only after the "
        "device ran dry) and idle gaps; communication under compute is hidden (inside "
        "compute). Calls split into queueing (issue to start), waiting for the last peer and "
        "transfer.")
    per_rank = rank_summary(split, calls).select(
        "rank", "iterations", _ms("duration_s", "iteration (ms)"), _ms("compute_s", "compute"),
        _ms("overlapped_comm_s", "hidden comm"), _ms("exposed_comm_s", "exposed comm"),
        _ms("memory_s", "copies"), _ms("host_s", "host"), _ms("idle_s", "idle"),
        pl.col("bound").alias("mostly bound by"), _ms("imposed_s", "peers waited (ms)"),
        (pl.col("last_share") * 100).round(0).alias("last arrival (%)"))
    section.tables.append(ReportTable("Median milliseconds per iteration, per rank",
                                      per_rank))
    if calls.height:
        section.tables.append(ReportTable(
            "Collective calls per rank and operation: median milliseconds per call",
            calls.group_by("rank", "op").agg(
                pl.len().alias("calls"),
                *((pl.col(c).median() * 1e3).round(3).alias(c.removesuffix("_s"))
                  for c in ("queue_s", "wait_s", "transfer_s"))).sort("rank", "op")))
    growth = episode_growth(split, episodes)
    if growth.height:
        section.tables.append(ReportTable(
            "What grew in each episode (mean ms per iteration, in the episode vs as many "
            "iterations before)", growth.select(
                "detector", "episode", "rank", "part", _ms("before_s", "before"),
                _ms("after_s", "during"), _ms("growth_s", "growth"))))

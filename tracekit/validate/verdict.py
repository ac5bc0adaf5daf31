"""Join a check's measurements to an episode's suspects and keep the verdicts in the dataset.

A suspect found slow is *confirmed*, a suspect measured healthy is *refuted*, one whose interval
straddles the threshold is *inconclusive*, and a suspect the run could not measure (not on this
machine, or no peer of its class to compare with) is *not-testable*. Units the episode did not
name are recorded as *slow*, *healthy* or *inconclusive*, so a hardware fault the trace missed
still shows.
"""

from __future__ import annotations

import time

import polars as pl

from tracekit.core import schema
from tracekit.core.dataset import Dataset
from tracekit.validate.gemm import GemmReport
from tracekit.validate.job import Suspects
from tracekit.validate.p2p import P2PReport
from tracekit.validate.peers import interval_evidence

NO_SUSPECTS = Suspects()


def _verdict(suspect: pl.Expr) -> pl.Expr:
    measured = pl.col("verdict")
    return (
        pl.when(suspect & (measured == "slow")).then(pl.lit("confirmed"))
        .when(suspect & (measured == "healthy")).then(pl.lit("refuted"))
        .when(measured == "no peers").then(pl.lit("not-testable"))
        .otherwise(measured)
    )


def _finish(frame: pl.DataFrame, job: str, suspects: Suspects, threshold: float,
            device: str) -> pl.DataFrame:
    return schema.conform("validations", frame.with_columns(
        pl.lit(job).alias("job"),
        pl.lit(suspects.episode, dtype=pl.Int32).alias("episode"),
        pl.lit(threshold).alias("threshold"),
        pl.lit(device).alias("device"),
        pl.lit(time.time_ns()).alias("ts_ns"),
    )).sort("suspect", "target", descending=[True, False])


def gemm_validations(report: GemmReport, job: str,
                     suspects: Suspects = NO_SUSPECTS) -> pl.DataFrame:
    """One row per measured device, plus one per suspect GPU the run did not measure."""
    suspect = (
        pl.format("{}/{}", "host", "gpu").is_in([f"{h}/{g}" for h, g in suspects.gpus])
        | pl.format("{}/{}", "host", "bus_id").is_in([f"{h}/{b}" for h, b in suspects.bus_ids])
    )
    devices = report.devices.with_columns(suspect.fill_null(False).alias("suspect"))
    measured = devices.select(
        pl.lit("gemm").alias("check"),
        pl.when(pl.col("gpu").is_not_null())
        .then(pl.format("gpu:{}/{}", "host", "gpu"))
        .otherwise(pl.format("{}@{}", "device", "host")).alias("target"),
        "host", "gpu", "suspect",
        _verdict(pl.col("suspect")).alias("verdict"),
        "slowdown",
        pl.col("mean_tflops").alias("rate"),
        pl.lit("TFLOP/s").alias("rate_unit"),
        pl.format("{} on {}: {} TFLOP/s mean over {} tests; {}", "device", "host",
                  pl.col("mean_tflops").round(3), "tests",
                  interval_evidence(report.threshold)).alias("evidence"),
    )
    seen = set(devices.select("host", "gpu").rows())
    missing = [(h, g) for h, g in sorted(suspects.gpus) if (h, g) not in seen]
    hosts = ", ".join(sorted(set(devices["host"])))
    unmeasured = pl.DataFrame(
        {"check": ["gemm"] * len(missing), "target": [f"gpu:{h}/{g}" for h, g in missing],
         "host": [h for h, _ in missing], "gpu": [g for _, g in missing],
         "suspect": [True] * len(missing), "verdict": ["not-testable"] * len(missing),
         "evidence": [f"not measured: this run tested GPUs of {hosts}; run the check on {h}"
                      for h, _ in missing]},
        schema_overrides={"gpu": pl.Int32},
    )
    frame = pl.concat([measured, unmeasured], how="diagonal_relaxed")
    return _finish(frame, job, suspects, report.threshold, "; ".join(report.environment))


def p2p_validations(report: P2PReport, job: str,
                    suspects: Suspects = NO_SUSPECTS) -> pl.DataFrame:
    """One row per measured link; a link is a suspect when it touches a suspect rank or joins
    the two hosts of a suspect link."""
    ranks = list(suspects.ranks)
    host_pair = pl.concat_str(pl.min_horizontal("src_host", "dst_host"),
                              pl.max_horizontal("src_host", "dst_host"), separator="-")
    suspect = (
        pl.col("src_rank").is_in(ranks) | pl.col("dst_rank").is_in(ranks)
        | host_pair.is_in(["-".join(sorted(pair)) if len(pair) == 2 else f"{min(pair)}-{min(pair)}"
                           for pair in suspects.host_links])
    )
    links = report.links.with_columns(suspect.fill_null(False).alias("suspect"))
    frame = links.select(
        pl.lit("p2p").alias("check"),
        pl.format("link:{}->{}", "src_rank", "dst_rank").alias("target"),
        pl.col("src_host").alias("host"),
        "src_rank", "dst_rank", "suspect",
        _verdict(pl.col("suspect")).alias("verdict"),
        "slowdown",
        pl.col("bandwidth_gb_s").alias("rate"),
        pl.lit("GB/s").alias("rate_unit"),
        pl.format("{} link {}->{} ({}, {} -> {}), pass {} of group {}: {} GB/s, {} peer "
                  "links; {}", "topology", "src_rank", "dst_rank", "reach",
                  pl.col("src_host").fill_null("?"), pl.col("dst_host").fill_null("?"),
                  "pass", "group", pl.col("bandwidth_gb_s").round(3), "peers",
                  interval_evidence(report.threshold)).alias("evidence"),
    )
    return _finish(frame, job, suspects, report.threshold, "; ".join(report.environment))


def record_validations(dataset: Dataset, validations: pl.DataFrame) -> None:
    """Write the verdicts into the dataset's ``validations`` table, replacing an earlier run of
    the same check for the same episode and keeping everything else."""
    if validations.is_empty():
        return
    check = validations["check"][0]
    episode = validations["episode"][0]
    with dataset.updating():  # read under the lock, so a concurrent check's rows are kept
        kept = dataset.table("validations").filter(
            ~((pl.col("check") == check) & pl.col("episode").eq_missing(episode))
        ).collect()
        dataset.write_table("validations", pl.concat([kept, validations]))

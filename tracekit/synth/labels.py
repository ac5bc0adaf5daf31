"""Ground truth of a synthetic job: the labels table (every injected episode, with the label
policy's verdict, and every benign disturbance) and the per-iteration truth."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from tracekit.core import schema
from tracekit.core.identity import link_name, link_target
from tracekit.synth.faults import KIND_OF_CAUSE, Fault

if TYPE_CHECKING:
    from tracekit.synth.run import JobRun, JobSpec

TRUTH_SCHEMA = {
    "job": pl.String, "iteration": pl.Int64, "t_start_ns": pl.Int64, "t_end_ns": pl.Int64,
    "duration_s": pl.Float64, "healthy_s": pl.Float64, "slowdown": pl.Float64,
    "slow": pl.Boolean, "episode": pl.Int32, "noise": pl.String,
}
"""truth.parquet: one row per iteration, numbered as Megatron prints them (from 1). The window
runs from one world-wide grad-norm all-reduce to the next; ``healthy_s`` is the same iteration
simulated with the same noise and no fault, ``slow`` marks iterations inside a labeled
fail-slow (``episode``), ``noise`` names benign disturbances in the window."""


def truth_frame(spec: JobSpec, starts_ns: np.ndarray, lengths_ns: np.ndarray,
                healthy_s: np.ndarray) -> pl.DataFrame:
    duration_s = lengths_ns / 1e9
    return pl.DataFrame({
        "job": spec.job,
        "iteration": np.arange(1, len(starts_ns) + 1, dtype=np.int64),
        "t_start_ns": starts_ns,
        "t_end_ns": starts_ns + lengths_ns,
        "duration_s": duration_s,
        "healthy_s": healthy_s,
        "slowdown": duration_s / healthy_s,
    })


def _target(fault: Fault, run: JobRun) -> dict:
    hosts, L = run.hosts, run.layout
    if fault.rank is not None:
        gpu = L.local_gpu(fault.rank)
        return {"target": f"rank:{fault.rank}", "target_rank": fault.rank,
                "target_host": hosts[fault.host], "target_gpu": gpu}
    if fault.link is not None:
        a, b = (hosts[h] for h in fault.link)
        return {"target": link_target(a, b), "target_link": link_name(a, b)}
    prefix = "host" if fault.cause == "cpu-contention" else "nic"
    device = "" if fault.nic is None else f"/mlx5_{fault.nic}"
    return {"target": f"{prefix}:{hosts[fault.host]}{device}", "target_host": hosts[fault.host]}


def label_frame(spec: JobSpec, run: JobRun, truth: pl.DataFrame) -> pl.DataFrame:
    """The labels table: injected episodes (fail_slow decided by the policy) then noise."""
    duration = truth["duration_s"].to_numpy()
    healthy = truth["healthy_s"].to_numpy()
    starts, ends = truth["t_start_ns"].to_numpy(), truth["t_end_ns"].to_numpy()
    policy = spec.policy
    rows = []
    episodes: dict[int, list[Fault]] = {}
    for fault in run.faults:
        episodes.setdefault(fault.episode, []).append(fault)
    for number, parts in sorted(episodes.items()):
        first, last = parts[0].start_iteration, parts[0].end_iteration
        realised = duration[first:last + 1].mean() / healthy[first:last + 1].mean()
        row = {"episode": number, "kind": "compound" if len(parts) > 1
               else KIND_OF_CAUSE[parts[0].cause],
               "cause": "+".join(p.cause for p in parts),
               "fail_slow": bool(parts[0].slows_job
                                 and realised >= 1 + policy.min_slowdown
                                 and last - first + 1 >= policy.min_iterations),
               "severity": max(p.severity for p in parts)}
        targets = [_target(p, run) for p in parts]
        for t in reversed(targets):
            row.update(t)
        row["target"] = "+".join(t["target"] for t in targets)
        rows.append(row | {"start_iteration": first, "end_iteration": last})
    noise_rows = _noise_rows(spec, run, len(duration))
    next_episode = len(episodes)
    for row in sorted(noise_rows, key=lambda r: (r["start_iteration"], r["cause"])):
        first, last = row["start_iteration"], row["end_iteration"]
        row["episode"] = next_episode
        row["severity"] = float(duration[first:last + 1].mean() / np.median(healthy))
        next_episode += 1
        rows.append(row)
    for row in rows:  # rows index iterations from 0; labels number them as Megatron does
        row["job"] = spec.job
        row["t_start_ns"] = int(starts[row["start_iteration"]])
        row["t_end_ns"] = int(ends[row["end_iteration"]])
        row["start_iteration"] += 1
        row["end_iteration"] += 1
    frame = pl.DataFrame(rows, schema_overrides={k: v for k, v in schema.LABELS.schema.items()
                                                 if k in {c for r in rows for c in r}})
    if frame.is_empty():
        return schema.LABELS.empty()
    return schema.conform("labels", frame)


def _noise_rows(spec: JobSpec, run: JobRun, iterations: int) -> list[dict]:
    noise, hosts = spec.noise, run.hosts
    rows = [{"fail_slow": False, "kind": "noise", "cause": "warmup", "target": "job",
             "start_iteration": 0, "end_iteration": min(len(noise.warmup), iterations) - 1}]
    for event in run.events:
        row = {"fail_slow": False, "kind": "noise", "cause": event.cause,
               "start_iteration": event.iteration, "end_iteration": event.iteration}
        if event.rank is not None:
            row |= {"target": f"rank:{event.rank}", "target_rank": event.rank,
                    "target_host": hosts[run.layout.host_of(event.rank)],
                    "target_gpu": run.layout.local_gpu(event.rank)}
        else:
            row["target"] = "job"
        rows.append(row)
    for it in range(noise.log_interval, iterations, noise.log_interval):
        rows.append({"fail_slow": False, "kind": "noise", "cause": "logging", "target": "job",
                     "start_iteration": it, "end_iteration": it})
    return rows


def mark_truth(truth: pl.DataFrame, labels: pl.DataFrame) -> pl.DataFrame:
    """Add ``slow`` / ``episode`` (first fail-slow covering the iteration) and ``noise``
    (benign causes in the iteration's window, comma separated) to the truth."""
    spans = labels.select(
        "episode", "fail_slow", "cause",
        pl.int_ranges("start_iteration", pl.col("end_iteration") + 1).alias("iteration"),
    ).explode("iteration")
    slow = (spans.filter("fail_slow").group_by("iteration").agg(pl.col("episode").min()))
    noise = (spans.filter(~pl.col("fail_slow")).group_by("iteration")
             .agg(pl.col("cause").unique().sort().str.join(",").alias("noise")))
    marked = (truth.join(slow, on="iteration", how="left")
              .join(noise, on="iteration", how="left")
              .with_columns(pl.col("episode").is_not_null().alias("slow"))
              .sort("iteration"))
    return marked.select(list(TRUTH_SCHEMA)).cast(TRUTH_SCHEMA)

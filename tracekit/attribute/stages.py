"""Pipeline-stage imbalance from per-rank op traces (the ByteDance what-if format).

Pipeline stages are comparable groups: each holds the same share of layers, so their compute per
step should match, and every other stage idles in pipeline bubbles while the slowest one works.
A stage whose compute per step exceeds the median stage's by more than the profiling threshold
is the culprit (its extra layers: the embedding / output head on the first / last stage).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from tracekit.core.schema import COMPUTE_OPS
from tracekit.core.thresholds import SUSPECT_RATIO


@dataclass(frozen=True)
class StageVerdict:
    """A job-level verdict: the slowest pipeline stage and the numbers behind it."""

    kind: str
    cause: str
    target: str | None
    ranks: list[int]
    confidence: float
    evidence: str
    per_stage: pl.DataFrame


def stage_imbalance(op_traces: pl.DataFrame) -> StageVerdict | None:
    """The slowest pipeline stage when it exceeds the median stage by more than
    :data:`SUSPECT_RATIO`; a verdict with target None when stages are balanced; None without
    compute ops or with a single stage."""
    compute = op_traces.filter(pl.col("op").is_in(COMPUTE_OPS), pl.col("pp_stage").is_not_null())
    if compute.is_empty() or compute["pp_stage"].n_unique() < 2:
        return None
    per_rank = (compute.group_by("pp_stage", "rank", "step")
                .agg(pl.col("duration_s").sum().alias("compute_s")))
    per_stage = (per_rank.group_by("pp_stage")
                 .agg(pl.col("compute_s").median(), pl.col("rank").unique().sort().alias("ranks"),
                      pl.col("step").n_unique().alias("steps"))
                 .with_columns((pl.col("compute_s") / pl.col("compute_s").median())
                               .alias("ratio"))
                 .sort("pp_stage"))
    worst = per_stage.sort("ratio", descending=True).row(0, named=True)
    median_s = per_stage["compute_s"].median()
    text = (f"pipeline stage {worst['pp_stage']} (ranks {', '.join(map(str, worst['ranks']))}) "
            f"computes {worst['compute_s']:.3f} s per step vs {median_s:.3f} s for the median "
            f"stage (x{worst['ratio']:.2f}, over {worst['steps']} steps); the other stages "
            "wait for it in pipeline bubbles")
    if worst["ratio"] <= SUSPECT_RATIO:
        return StageVerdict("unknown", "none", None, [], 0.0, "stages balanced: " + text,
                            per_stage)
    confidence = min(1.0, 0.5 + (worst["ratio"] - 1.0))
    return StageVerdict("compute", "pipeline-imbalance", f"stage:{worst['pp_stage']}",
                        worst["ranks"], round(confidence, 2), text, per_stage)

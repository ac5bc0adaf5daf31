"""Pipeline-stage imbalance from per-rank op traces (the ByteDance what-if format).

Pipeline stages are comparable groups: each holds the same share of layers, so their compute per
step should match, and every other stage idles in pipeline bubbles while the slowest one works.
A stage whose compute per step exceeds the median stage's by more than the profiling threshold
is the culprit (its extra layers: the embedding / output head on the first / last stage).
"""

from __future__ import annotations

from collections.abc import Collection
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


def stage_imbalance(op_traces: pl.DataFrame, stragglers: Collection[int] = ()
                    ) -> StageVerdict | None:
    """The slowest pipeline stage when it exceeds the median stage by more than
    :data:`SUSPECT_RATIO`; a verdict with target None when no stage does; None without compute
    ops or with a single stage. ``stragglers`` (ranks an episode names) are left out of their
    stage's compute: a slow rank is its own culprit, not extra layers of its stage."""
    compute = op_traces.filter(pl.col("op").is_in(COMPUTE_OPS), pl.col("pp_stage").is_not_null())
    if compute.is_empty() or compute["pp_stage"].n_unique() < 2:
        return None
    healthy = compute.filter(~pl.col("rank").is_in(list(stragglers)))
    if healthy["pp_stage"].n_unique() == compute["pp_stage"].n_unique():
        compute = healthy
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
    numbers = (f"stage {worst['pp_stage']} (ranks {', '.join(map(str, worst['ranks']))}) "
               f"computes {worst['compute_s']:.3f} s per step vs {median_s:.3f} s for the median "
               f"stage (x{worst['ratio']:.2f}, over {worst['steps']} steps)")
    if worst["ratio"] <= SUSPECT_RATIO:
        named = sorted(set(stragglers))
        text = (f"no pipeline stage holds extra work: the slowest, {numbers}, within the "
                f"x{SUSPECT_RATIO:.2f} threshold")
        if named:
            text += (f" without the straggler rank(s) {', '.join(map(str, named))}, whose "
                     "slowdown is their own against the peers of their stage")
        return StageVerdict("unknown", "none", None, [], 0.0, text, per_stage)
    confidence = min(1.0, 0.5 + (worst["ratio"] - 1.0))
    return StageVerdict("compute", "pipeline-imbalance", f"stage:{worst['pp_stage']}",
                        worst["ranks"], round(confidence, 2),
                        f"pipeline {numbers}; the other stages wait for it in pipeline bubbles",
                        per_stage)


@dataclass(frozen=True)
class OpSplit:
    """Where a slow rank's time went in op traces, against the other ranks of its stage."""

    compute_ratio: float
    """Its compute ops' time per step over its stage peers' median (median over steps)."""
    other_ratio: float
    """The same for every other op: communication and the waits inside it."""
    steps: int

    @property
    def kind(self) -> str:
        """``compute`` or ``communication`` when that part grew past the threshold, else
        ``unknown``."""
        if self.compute_ratio > SUSPECT_RATIO:
            return "compute"
        return "communication" if self.other_ratio > SUSPECT_RATIO else "unknown"

    def text(self, ranks: Collection[int]) -> str:
        return (f"in the op traces, rank(s) {', '.join(map(str, ranks))} spent x"
                f"{self.compute_ratio:.2f} their stage peers' time in compute (forward / "
                f"backward ops) and x{self.other_ratio:.2f} in their other ops (communication "
                f"and its waits) over {self.steps} steps")


def op_split(op_traces: pl.DataFrame, ranks: Collection[int], first: int, last: int
             ) -> OpSplit | None:
    """Compute against the rest of the op time of ``ranks`` in steps ``first..last``, each rank
    over the other ranks of its pipeline stage; None without op traces of them or of peers."""
    ops = op_traces.filter(pl.col("step").is_between(first, last),
                           pl.col("pp_stage").is_not_null())
    if ops.is_empty() or not ops["rank"].is_in(list(ranks)).any():
        return None
    per_rank = (ops.group_by("pp_stage", "rank", "step")
                .agg(pl.col("duration_s").filter(pl.col("op").is_in(COMPUTE_OPS)).sum()
                     .alias("compute_s"),
                     pl.col("duration_s").filter(~pl.col("op").is_in(COMPUTE_OPS)).sum()
                     .alias("other_s")))
    slow = pl.col("rank").is_in(list(ranks))
    peers = (per_rank.filter(~slow).group_by("pp_stage", "step")
             .agg(pl.col("compute_s").median().alias("peer_compute_s"),
                  pl.col("other_s").median().alias("peer_other_s")))
    mine = per_rank.filter(slow).join(peers, on=["pp_stage", "step"], how="inner").filter(
        pl.col("peer_compute_s") > 0, pl.col("peer_other_s") > 0)
    if mine.is_empty():
        return None
    ratios = mine.select((pl.col("compute_s") / pl.col("peer_compute_s")).median().alias("c"),
                         (pl.col("other_s") / pl.col("peer_other_s")).median().alias("o"))
    return OpSplit(float(ratios["c"][0]), float(ratios["o"][0]), mine["step"].n_unique())

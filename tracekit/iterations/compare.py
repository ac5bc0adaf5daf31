"""How far reconstructed iteration times are from a reference (framework log, ground truth).

Iterations are paired by time, not by number: a framework numbers from 1 and from its
checkpoint, the reconstruction from its first anchor. The reconstruction's boundaries sit at
its anchor call, a fixed phase away from the framework's, so the phase is estimated first (the
median distance from each reconstructed end to the nearest reference end) and the pairing is
then nearest-end within half an iteration, one to one. A reference without times (durations by
iteration number only) is paired by number after the shift that fits best.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

MATCH_TOLERANCE = 0.5
"""Reconstructed and reference ends pair when within this share of the median reference
iteration time (after removing the phase)."""

MAX_NUMBER_SHIFT = 5
"""Without times, numbering offsets up to this many iterations are tried."""


@dataclass(frozen=True)
class RankComparison:
    """Error of one rank's reconstruction against the reference."""

    rank: int
    matched: int
    missed: int
    """Reference iterations inside the reconstructed span without a reconstructed partner."""
    extra: int
    """Reconstructed iterations without a reference partner."""
    median_rel_error: float | None
    p99_rel_error: float | None


@dataclass(frozen=True)
class Comparison:
    reference: str
    ranks: list[RankComparison]
    errors: pl.DataFrame
    """Every matched pair: rank, iteration, reference_iteration, duration_s, reference_s,
    rel_error, quality."""

    @property
    def matched(self) -> int:
        return sum(r.matched for r in self.ranks)

    @property
    def missed(self) -> int:
        return sum(r.missed for r in self.ranks)

    @property
    def extra(self) -> int:
        return sum(r.extra for r in self.ranks)

    def rel_error_quantile(self, quantile: float) -> float | None:
        if self.errors.height == 0:
            return None
        return float(self.errors["rel_error"].quantile(quantile, "linear"))


def compare(reconstructed: pl.DataFrame, reference: pl.DataFrame,
            reference_name: str = "framework") -> Comparison:
    """Pair ``reconstructed`` iterations (per rank) with ``reference`` ones (per rank, or
    job-level rows with a null rank that stand for every rank) and measure the error."""
    ranks, errors = [], []
    for (rank,), mine in reconstructed.partition_by("rank", as_dict=True,
                                                    maintain_order=True).items():
        theirs = reference.filter(pl.col("rank").is_null() | (pl.col("rank") == rank))
        if theirs.height == 0 or mine.height == 0:
            continue
        timed = theirs["t_end_ns"].null_count() == 0 and mine["t_end_ns"].null_count() == 0
        pairs = _pair_by_time(mine, theirs) if timed else _pair_by_number(mine, theirs)
        pairs = pairs.with_columns(
            ((pl.col("duration_s") - pl.col("reference_s")).abs() / pl.col("reference_s"))
            .alias("rel_error"), pl.lit(rank, dtype=pl.Int32).alias("rank"))
        missed = _missed(theirs, pairs)
        rel = pairs["rel_error"]
        ranks.append(RankComparison(
            rank=int(rank), matched=pairs.height, missed=missed, extra=mine.height - pairs.height,
            median_rel_error=float(rel.median()) if pairs.height else None,
            p99_rel_error=float(rel.quantile(0.99, "linear")) if pairs.height else None,
        ))
        errors.append(pairs.select("rank", "iteration", "reference_iteration", "duration_s",
                                   "reference_s", "rel_error", "quality"))
    frame = pl.concat(errors) if errors else pl.DataFrame(
        schema={"rank": pl.Int32, "iteration": pl.Int64, "reference_iteration": pl.Int64,
                "duration_s": pl.Float64, "reference_s": pl.Float64, "rel_error": pl.Float64,
                "quality": pl.String})
    return Comparison(reference_name, ranks, frame)


def _reference(theirs: pl.DataFrame) -> pl.DataFrame:
    return (theirs.select(pl.col("iteration").alias("reference_iteration"),
                          pl.col("t_end_ns").alias("reference_end_ns"),
                          pl.col("duration_s").alias("reference_s"))
            .unique("reference_iteration", keep="first").sort("reference_iteration"))


def _pair_by_time(mine: pl.DataFrame, theirs: pl.DataFrame) -> pl.DataFrame:
    reference = _reference(theirs).sort("reference_end_ns")
    typical_ns = float(reference["reference_s"].median() or 0.0) * 1e9
    ends = mine.sort("t_end_ns")
    nearest = ends.join_asof(reference, left_on="t_end_ns", right_on="reference_end_ns",
                             strategy="nearest")
    phase_ns = int((nearest["reference_end_ns"] - nearest["t_end_ns"]).median() or 0)
    shifted = ends.with_columns((pl.col("t_end_ns") + phase_ns).alias("_end_ns"))
    paired = shifted.join_asof(reference, left_on="_end_ns", right_on="reference_end_ns",
                               strategy="nearest", tolerance=int(MATCH_TOLERANCE * typical_ns))
    return (paired.drop_nulls("reference_iteration")
            .with_columns((pl.col("_end_ns") - pl.col("reference_end_ns")).abs().alias("_dist"))
            .sort("_dist").unique("reference_iteration", keep="first")
            .drop("_end_ns", "_dist").sort("iteration"))


def _pair_by_number(mine: pl.DataFrame, theirs: pl.DataFrame) -> pl.DataFrame:
    reference = _reference(theirs).drop("reference_end_ns")
    best = None
    for shift in range(-MAX_NUMBER_SHIFT, MAX_NUMBER_SHIFT + 1):
        paired = (mine.with_columns((pl.col("iteration") + shift).alias("reference_iteration"))
                  .join(reference, on="reference_iteration", how="inner"))
        if paired.height == 0:
            continue
        error = float(((paired["duration_s"] - paired["reference_s"]).abs()
                       / paired["reference_s"]).median())
        if best is None or (error, -paired.height) < best[0]:
            best = ((error, -paired.height), paired)
    if best is None:
        return mine.head(0).with_columns(pl.lit(None, pl.Int64).alias("reference_iteration"),
                                         pl.lit(None, pl.Float64).alias("reference_s"))
    return best[1]


def _missed(theirs: pl.DataFrame, pairs: pl.DataFrame) -> int:
    """Reference iterations between the first and last paired one that found no partner."""
    if pairs.height == 0:
        return 0
    low, high = pairs["reference_iteration"].min(), pairs["reference_iteration"].max()
    inside = _reference(theirs).filter(pl.col("reference_iteration").is_between(low, high))
    return int(np.sum(~np.isin(inside["reference_iteration"].to_numpy(),
                               pairs["reference_iteration"].to_numpy())))

"""Compare each unit (a GPU, a link) with its peers, round by round, and give a verdict only
when a confidence interval on its ratio to them clears the threshold.

Greyhound calls a unit slow when it is more than a threshold slower than the median of its
peers (the other units of the same test and class; the unit itself is left out, so one slow
unit cannot drag the median it is judged against). On a busy machine one timing decides
nothing: every *round* times every unit once, close together in time, so each round gives one
ratio of a unit to its peers' median in that round. The verdict rests on the median of those
ratios and a distribution-free confidence interval for it (order statistics, through
``scipy.stats.quantile_test``): scheduler noise only ever makes a repetition slower, a heavy
one-sided tail that a mean and a t interval would follow. Slow when the whole interval is above
``1 + threshold``, healthy when it is below, inconclusive otherwise.
"""

from __future__ import annotations

import math
import time

import numpy as np
import polars as pl
from scipy import stats

SLOW_THRESHOLD = 0.10
"""Greyhound (ATC 2025, section 4): a GPU or link more than 10 % slower than the median of its
peers is a suspect."""
CONFIDENCE = 0.99
"""Per look at the data. A measuring loop looks after MIN_ROUNDS rounds and then each time the
rounds double, so a run makes a handful of looks (5 by 128 rounds); a union bound over them
keeps the chance of calling a unit at the threshold slow (or healthy) near 2.5 %, and far
less for a unit away from it. Looking after every round at 95 % would not: on the busy
development machine it named a healthy device slow in one of about 30 self-tests."""
MIN_ROUNDS = math.ceil(math.log2(2 / (1 - CONFIDENCE)))
"""Fewest rounds for which a distribution-free interval for the median exists at CONFIDENCE:
with n rounds the widest one, [min, max], covers with probability 1 - 2 * 0.5**n (8 at 99 %)."""
BUDGET_S = 30.0
"""Rounds stop when every unit has a verdict or after this long: a few seconds suffice on a
quiet machine, the budget bounds a noisy one."""


def round_ratios(frame: pl.DataFrame, unit: list[str], test: list[str],
                 time_column: str = "seconds", round_column: str = "round") -> pl.DataFrame:
    """One row per unit, test and round: ``log_ratio``, the log of the unit's time over the
    median time of its peers (the other units of the test, ``test`` including the peer class)
    in the same round, and ``peers``, how many there were. Units without a peer are left out."""
    key = [*test, round_column]
    right = frame.select(*key, *[pl.col(c).alias(f"{c}__peer") for c in unit],
                         pl.col(time_column).alias("__peer_s"))
    other = pl.any_horizontal([pl.col(c).ne_missing(pl.col(f"{c}__peer")) for c in unit])
    return (
        frame.select(*unit, *key, time_column)
        .join(right, on=key, nulls_equal=True)
        .filter(other)
        .group_by(*unit, *key, maintain_order=True)
        .agg(pl.col(time_column).first(), pl.len().alias("peers"),
             pl.col("__peer_s").median().alias("peer_median_s"))
        .with_columns((pl.col(time_column) / pl.col("peer_median_s")).log().alias("log_ratio"),
                      pl.col("peers").cast(pl.Int32))
    )


def median_interval(log_ratios: np.ndarray,
                    confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """The median of ``log_ratios`` and a distribution-free confidence interval for it (NaN
    bounds when there are too few values for ``confidence``)."""
    if log_ratios.size == 0:
        return math.nan, math.nan, math.nan
    interval = stats.quantile_test(log_ratios, q=0.0, p=0.5).confidence_interval(confidence)
    return float(np.median(log_ratios)), float(interval.low), float(interval.high)


def unit_verdicts(ratios: pl.DataFrame, unit: list[str], threshold: float = SLOW_THRESHOLD,
                  confidence: float = CONFIDENCE) -> pl.DataFrame:
    """Per unit, over all its tests and rounds: ``slowdown`` (median ratio to its peers),
    ``low`` / ``high`` (its confidence interval), ``samples``, ``peers`` (fewest in a test) and
    ``verdict`` (slow, healthy or inconclusive; units absent from ``ratios`` had no peer)."""
    limit = math.log1p(threshold)
    rows = []
    for key, part in ratios.group_by(unit, maintain_order=True):
        middle, low, high = median_interval(part["log_ratio"].to_numpy(), confidence)
        verdict = ("slow" if low > limit else "healthy" if high < limit else "inconclusive")
        rows.append((*key, math.exp(middle), math.exp(low), math.exp(high), part.height,
                     part["peers"].min(), verdict))
    schema = {**{c: ratios.schema[c] for c in unit}, "slowdown": pl.Float64, "low": pl.Float64,
              "high": pl.Float64, "samples": pl.Int32, "peers": pl.Int32, "verdict": pl.String}
    return pl.DataFrame(rows, schema=schema, orient="row")


def compare(timings: pl.DataFrame, unit: list[str], test: list[str],
            threshold: float = SLOW_THRESHOLD) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per-round ``timings`` (unit, test, ``round``, ``seconds``) compared with the peers: per
    unit and test the mean and spread of its times, its rounds and its median ratio to the
    peers (``slowdown``, null without a peer); per unit its verdict (:func:`unit_verdicts`)."""
    ratios = round_ratios(timings, unit, test)
    per_test = (
        timings.group_by(*unit, *test)
        .agg(pl.col("seconds").mean().alias("mean_s"), pl.col("seconds").std().alias("std_s"),
             pl.len().alias("rounds"))
        .join(ratios.group_by(*unit, *test).agg(
            pl.col("log_ratio").median().exp().alias("slowdown")),
            on=[*unit, *test], how="left", nulls_equal=True)
    )
    return per_test, unit_verdicts(ratios, unit, threshold)


def all_decided(frame: pl.DataFrame, unit: list[str], test: list[str],
                threshold: float = SLOW_THRESHOLD) -> bool:
    """Whether every unit with a peer has a verdict."""
    ratios = round_ratios(frame, unit, test)
    if ratios.is_empty():
        return True
    return bool((unit_verdicts(ratios, unit, threshold)["verdict"] != "inconclusive").all())


def rounds_done(frame: pl.DataFrame, rounds: int, deadline: float, unit: list[str],
                test: list[str], threshold: float) -> bool:
    """The stopping rule of a measuring loop: at least MIN_ROUNDS, then until the
    ``time.perf_counter()`` deadline has passed or, at a look (MIN_ROUNDS times a power of
    two rounds), every unit has a verdict."""
    if rounds < MIN_ROUNDS:
        return False
    look = (rounds // MIN_ROUNDS) & (rounds // MIN_ROUNDS - 1) == 0 and rounds % MIN_ROUNDS == 0
    return time.perf_counter() > deadline or (look and all_decided(frame, unit, test,
                                                                    threshold))


def with_verdicts(units: pl.DataFrame, verdicts: pl.DataFrame, unit: list[str]) -> pl.DataFrame:
    """``units`` (one row per unit) joined to its verdicts; a unit with no peer gets
    ``no peers``, and ``slow`` is true / false / null (slow, healthy, undecided)."""
    joined = units.join(verdicts, on=unit, how="left", nulls_equal=True)
    return joined.with_columns(
        pl.col("verdict").fill_null("no peers"),
        pl.col("peers").fill_null(0),
    ).with_columns(
        pl.when(pl.col("verdict") == "slow").then(True)
        .when(pl.col("verdict") == "healthy").then(False)
        .otherwise(None).alias("slow"),
    )


def interval_evidence(threshold: float) -> pl.Expr:
    """The verdict of each row of a :func:`with_verdicts` frame in words, with the interval it
    rests on, and for an inconclusive one what would help."""
    spread = pl.format("{}x the peers, interval {}x-{}x over {} samples",
                       pl.col("slowdown").round(2), pl.col("low").round(2),
                       pl.col("high").round(2), "samples")
    limit = pl.lit(f"{1 + threshold:.2f}x")
    return (
        pl.when(pl.col("verdict") == "no peers")
        .then(pl.lit("no peer of the same class to compare with"))
        .when(pl.col("verdict") == "inconclusive")
        .then(pl.format("inconclusive: too noisy (spread {}, straddles {}); a longer "
                        "--budget-s, a larger workload or a quieter machine would help",
                        spread, limit))
        .otherwise(pl.format("{}: {} (threshold {})", "verdict", spread, limit))
    )

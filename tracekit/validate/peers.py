"""Compare each unit (a GPU, a link) with the median of its peers, as Greyhound does.

A unit is slow when its time exceeds the median time of its peers (the other units measured in
the same test) by more than a threshold. The unit itself is left out of its peers' median, so
with two units each is compared with the other, and one slow unit cannot drag the median it is
judged against.
"""

from __future__ import annotations

import polars as pl

SLOW_THRESHOLD = 0.10
"""Greyhound (ATC 2025, section 4): a GPU or link more than 10 % slower than the median of its
peers is a suspect."""


def compare_with_peers(frame: pl.DataFrame, unit: list[str], test: list[str],
                       time_column: str, threshold: float = SLOW_THRESHOLD) -> pl.DataFrame:
    """Add ``peers`` (how many), ``peer_median_s``, ``slowdown`` (time over the peer median)
    and ``slow`` (null when a unit has no peer in its test) to ``frame``: one row per unit and
    test."""
    right = frame.select(
        *test,
        *[pl.col(c).alias(f"{c}__peer") for c in unit],
        pl.col(time_column).alias("__peer_s"),
    )
    other = pl.any_horizontal([pl.col(c).ne_missing(pl.col(f"{c}__peer")) for c in unit])
    peer_medians = (
        frame.select(*unit, *test)
        .join(right, on=test, nulls_equal=True)
        .filter(other)
        .group_by(*unit, *test)
        .agg(pl.len().alias("peers"), pl.col("__peer_s").median().alias("peer_median_s"))
    )
    slowdown = pl.col(time_column) / pl.col("peer_median_s")
    return (
        frame.join(peer_medians, on=[*unit, *test], how="left", nulls_equal=True)
        .with_columns(
            pl.col("peers").fill_null(0).cast(pl.Int32),
            slowdown.alias("slowdown"),
        )
        .with_columns((pl.col("slowdown") > 1 + threshold).alias("slow"))
    )

"""Cross-group profiling (Greyhound, ATC 2025): groups that move the same bytes per call form a
comparable cluster; a group whose collective time exceeds its cluster's median by more than
:data:`SUSPECT_RATIO` during the episode is suspect.

The time compared is the transfer (last arrival to end, :mod:`tracekit.attribute.instances`),
so a group waiting for a late rank is not mistaken for a slow link. Because a congested link
crossed by every group of a cluster raises the cluster median itself, each group is also
compared with its own time before the episode.
"""

from __future__ import annotations

import polars as pl

from tracekit.core.thresholds import SUSPECT_RATIO

MIN_CALLS = 3
"""A group needs this many timed calls in a window to be judged."""


def group_times(instances: pl.DataFrame) -> pl.DataFrame:
    """Median transfer time per group and call size over ``instances``."""
    return (instances.filter(pl.col("transfer_s").is_not_null())
            .group_by("group", "op", "bytes", "nranks")
            .agg(pl.col("transfer_s").median().alias("transfer_s"), pl.len().alias("calls"),
                 pl.col("hosts").first(), pl.col("members").first())
            .filter(pl.col("calls") >= MIN_CALLS))


def suspect_groups(now: pl.DataFrame, then: pl.DataFrame) -> pl.DataFrame:
    """Per group, from its :func:`group_times` in the episode (``now``) and before it
    (``then``): its worst ratio to the cluster median (``cluster_ratio``) and to its own
    baseline (``self_ratio``) over its call sizes, and ``suspect`` above
    :data:`SUSPECT_RATIO`. Clusters are (op, bytes, nranks): the same bytes per call.

    ``suspect`` uses the baseline when the group has one (intra-host and inter-host groups of
    one cluster differ by design, which the cluster median would read as a fail-slow) and the
    cluster median otherwise."""
    if now.is_empty():
        return now.with_columns(pl.lit(None, pl.Float64).alias("cluster_ratio"),
                                pl.lit(None, pl.Float64).alias("self_ratio"),
                                pl.lit(None, pl.Boolean).alias("suspect"))
    then = then.select("group", "op", "bytes", pl.col("transfer_s").alias("before_s"))
    cluster = pl.col("transfer_s").median().over("op", "bytes", "nranks")
    per_size = (now.join(then, on=["group", "op", "bytes"], how="left")
                .with_columns((pl.col("transfer_s") / cluster).alias("cluster_ratio"),
                              (pl.col("transfer_s") / pl.col("before_s")).alias("self_ratio")))
    return (per_size.group_by("group")
            .agg(pl.col("cluster_ratio").max(), pl.col("self_ratio").max(),
                 pl.col("transfer_s").sum(), pl.col("before_s").sum(),
                 pl.col("hosts").first(), pl.col("members").first())
            .with_columns(pl.when(pl.col("self_ratio").is_not_null())
                          .then(pl.col("self_ratio") > SUSPECT_RATIO)
                          .otherwise(pl.col("cluster_ratio") > SUSPECT_RATIO).alias("suspect"))
            .sort("group"))

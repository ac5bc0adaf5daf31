"""Collective instances: one call of one communicator, matched across its members.

Members of a communicator number their calls the same way (``seq``), so (group, seq) names one
instance. Its members' issue times give the arrival order (who the others waited for) and the
time from the last arrival to the end is the transfer itself, free of waiting: the split that
tells a slow GPU (late arrival) from a slow link (long transfer).
"""

from __future__ import annotations

import polars as pl

from tracekit.attribute.groups import COLLECTIVE_OPS, HANDLE

INSTANCE_COLUMNS = ("group", "seq", "op", "bytes", "nranks", "t_ns", "last_rank",
                    "lateness_s", "transfer_s", "hosts", "members")

_HOSTS = pl.col("host").unique().sort().alias("hosts")


def collective_calls(collectives: pl.LazyFrame) -> pl.LazyFrame:
    """The calls every member of a communicator enters (send / recv excluded), with a time."""
    return collectives.filter(pl.col("op").is_in(COLLECTIVE_OPS), pl.col("nranks") > 1,
                              pl.col("t_start_ns").is_not_null())


def member_calls(collectives: pl.LazyFrame, groups: pl.DataFrame) -> pl.DataFrame:
    """Every collective call with its communicator ``group`` from ``groups`` (one row per
    handle, :func:`~tracekit.attribute.groups.handle_groups`); calls of other handles or
    without a group are dropped."""
    return (collective_calls(collectives)
            .join(groups.lazy().select(*HANDLE, "group"), on=list(HANDLE), how="inner")
            .filter(pl.col("group").is_not_null())
            .select("group", "seq", "rank", "host", "cuda_dev", "op", "bytes", "nranks",
                    "t_start_ns", "t_end_ns")
            .collect())


def collective_instances(calls: pl.DataFrame) -> pl.DataFrame:
    """One row per (group, seq) seen on every member: start time of the instance, the rank
    that arrived last, how long the others waited for it (last arrival minus the median of the
    others) and the transfer time (median end minus last arrival; null without end times).

    ``hosts`` and ``members`` are built once per group and joined: an instance whose calls come
    from distinct ranks, as many as its group has, each on one host, has exactly the group's
    members and hosts. Only other instances (a rank twice, a rank on two hosts) build their own
    lists; per-instance lists were about half of this function's time."""
    timed = (
        # only the aggregated columns go through the sort (eager: the lazy engine is faster
        # here but peaks ~300 MB higher on 0.8 M calls)
        calls.select("group", "seq", "op", "bytes", "nranks", "rank", "t_start_ns", "t_end_ns")
        .sort("group", "seq", "t_start_ns", "rank")
        # the sort leaves each instance's calls contiguous: numbered in order and flagged
        # sorted, they are grouped as slices of the frame, where a hash group-by on (group,
        # seq) cost 4x the CPU and grew faster than the calls (2.2-2.5x for twice the
        # iterations, its table outgrowing the caches)
        .with_columns(pl.struct("group", "seq").rle_id().set_sorted().alias("_instance"))
        .group_by("_instance")
        .agg(
            pl.col("group").first(), pl.col("seq").first(),
            pl.col("op").first(), pl.col("bytes").first(), pl.col("nranks").first(),
            pl.col("t_start_ns").min().alias("t_ns"),
            pl.col("rank").last().alias("last_rank"),
            ((pl.col("t_start_ns").last() - pl.col("t_start_ns").head(pl.len() - 1).median())
             / 1e9).alias("lateness_s"),
            ((pl.col("t_end_ns").median() - pl.col("t_start_ns").max()) / 1e9)
            .clip(lower_bound=0.0).alias("transfer_s"),
            pl.len().alias("_seen"),
            (pl.col("rank").n_unique() < pl.len()).alias("_repeated"),
        )
        .filter(pl.col("_seen") == pl.col("nranks"))
    )
    per_group = calls.group_by("group").agg(
        _HOSTS, pl.col("rank").unique().sort().alias("members"),
        (pl.col("rank").n_unique() == pl.struct("rank", "host").n_unique()).alias("_one_host"),
        pl.col("rank").n_unique().alias("_size"))
    joined = (timed.join(per_group, on="group", how="left")
              .with_columns((pl.col("_one_host") & (pl.col("_size") == pl.col("_seen"))
                             & ~pl.col("_repeated")).alias("_regular")))
    irregular = joined.filter(~pl.col("_regular")).drop("hosts", "members")
    own_lists = (calls.join(irregular.select("group", "seq"), on=["group", "seq"], how="semi")
                 .group_by("group", "seq").agg(_HOSTS, pl.col("rank").sort().alias("members")))
    return (pl.concat([joined.filter("_regular").select(INSTANCE_COLUMNS),
                       irregular.join(own_lists, on=["group", "seq"]).select(INSTANCE_COLUMNS)])
            .sort("t_ns", "group", "seq"))

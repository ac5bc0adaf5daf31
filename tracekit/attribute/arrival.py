"""Arrival skew: which rank the others wait for.

In synchronous training everyone's iteration slows together and waiting equalises the
durations, but the order of arrival at each collective does not lie: the compute straggler
arrives last, and the time the others spent waiting for it is blamed on it.
"""

from __future__ import annotations

import polars as pl

SKEW_SCHEMA = {"rank": pl.Int32, "instances": pl.UInt32, "last": pl.UInt32,
               "last_share": pl.Float64, "blame_s": pl.Float64}


def arrival_skew(instances: pl.DataFrame) -> pl.DataFrame:
    """Per rank over ``instances``: how many it took part in, how often it arrived last
    (``last_share``) and the waiting it imposed (``blame_s``, sum of its lateness when last)."""
    if instances.is_empty():
        return pl.DataFrame(schema=SKEW_SCHEMA)
    taken = (instances.select("members").explode("members")
             .group_by(pl.col("members").alias("rank")).len("instances"))
    last = instances.group_by(pl.col("last_rank").alias("rank")).agg(
        pl.len().alias("last"), pl.col("lateness_s").clip(lower_bound=0.0).sum().alias("blame_s"))
    return (taken.join(last, on="rank", how="left")
            .with_columns(pl.col("last").fill_null(0), pl.col("blame_s").fill_null(0.0))
            .with_columns((pl.col("last") / pl.col("instances")).alias("last_share"))
            .select(list(SKEW_SCHEMA)).cast(SKEW_SCHEMA).sort("rank"))


def skew_change(now: pl.DataFrame, then: pl.DataFrame, during_s: float,
                before_s: float) -> pl.DataFrame:
    """Arrival skew in the episode (``now``, an :func:`arrival_skew`) next to the same ranks
    before it (``then``): ``blame_rate`` is waiting imposed per second of wall time,
    ``excess_rate`` its increase over the baseline."""
    now = now.with_columns((pl.col("blame_s") / during_s).alias("blame_rate"))
    then = then.with_columns((pl.col("blame_s") / before_s).alias("blame_rate"))
    return (now.join(then.select("rank", pl.col("last_share").alias("last_share_before"),
                                 pl.col("blame_rate").alias("blame_rate_before")),
                     on="rank", how="left")
            .with_columns(pl.col("last_share_before", "blame_rate_before").fill_null(0.0))
            .with_columns((pl.col("blame_rate") - pl.col("blame_rate_before"))
                          .alias("excess_rate"))
            .sort("excess_rate", descending=True))


def call_gaps(collectives: pl.LazyFrame) -> pl.DataFrame:
    """Per call, the rank's own time before it: from the end of its previous call (any call,
    send / recv included) to this issue. Outside NCCL a rank computes; inside it waits, so a
    straggler's own time grows while its peers' shrinks. Empty without end times. Numbers
    only (rank, t_ns, own_s): where a rank runs comes from the instances' members, and host
    names on every call made the sort and the binning below three times slower. The sort is
    stable: calls come in issue order per rank, and the stable sort runs over those sorted runs
    in linear time where the default one grew 2.5x for twice the iterations (measured), and
    ties keep their order. Only the read is lazy: the same sort and shift in the lazy engine
    cost 2.5x the CPU of the eager ones (one rank of 10,000 iterations, one thread)."""
    return (collectives.select("rank", "t_start_ns", "t_end_ns").collect()
            .filter(pl.col("t_start_ns").is_not_null(), pl.col("t_end_ns").is_not_null())
            .sort("rank", "t_start_ns", maintain_order=True)
            .select("rank", pl.col("t_start_ns").alias("t_ns"),
                    ((pl.col("t_start_ns") - pl.col("t_end_ns").cum_max().shift(1).over("rank"))
                     .clip(lower_bound=0) / 1e9).alias("own_s")))


TIME_BINS = 5
"""Windows are cut into this many equal bins and the median bin's own-time share is kept, so
one benign pause (a GC on one rank, a checkpoint) cannot make a straggler."""


def own_time_change(gaps: pl.DataFrame, ranks: pl.DataFrame, during: tuple[int, int],
                    before: tuple[int, int]) -> pl.DataFrame:
    """Per rank of ``ranks`` (rank, host, cuda_dev), the share of wall time spent outside NCCL
    in the episode and before it (median over :data:`TIME_BINS` bins), ``ratio`` (during /
    before) and ``relative`` (ratio over the median rank's ratio)."""
    shares = [_binned_share(gaps, a, b).rename({"share": name})
              for name, (a, b) in (("own_share", during), ("own_share_before", before))]
    return (ranks.select("rank", "host", "cuda_dev")
            .join(shares[0].join(shares[1], on="rank", how="inner"), on="rank", how="inner")
            .filter(pl.col("own_share_before") > 0)
            .with_columns((pl.col("own_share") / pl.col("own_share_before")).alias("ratio"))
            .with_columns((pl.col("ratio") / pl.col("ratio").median()).alias("relative"))
            .sort("rank"))


def _binned_share(gaps: pl.DataFrame, start_ns: int, end_ns: int) -> pl.DataFrame:
    width_ns = max(1, (end_ns - start_ns) // TIME_BINS)
    # lazy: half the time of the eager group-by on ~10^7 calls (measured)
    return (gaps.lazy().filter(pl.col("t_ns").is_between(start_ns, end_ns, closed="left"))
            .group_by("rank", ((pl.col("t_ns") - start_ns) // width_ns).alias("bin"))
            .agg(pl.col("own_s").sum())
            .group_by("rank")
            .agg((pl.col("own_s").median() / (width_ns / 1e9)).alias("share"))
            .collect())

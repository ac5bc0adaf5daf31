"""Collective instances: one call of one communicator, matched across its members.

Members of a communicator number their calls the same way (``seq``), so (group, seq) names one
instance. Its members' issue times give the arrival order (who the others waited for) and the
time from the last arrival to the end is the transfer itself, free of waiting: the split that
tells a slow GPU (late arrival) from a slow link (long transfer).
"""

from __future__ import annotations

import numpy as np
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
    # the handles' rows first, alone: the filters and the join on three strings see those rows
    # only (a group spanning every rank keeps ~2 % of each rank's calls); the scan itself still
    # decodes the selected columns of every row (polars 2.1, with or without "prefiltered")
    calls = (collectives.filter(pl.col("comm").is_in(groups["comm"].implode()))
             .select(*HANDLE, *(c for c in _MEMBER_CALL[1:] if c not in HANDLE)).collect())
    return (collective_calls(calls.lazy())
            .join(groups.lazy().select(*HANDLE, "group"), on=list(HANDLE), how="inner")
            .filter(pl.col("group").is_not_null()).select(_MEMBER_CALL).collect())


_MEMBER_CALL = ("group", "seq", "rank", "host", "cuda_dev", "op", "bytes", "nranks",
                "t_start_ns", "t_end_ns")
"""The columns of :func:`member_calls`."""


def collective_instances(calls: pl.DataFrame) -> pl.DataFrame:
    """One row per (group, seq) seen on every member (:func:`matched_instances`), sorted by
    ``t_ns, group, seq``."""
    return matched_instances(calls).sort("t_ns", "group", "seq")


def matched_instances(calls: pl.DataFrame) -> pl.DataFrame:
    """One row per (group, seq) seen on every member, in no particular order: start time of the
    instance, the rank that arrived last, how long the others waited for it (last arrival minus
    the median of the others) and the transfer time (median end minus last arrival; null
    without end times).

    Every member's call k of a group is instance k, so most instances are matched on a grid
    without sorting the calls (:func:`_instances_on_grid`); only what a grid row cannot hold (a
    rank twice, a rank on two hosts, a missing member, some of the ends missing) is matched by
    sorting its calls (:func:`_instances_by_sort`)."""
    groups = _group_lists(calls)
    on_grid, taken = _instances_on_grid(calls, groups)
    left = calls.filter(pl.Series(~taken)) if taken.any() else calls
    return pl.concat([on_grid, _instances_by_sort(left, groups)])


def _group_lists(calls: pl.DataFrame) -> pl.DataFrame:
    """Per group of ``calls``: its hosts and members, whether each member runs on one host,
    its size, and the range and count of its call numbers (how large its grid is). Through
    one row per (group, rank) first: hashing every call's host twice (for the hosts, and for
    each rank's) cost 1.8x the CPU."""
    per_rank = calls.group_by("group", "rank").agg(
        pl.col("host").unique().alias("_hosts"),
        pl.col("seq", "t_start_ns").is_not_null().all().name.prefix("_all_"),
        pl.col("seq").min().alias("_first_seq"), pl.col("seq").max().alias("_last_seq"),
        pl.len().alias("_calls"))
    return per_rank.group_by("group").agg(
        pl.col("_hosts").list.explode(keep_nulls=False, empty_as_null=False).unique().sort()
        .alias("hosts"),
        pl.col("rank").sort().alias("members"),
        (pl.col("_hosts").list.len() == 1).all().alias("_one_host"),
        pl.len().alias("_size"),
        (pl.col("rank").is_not_null() & pl.col("_all_seq") & pl.col("_all_t_start_ns")).all()
        .alias("_numbered"),
        pl.col("_first_seq").min(), pl.col("_last_seq").max(), pl.col("_calls").sum())


GRID_FILL = 0.5
"""A group goes on a grid when at least this share of its cells (call numbers x members)
holds a call: a cell costs about what a call does, so a sparser group is matched by sort."""

_FIRST_ARRIVAL = ("group", "seq", "op", "bytes", "nranks")
"""What an instance takes from its first arrival's call."""


def _instances_on_grid(calls: pl.DataFrame, groups: pl.DataFrame
                       ) -> tuple[pl.DataFrame, np.ndarray]:
    """The instances of the groups whose every member runs on one host, and which calls they
    settle (instances, and complete rows dropped because ``nranks`` disagrees, as
    :func:`_instances_by_sort` drops them). Groups of one size share a grid: a row per call
    number of each group, a column per member in rank order, so a row with each member once
    is an instance and its order statistics are a sort of the row, where sorting every call
    by (group, seq, time) cost ~5x the CPU."""
    size = pl.col("_size").cast(pl.Int64)
    span = pl.col("_last_seq") - pl.col("_first_seq") + 1
    laid = (groups.filter("_one_host", "_numbered", span * size * GRID_FILL <= pl.col("_calls"))
            .select("group", "_first_seq", _size=size, _span=span)
            .with_columns((pl.col("_span").cum_sum() - pl.col("_span")).over("_size")
                          .alias("_first_row")))
    members = (groups.join(laid, on="group").select("group", "_first_seq", "_size", "_first_row",
                                                    rank="members")
               .explode("rank").with_columns(pl.int_range(pl.len()).over("group").alias("_column")))
    # each call's cell in the grid of its group's size: (row, member) of its group's rows
    placed = (calls.lazy().select("group", "rank", "seq").with_row_index("_call")
              .join(members.lazy(), on=["group", "rank"])
              .select("_call", "_size", _cell=(pl.col("_first_row") + pl.col("seq")
                                               - pl.col("_first_seq")) * pl.col("_size")
                      + pl.col("_column"))
              .collect())
    call, width_of, cell = (placed[c].to_numpy() for c in ("_call", "_size", "_cell"))
    starts = calls["t_start_ns"].to_numpy()
    ends = calls["t_end_ns"].fill_null(0).to_numpy()
    no_end = calls["t_end_ns"].is_null().to_numpy()
    nranks = calls["nranks"].fill_null(-1).to_numpy()
    taken = np.zeros(calls.height, dtype=bool)
    rows = laid.group_by("_size").agg(pl.col("_span").sum())
    # first, t_ns, last, lateness, transfer of no instance: the columns of an empty grid
    parts = [(*[np.empty(0, np.int64)] * 3, *[np.empty(0)] * 2)]
    for width, count in rows.sort("_size").iter_rows():
        on = width_of == width
        cells = _grid(call[on], cell[on], count, width)
        cells = cells[cells.min(axis=1) >= 0]
        missing = no_end[cells]
        cells = cells[missing.all(axis=1) | ~missing.any(axis=1)]
        taken[cells.ravel()] = True
        arrivals = starts[cells]
        first = cells[np.arange(len(cells)), arrivals.argmin(axis=1)]
        kept = nranks[first] == width
        cells, arrivals, first = cells[kept], arrivals[kept], first[kept]
        parts.append((first, *_order_statistics(cells, arrivals, first, ends, no_end)))
    first, t_ns, last, lateness, transfer = (np.concatenate(p) for p in zip(*parts, strict=True))
    found = calls.select(_FIRST_ARRIVAL)[first].with_columns(
        t_ns=pl.Series(t_ns), last_rank=calls["rank"][last], lateness_s=pl.Series(lateness),
        transfer_s=pl.Series(transfer).fill_nan(None))
    return _with_lists(found, groups), taken


def _grid(call: np.ndarray, cell: np.ndarray, rows: int, width: int) -> np.ndarray:
    """``rows`` x ``width`` cells holding the index of the call at each (``call`` at ``cell``);
    -1 where a cell has no call or more than one."""
    grid = np.full(rows * width, -1, dtype=np.int64)
    grid[cell] = call
    grid[cell[grid[cell] != call]] = -1
    return grid.reshape(rows, width)


def _order_statistics(cells: np.ndarray, arrivals: np.ndarray, first: np.ndarray,
                      ends: np.ndarray, no_end: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per grid row (an instance; its calls' issue times ``arrivals``, ``first`` the call that
    arrived first): start time, the call that arrived last (ties: the lower rank first, as the
    sort by time then rank orders them), lateness and transfer (NaN without end times), in
    the floating point arithmetic polars uses for them."""
    index = np.arange(len(cells))
    width = cells.shape[1]
    last = cells[index, width - 1 - arrivals[:, ::-1].argmax(axis=1)]
    ordered = np.sort(arrivals, axis=1)
    latest = ordered[:, -1].astype(np.float64)
    lateness = (latest - _median(ordered[:, :-1])) / 1e9
    transfer = np.maximum((_median(np.sort(ends[cells], axis=1)) - latest) / 1e9, 0.0)
    transfer[no_end[first]] = np.nan
    return ordered[:, 0], last, lateness, transfer


def _median(ordered: np.ndarray) -> np.ndarray:
    """The median of each row of ``ordered`` (sorted integers), as polars computes it."""
    half, odd = divmod(ordered.shape[1], 2)
    if odd:
        return ordered[:, half].astype(np.float64)
    return (ordered[:, half - 1].astype(np.float64) + ordered[:, half].astype(np.float64)) / 2


def _with_lists(instances: pl.DataFrame, groups: pl.DataFrame) -> pl.DataFrame:
    """``instances`` with their group's hosts and members (the instance's own: each member
    once, on one host)."""
    return instances.join(groups.select("group", "hosts", "members"), on="group",
                          how="left").select(INSTANCE_COLUMNS)


def _instances_by_sort(calls: pl.DataFrame, groups: pl.DataFrame) -> pl.DataFrame:
    """:func:`matched_instances` of ``calls`` by sorting them, with the lists of ``groups``
    (:func:`_group_lists` of every call of those groups).

    ``hosts`` and ``members`` are the group's where an instance's calls come from distinct
    ranks, as many as its group has, each on one host. Only other instances (a rank twice, a
    rank on two hosts) build their own lists; per-instance lists were about half of this
    function's time."""
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
    per_group = groups.select("group", "hosts", "members", "_one_host", "_size")
    joined = (timed.join(per_group, on="group", how="left")
              .with_columns((pl.col("_one_host") & (pl.col("_size") == pl.col("_seen"))
                             & ~pl.col("_repeated")).alias("_regular")))
    irregular = joined.filter(~pl.col("_regular")).drop("hosts", "members")
    own_lists = (calls.join(irregular.select("group", "seq"), on=["group", "seq"], how="semi")
                 .group_by("group", "seq").agg(_HOSTS, pl.col("rank").sort().alias("members")))
    return pl.concat([joined.filter("_regular").select(INSTANCE_COLUMNS),
                      irregular.join(own_lists, on=["group", "seq"]).select(INSTANCE_COLUMNS)])

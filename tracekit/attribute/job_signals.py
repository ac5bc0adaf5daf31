"""The job-wide signals attribution reads, computed by partitions instead of on one machine.

Two passes over the ``collectives`` table, each a partition per batch of work, so the machine
that runs the command only combines small results (Amdahl: whatever it does alone bounds the
speed-up of every cluster):

1. :func:`_rank_batch`, per batch of ranks: each handle's summary for group assignment and
   the ranks' own times (:func:`~tracekit.attribute.arrival.call_gaps`) in the episodes'
   windows.
2. :func:`_group_bin`, per bin of communicator groups (whole groups, so matching across ranks
   stays inside one partition): the collective instances in the episodes' windows, reading
   only the members' ``rank=N`` folders.

The windows sent are supersets of the final ones (a baseline is cut at the trace start, which
only pass 2 finds), so the caller cuts exactly what a single pass over the whole job would.
Groups are numbered in the sort order of their names, so integer ids sort as the names did.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import polars as pl

from tracekit import schema
from tracekit.attribute.arrival import call_gaps
from tracekit.attribute.groups import HANDLE, assign_groups, handle_summary
from tracekit.attribute.instances import collective_calls, collective_instances, member_calls
from tracekit.dataset import Dataset, open_dataset
from tracekit.parallel import Executor, map_all, partition_size

RANKS_PER_BATCH = 8
"""Most ranks read by one partition of pass 1 (8 ranks x 10,000 iterations is ~7 M calls)."""

CALLS_PER_BIN = 5_000_000
"""At most about this many calls in one bin of groups (memory of a pass 2 partition), unless a
single group has more."""

Windows = list[tuple[int | None, int | None]]
"""Time ranges ``[start_ns, end_ns)`` of interest; None is unbounded."""


@dataclass
class JobSignals:
    """What the episodes' verdicts are cut from: collective instances and own times inside
    ``windows`` (sorted as over the whole job), the time span of all instances, and the ranks."""

    instances: pl.DataFrame
    instance_count: int
    span_ns: tuple[int, int] | None
    """First and last instance start of the whole job (None without instances)."""
    gaps: pl.DataFrame
    any_gap: pl.DataFrame
    """The job's first own-time row (none without call end times): tells the verdict that the
    calls have end times when none fall in an episode's windows."""
    ranks: pl.DataFrame
    """rank, host, cuda_dev of every rank with matched collectives."""
    partitions: dict[str, int]


def signals_in_windows(dataset: Dataset, windows: Windows, executor: Executor) -> JobSignals:
    """Both passes over ``dataset`` (see the module docstring) for the given windows."""
    ranks = (dataset.table("collectives").select(pl.col("rank").drop_nulls().unique().sort())
             .collect().to_series().to_list())
    size = partition_size(len(ranks), executor, RANKS_PER_BATCH)
    batches = [ranks[first:first + size] for first in range(0, len(ranks), size)]
    summaries = map_all(executor, _rank_batch,
                        [(str(dataset.path), batch, windows) for batch in batches],
                        key=lambda p: f"collectives of ranks {p[1][0]}-{p[1][-1]}")
    handles, signatures, gaps, first_gaps = (
        pl.concat([s[i] for s in summaries], how="vertical_relaxed") if summaries
        else pl.DataFrame() for i in range(4))
    groups = (_numbered(assign_groups(handles, signatures, dataset.table("comms").collect()))
              if handles.height else pl.DataFrame())
    bins = _bins(groups, executor)
    found = map_all(executor, _group_bin, [(str(dataset.path), b, windows) for b in bins],
                    key=lambda p: f"collective instances of groups {p[1]['group'].min()}-"
                                  f"{p[1]['group'].max()}")
    starts = [f[1] for f in found if f[1] is not None]
    instances = [f[0] for f in found]
    return JobSignals(
        instances=(pl.concat(instances).sort("t_ns", "group", "seq") if instances
                   else pl.DataFrame()),
        instance_count=sum(f[3] for f in found),
        span_ns=(min(s[0] for s in starts), max(s[1] for s in starts)) if starts else None,
        gaps=gaps, any_gap=first_gaps.head(1),
        ranks=(pl.concat([f[2] for f in found]).unique("rank", keep="first", maintain_order=True)
               .sort("rank") if found else pl.DataFrame(schema=_RANK_SCHEMA)),
        partitions={"ranks": len(batches), "groups": len(bins)})


_RANK_SCHEMA = {"rank": pl.Int32, "host": pl.String, "cuda_dev": pl.Int32}


def _numbered(groups: pl.DataFrame) -> pl.DataFrame:
    """Handles with integer group ids in the sort order of the group names (sorts and group-bys
    on an integer key take far less memory than on strings)."""
    return (groups.filter(pl.col("group").is_not_null())
            .with_columns((pl.col("group").rank("dense") - 1).cast(pl.Int32)))


def _bins(groups: pl.DataFrame, executor: Executor) -> list[pl.DataFrame]:
    """Whole groups packed into bins of about equal calls, largest group first into the
    lightest bin (at most :data:`CALLS_PER_BIN` calls, unless one group has more, and as many
    bins as :func:`~tracekit.parallel.partition_size` asks); largest bin first, so the longest
    partitions start first."""
    if groups.is_empty():
        return []
    sizes = groups.group_by("group").agg(pl.col("calls").sum()).sort(["calls", "group"],
                                                                     descending=[True, False])
    total = int(sizes["calls"].sum())
    count = min(sizes.height, math.ceil(total / partition_size(total, executor, CALLS_PER_BIN)))
    loads, members = [0] * count, [[] for _ in range(count)]
    for group, calls in sizes.iter_rows():
        lightest = loads.index(min(loads))
        loads[lightest] += calls
        members[lightest].append(group)
    order = sorted(range(count), key=lambda b: -loads[b])
    return [groups.filter(pl.col("group").is_in(members[b])) for b in order]


def _in_windows(column: str, windows: Windows) -> pl.Expr:
    """Whether ``column`` falls in any of ``windows``."""
    inside = pl.lit(False)
    for start, end in windows:
        inside = inside | ((pl.lit(True) if start is None else pl.col(column) >= start)
                           & (pl.lit(True) if end is None else pl.col(column) < end))
    return inside


_RANK_FOLDER = re.compile(r"rank=(\d+)")


def scan_ranks(dataset_path: str, ranks: list[int]) -> pl.LazyFrame:
    """The ``collectives`` calls of ``ranks``, reading only their ``rank=N`` folders (and any
    part outside such a folder, whose ranks only its rows tell)."""
    wanted = set(ranks)
    parts = []
    for part in open_dataset(dataset_path).parts("collectives"):
        folder = _RANK_FOLDER.fullmatch(part.parent.name)
        if folder is None or int(folder.group(1)) in wanted:
            parts.append(part)
    spec = schema.table("collectives")
    if not parts:
        return spec.empty().lazy()
    return (pl.scan_parquet(parts, schema=spec.schema, hive_partitioning=False)
            .filter(pl.col("rank").is_in(ranks)))


def _rank_batch(partition: tuple[str, list[int], Windows]) -> tuple[pl.DataFrame, ...]:
    """Pass 1 for one batch of ranks: handle summaries and signatures, own times inside the
    windows, and the batch's first own time."""
    path, ranks, windows = partition
    collectives = scan_ranks(path, ranks)
    handles, signatures = handle_summary(collective_calls(collectives))
    gaps = call_gaps(collectives)
    return handles, signatures, gaps.filter(_in_windows("t_ns", windows)), gaps.head(1)


def _group_bin(partition: tuple[str, pl.DataFrame, Windows]
               ) -> tuple[pl.DataFrame, tuple[int, int] | None, pl.DataFrame, int]:
    """Pass 2 for one bin of groups: their instances inside the windows, the span and count
    of all their instances, and their members' hosts and GPUs."""
    path, groups, windows = partition
    calls = member_calls(scan_ranks(path, groups["rank"].unique().sort().to_list()),
                         groups.select(*HANDLE, "group"))
    instances = collective_instances(calls)
    span = ((instances["t_ns"].min(), instances["t_ns"].max()) if instances.height else None)
    ranks = (calls.select("rank", "host", "cuda_dev").unique("rank", keep="first",
                                                             maintain_order=True))
    return (instances.filter(_in_windows("t_ns", windows)), span, ranks, instances.height)

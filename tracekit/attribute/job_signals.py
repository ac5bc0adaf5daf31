"""The job-wide signals attribution reads, computed by partitions instead of on one machine.

Two passes over the ``collectives`` table, each a partition per batch of work, so the machine
that runs the command only combines small results (Amdahl: whatever it does alone bounds the
speed-up of every cluster):

1. :func:`_rank_batch`, per batch of ranks: each handle's summary for group assignment and
   the ranks' own times (:func:`~tracekit.attribute.arrival.call_gaps`) in the episodes'
   windows.
2. :func:`_group_bin`, per bin of communicator groups (whole groups, so matching across ranks
   stays inside one partition): the collective instances in the episodes' windows, reading
   only the members' ``rank=N`` folders, one window of call numbers at a time.

The windows sent are supersets of the final ones (a baseline is cut at the trace start, which
only pass 2 finds), so the caller cuts exactly what a single pass over the whole job would.
Groups are numbered in the sort order of their names, so integer ids sort as the names did.

On a cluster the own times and instances stay where they were computed: each partition writes
its rows to an Arrow IPC part in a hidden scratch folder of the dataset (:func:`scratch_folder`)
and returns the part's path, and whoever decides an episode reads its cut from the parts
(:meth:`JobSignals.instances`, :meth:`JobSignals.gaps`). Shipping the frames through the
client instead cost it ~1 CPU-s of (de)serialisation on a 64-rank job of 1,000 iterations.
The local loop writes its parts too: held in memory they were most of its peak.
"""

from __future__ import annotations

import math
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from tempfile import TemporaryDirectory

import numpy as np
import polars as pl

from tracekit.attribute.arrival import call_gaps
from tracekit.attribute.groups import HANDLE, assign_groups, handle_summary
from tracekit.attribute.instances import collective_calls, matched_instances, member_calls
from tracekit.core import schema
from tracekit.core.dataset import Dataset, atomic_path, open_dataset
from tracekit.core.parallel import Executor, map_all, partition_size, rank_scans

RANKS_PER_BATCH = 8
"""Most ranks of one partition of pass 1 (read one at a time: a partition's memory is one
rank's calls, its count what the scheduler hands out)."""

CALLS_PER_WINDOW = 1_000_000
"""Most calls of one window of a bin (:func:`seq_windows`): at ~0.26 KiB a call while its
instances are matched (measured on 64 x 4,000), ~260 MiB, about what the busiest rank costs a
worker of pass 1 at 10,000 iterations (~240 MiB), so neither pass sets a worker's peak alone."""

CALLS_PER_BIN = CALLS_PER_WINDOW
"""About this many calls in one bin of groups sets how many bins a job gets. A bin of more than
one window writes its calls to a spill and reads them back (:func:`_window_calls`), so bins
are no larger than a window: only a group larger than a window spills."""

READ_COST = 0.05
"""What reading a call costs a bin, relative to keeping one: on a 64-rank job of 10,000
iterations (one core), a bin of one 64-rank group read 35 M calls to keep 3.9 M and took 6.0 s,
bins of 16-26 ranks 4.2-4.7 s for 3.7 M."""

Windows = list[tuple[int | None, int | None]]
"""Time ranges ``[start_ns, end_ns)`` of interest; None is unbounded."""


@dataclass
class JobSignals:
    """What the episodes' verdicts are cut from: the parts of the collective instances
    and own times inside ``windows``, the time span of all instances, and the ranks. Small:
    it travels with every episode's partition."""

    instance_parts: list[Part]
    """One part per bin of groups, each sorted by ``t_ns, group, seq``."""
    gap_parts: list[Part]
    """One part per batch of ranks, in rank order (their concatenation is the job's order)."""
    instance_count: int
    span_ns: tuple[int, int] | None
    """First and last instance start of the whole job (None without instances)."""
    any_gap: pl.DataFrame
    """The job's first own-time row (none without call end times): tells the verdict that the
    calls have end times when none fall in an episode's windows."""
    ranks: pl.DataFrame
    """rank, host, cuda_dev of every rank with matched collectives."""
    partitions: dict[str, int]

    def instances(self, start_ns: int | None = None, end_ns: int | None = None) -> pl.DataFrame:
        """The instances starting in ``[start_ns, end_ns)``, sorted as over the whole job."""
        if not self.instance_parts:
            return pl.DataFrame()
        return (_scan(self.instance_parts)
                .filter(_in_windows("t_ns", [(start_ns, end_ns)]))
                .sort("t_ns", "group", "seq").collect())

    def gaps(self, start_ns: int | None = None, end_ns: int | None = None) -> pl.DataFrame:
        """The own times of calls issued in ``[start_ns, end_ns)``, in the job's order (rank,
        then time)."""
        if not self.gap_parts:
            return pl.DataFrame()
        return (_scan(self.gap_parts)
                .filter(_in_windows("t_ns", [(start_ns, end_ns)])).collect())


Part = str
"""Rows a partition computed: the path of the Arrow IPC part it wrote (:func:`_keep`)."""


def _scan(parts: list[Part]) -> pl.LazyFrame:
    """The rows of ``parts``, in order."""
    return pl.concat([pl.scan_ipc(p) for p in parts])


def _keep(frame: pl.DataFrame, path: str) -> Part:
    """``frame`` as the part ``path``, complete or absent (as every dataset write). Parts are
    Arrow IPC, not Parquet: each is written once, read twice per episode, then removed, and
    Parquet's encoding cost 3-4x the CPU (64 x 10,000: 1.9 CPU-s to write, 1.5 per episode to
    read, against 0.5 and 0.55), for a sixth of the disk (111 MiB against 720)."""
    with atomic_path(Path(path)) as temporary:
        frame.write_ipc(temporary)
    return path


@contextmanager
def scratch_folder(dataset: Dataset) -> Iterator[Path]:
    """Where the partitions leave their rows: a hidden folder in ``dataset``, removed at the
    end (also when a partition fails; every worker sees the dataset, and no table reads a
    hidden folder). The local loop too: the rows are the episodes' windows, which grow with
    the ranks (64 x 10,000 iterations: ~700 MiB; the no-cluster attribution peaked at
    1,301 MiB with them in memory, 598 MiB without)."""
    folder = dataset.path / f".attribute-{uuid.uuid4().hex[:12]}"
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def signals_in_windows(dataset: Dataset, windows: Windows, executor: Executor,
                       scratch: Path) -> JobSignals:
    """Both passes over ``dataset`` (see the module docstring) for the given windows; the
    partitions leave their rows under ``scratch`` (:func:`scratch_folder`)."""
    ranks = dataset.ranks("collectives")
    size = partition_size(len(ranks), executor, RANKS_PER_BATCH)
    batches = [ranks[first:first + size] for first in range(0, len(ranks), size)]
    summaries = map_all(executor, _rank_batch,
                        [(str(dataset.path), batch, windows, _part_path(scratch, "gaps", index))
                         for index, batch in enumerate(batches)],
                        key=lambda p: f"collectives of ranks {p[1][0]}-{p[1][-1]}")
    handles, signatures, first_gaps = (
        pl.concat([s[i] for s in summaries], how="vertical_relaxed") if summaries
        else pl.DataFrame() for i in range(3))
    groups = (_numbered(assign_groups(handles, signatures, dataset.table("comms").collect()))
              if handles.height else pl.DataFrame())
    bins = _bins(groups, executor)
    found = map_all(executor, _group_bin,
                    [(str(dataset.path), b, windows, _part_path(scratch, "instances", index))
                     for index, b in enumerate(bins)],
                    key=lambda p: f"collective instances of groups {p[1]['group'].min()}-"
                                  f"{p[1]['group'].max()}")
    starts = [f[1] for f in found if f[1] is not None]
    return JobSignals(
        instance_parts=[f[0] for f in found], gap_parts=[s[3] for s in summaries],
        instance_count=sum(f[3] for f in found),
        span_ns=(min(s[0] for s in starts), max(s[1] for s in starts)) if starts else None,
        any_gap=first_gaps.head(1),
        ranks=(_first_per_rank(pl.concat([f[2] for f in found])).sort("rank") if found
               else pl.DataFrame(schema=_RANK_SCHEMA)),
        partitions={"ranks": len(batches), "groups": len(bins)})


def _part_path(scratch: Path, name: str, index: int) -> str:
    return str(scratch / f"{name}-{index}.arrow")


_RANK_SCHEMA = {"rank": pl.Int32, "host": pl.String, "cuda_dev": pl.Int32}


def _numbered(groups: pl.DataFrame) -> pl.DataFrame:
    """Handles with integer group ids in the sort order of the group names (sorts and group-bys
    on an integer key take far less memory than on strings)."""
    return (groups.filter(pl.col("group").is_not_null())
            .with_columns((pl.col("group").rank("dense") - 1).cast(pl.Int32)))


def _bins(groups: pl.DataFrame, executor: Executor) -> list[pl.DataFrame]:
    """Whole groups packed into bins of about equal calls (as many bins as
    :func:`~tracekit.core.parallel.partition_size` asks, of about :data:`CALLS_PER_BIN` calls),
    each reading few ranks; costliest bin first, so the longest partitions start first.

    What is packed: communicator groups, whole, each weighing its calls. Into what: ``count``
    bins of about ``share`` calls each. By which rule: a bin reads every member rank of its
    groups to find their calls, so a rank is paid for once per bin holding one of its groups
    (its calls: what reading it costs); groups that share ranks should share a bin. The bins
    are grown (:func:`_grown_bins`), then groups are moved where they cost fewer reads
    (:func:`_fewer_reads`). Packing for calls alone put the TP and DP groups of one stage in
    different bins, each rank read by up to its group count of bins (the 64 x 10,000 job:
    240 rank reads, against 196)."""
    if groups.is_empty():
        return []
    sizes = (groups.group_by("group").agg(pl.col("calls").sum(),
                                          pl.col("rank").drop_nulls().unique())
             .sort("group"))
    calls = sizes["calls"].to_numpy().astype(np.int64)
    total = int(calls.sum())
    count = min(sizes.height, math.ceil(total / partition_size(total, executor, CALLS_PER_BIN)))
    members, rank_calls = _membership(groups, sizes)
    share = calls.sum() / count
    grown = _grown_bins(members, rank_calls, calls, share, count)
    bin_of = _fewer_reads(grown, members, rank_calls, calls, share)
    cost = {b: _bin_cost(bin_of == b, members, rank_calls, calls) for b in np.unique(bin_of)}
    return [groups.filter(pl.col("group").is_in(sizes["group"].filter(pl.Series(bin_of == b))
                                                .implode()))
            for b in sorted(cost, key=lambda b: -cost[b])]


def _membership(groups: pl.DataFrame, sizes: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """``members``, a row of 0/1 per group of ``sizes`` (in its order) and a column per rank
    (1: the rank is a member), and ``rank_calls``, each rank's calls: what reading it costs."""
    per_rank = groups.group_by("rank").agg(pl.col("calls").sum()).drop_nulls("rank")
    column = {rank: index for index, rank in enumerate(per_rank["rank"].to_list())}
    members = np.zeros((sizes.height, len(column)), dtype=np.int64)
    for row, ranks in enumerate(sizes["rank"].to_list()):
        members[row, [column[rank] for rank in ranks]] = 1
    return members, per_rank["calls"].to_numpy().astype(np.int64)


def _bin_cost(in_bin: np.ndarray, members: np.ndarray, rank_calls: np.ndarray,
              calls: np.ndarray) -> float:
    """What the bin of the groups ``in_bin`` (a mask) costs its partition: the groups' calls
    and, at :data:`READ_COST` each, the calls of every rank it reads."""
    reads = members[in_bin].any(axis=0)
    return calls[in_bin].sum() + READ_COST * rank_calls[reads].sum()


def _grown_bins(members: np.ndarray, rank_calls: np.ndarray, calls: np.ndarray, share: float,
                count: int) -> np.ndarray:
    """The bin of each group (``members``: a row of 0/1 per group, a column per rank), in at
    most ``count`` bins of about equal calls. Each bin grows from the largest group left by the
    group that adds the fewest calls to read (first those whose members it already reads;
    ties: the most calls kept) until it holds its share: the groups of a block of ranks close
    on it before it reaches for other ranks."""
    bin_of = np.full(len(calls), -1)
    for current in range(count):
        added = members @ rank_calls  # the calls of its members a group adds to this bin's reads
        unread = np.ones(len(rank_calls), dtype=bool)
        kept = 0
        while (bin_of < 0).any() and (kept < share or current == count - 1):
            left = np.flatnonzero(bin_of < 0)
            first = (np.lexsort((-calls[left], added[left])) if kept
                     else np.argsort(-calls[left], kind="stable"))[0]
            chosen = left[first]
            fresh = unread & (members[chosen] == 1)
            added -= members[:, fresh] @ rank_calls[fresh]
            unread &= ~fresh
            bin_of[chosen] = current
            kept += calls[chosen]
    return bin_of


def _fewer_reads(bin_of: np.ndarray, members: np.ndarray, rank_calls: np.ndarray,
                 calls: np.ndarray, share: float) -> np.ndarray:
    """``bin_of`` after moving groups, largest first and until none gains, to the bin where
    they save the most reading (:func:`_saved_reads`), never past a bin's ``share`` of the
    calls or the calls it already holds, if more: no bin's spill, cut of instances or time as
    a partition grows. Growing alone is myopic: it leaves a group spanning every rank, whose
    bin reads every rank anyway, for the last bin, with room left in others. Moving up to the
    largest bin's calls instead read 40 fewer ranks on the 64 x 10,000 job, but its bins then
    spilled 60 MiB more."""
    bins = np.arange(bin_of.max() + 1)
    in_bin = (bin_of[None, :] == bins[:, None]).astype(np.int64)  # bins x groups, 0/1
    readers = in_bin @ members  # bins x ranks: how many of a bin's groups make it read a rank
    kept = np.bincount(bin_of, weights=calls, minlength=len(bins))
    room = np.maximum(kept, share)
    moved = True
    while moved:
        moved = False
        for group in np.argsort(-calls, kind="stable"):
            own = bin_of[group]
            saved = _saved_reads(readers, members[group] == 1, own, rank_calls)
            full = kept + calls[group] > room
            saved[(bins == own) | full] = 0
            target = int(np.argmax(saved))
            if saved[target] > 0:
                readers[own] -= members[group]
                readers[target] += members[group]
                kept[own] -= calls[group]
                kept[target] += calls[group]
                bin_of[group] = target
                moved = True
    return bin_of


def _saved_reads(readers: np.ndarray, ranks: np.ndarray, own: int,
                 rank_calls: np.ndarray) -> np.ndarray:
    """Per bin, the rank calls a group of member ``ranks`` (a mask) in bin ``own`` saves by
    moving there: those of the ranks only it makes ``own`` read (``readers``, bins x ranks,
    drops to 0), less those of its members the bin does not read yet."""
    freed = rank_calls[ranks & (readers[own] == 1)].sum()
    unread = readers[:, ranks] == 0  # bins x the group's ranks
    return freed - unread @ rank_calls[ranks]


def _in_windows(column: str, windows: Windows) -> pl.Expr:
    """Whether ``column`` falls in any of ``windows``."""
    inside = pl.lit(False)
    for start, end in windows:
        inside = inside | ((pl.lit(True) if start is None else pl.col(column) >= start)
                           & (pl.lit(True) if end is None else pl.col(column) < end))
    return inside


def _rank_batch(partition: tuple[str, list[int], Windows, str]
                ) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, Part]:
    """Pass 1 for one batch of ranks: handle summaries and signatures, the batch's first own
    time, and its own times inside the windows (:func:`_keep`). A handle belongs to one rank
    and a rank's own times to its own calls, so the ranks are read one at a time and a worker
    holds one rank's calls."""
    path, ranks, windows, part = partition
    scans = rank_scans(open_dataset(path), "collectives", ranks)
    summaries = [_rank_signals(scans[rank], windows) for rank in ranks]
    handles, signatures, first_gaps, gaps = (
        pl.concat([s[i] for s in summaries], how="vertical_relaxed") for i in range(4))
    return handles, signatures, first_gaps.head(1), _keep(gaps, part)


def _rank_signals(collectives: pl.LazyFrame, windows: Windows
                  ) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """One rank's handle summaries and signatures, first own time and own times inside the
    windows, from one read of its calls (:data:`_PASS_ONE`; a read for each took 1.2-1.5x
    the CPU of the pass on ranks of 1,000 iterations, about the same at 10,000). Holding the
    columns raises a batch's peak (8 ranks of the 64 x 10,000 job, one thread: ~273 -> ~396
    MiB), still under what a bin of pass 2 holds (the stage's worker peak, ~650 MiB)."""
    calls = collectives.select(_PASS_ONE).collect()
    handles, signatures = handle_summary(collective_calls(calls.lazy()))
    gaps = call_gaps(calls.lazy())
    return handles, signatures, gaps.head(1), gaps.filter(_in_windows("t_ns", windows))


_PASS_ONE = (*HANDLE, "rank", "nranks", "op", "seq", "bytes", "t_start_ns", "t_end_ns")
"""The columns of a rank pass 1 reads: what its handle summaries and own times need."""


def _group_bin(partition: tuple[str, pl.DataFrame, Windows, str]
               ) -> tuple[Part, tuple[int, int] | None, pl.DataFrame, int]:
    """Pass 2 for one bin of groups: its instances inside the windows (:func:`_keep`), the
    span and count of all their instances, and their members' hosts and GPUs.

    The bin's calls are matched one window of call numbers at a time (:func:`seq_windows`,
    :func:`_window_calls`), so a worker holds at most :data:`CALLS_PER_WINDOW` calls whatever
    the iterations and ranks. Every member's call k of a group is instance k, so an instance
    never straddles a window and the windows' instances are exactly those of the whole bin."""
    path, groups, windows, part = partition
    kept, spans, ranks, count = [], [], [], 0
    with TemporaryDirectory(prefix="tracekit-windows-") as spill:
        for calls in _window_calls(path, groups, Path(spill)):
            instances = matched_instances(calls)
            kept.append(instances.filter(_in_windows("t_ns", windows)))
            if instances.height:
                spans.append((instances["t_ns"].min(), instances["t_ns"].max()))
            ranks.append(_first_per_rank(calls))
            count += instances.height
    span = (min(s[0] for s in spans), max(s[1] for s in spans)) if spans else None
    return (_keep(pl.concat(kept).sort("t_ns", "group", "seq"), part), span,
            _first_per_rank(pl.concat(ranks)), count)


def _window_calls(path: str, groups: pl.DataFrame, spill: Path) -> Iterator[pl.DataFrame]:
    """The calls of the bin ``groups`` (:func:`~tracekit.attribute.instances.member_calls`),
    one window of call numbers at a time, each member rank read once, alone (only its
    ``rank=N`` folder), against its own handles only (a handle is one rank's: pass 1 summed
    them a rank at a time). With more than one window its calls are left in an Arrow IPC file per
    window under ``spill`` (a folder of this worker's own): every window reading the member
    ranks again cost the windows times their calls (a group spanning every rank reads the
    whole job), and Parquet files 1.4x the CPU of no windows where Arrow's cost about none
    (64 x 4,000, pass 2)."""
    members = groups["rank"].drop_nulls().unique().sort().to_list()
    handles = groups.select(*HANDLE, "rank", "group")
    bounds = seq_windows(groups["last_seq"], CALLS_PER_WINDOW)
    scans = rank_scans(open_dataset(path), "collectives", members)
    own = handles.partition_by("rank", as_dict=True)  # one pass, not a filter per member
    per_rank = (member_calls(scans[rank], own[rank,]) for rank in members)
    if len(bounds) == 1:
        yield pl.concat(per_rank) if members else member_calls(_no_calls(), handles)
        return
    for rank, calls in zip(members, per_rank, strict=True):
        for index, (first, end) in enumerate(bounds):
            calls.filter(_in_seq(first, end)).write_ipc(spill / f"{index}-{rank}.arrow")
    for index in range(len(bounds)):
        yield pl.scan_ipc([spill / f"{index}-{rank}.arrow" for rank in members]).collect()


def _no_calls() -> pl.LazyFrame:
    return schema.table("collectives").empty().lazy()


def _first_per_rank(calls: pl.DataFrame) -> pl.DataFrame:
    """rank, host, cuda_dev of each rank's first call in ``calls``."""
    return (calls.select("rank", "host", "cuda_dev")
            .unique("rank", keep="first", maintain_order=True))


def seq_windows(last_seqs: pl.Series, most: int) -> list[tuple[int | None, int | None]]:
    """Ranges ``[first, end)`` of call numbers covering every call of the handles whose last
    call numbers are ``last_seqs``, each holding at most ``most`` calls (at least one call
    number a window): a handle has one call per number, so a window holds at most, for each
    handle still calling at its start, the numbers from there to its end or the handle's last.
    Counting a window's width for every handle still calling at its start instead took bins of
    under ``most`` calls for two windows (a DP handle ends at a twelfth of a TP one's numbers),
    and spilled them. The first range also takes calls without a number (None: unbounded
    below), the last is unbounded above."""
    ends = np.sort(last_seqs.drop_nulls().to_numpy()) + 1  # each handle calls below its end
    below = np.concatenate([[0], np.cumsum(ends)])

    def calls(first: int, end: int) -> int:
        """At most how many calls fall in ``[first, end)``."""
        calling, ended = (int(np.searchsorted(ends, bound, side="right"))
                          for bound in (first, end))
        return (int(below[ended] - below[calling]) + end * (ends.size - ended)
                - first * (ends.size - calling))

    bounds: list[int] = []
    first = 0
    while ends.size and first < ends[-1]:
        low, high = first + 1, int(ends[-1])  # the widest window that holds at most ``most``
        while low < high:
            middle = (low + high + 1) // 2
            low, high = (middle, high) if calls(first, middle) <= most else (low, middle - 1)
        first = low
        bounds.append(first)
    bounds = bounds[:-1]
    return list(zip([None, *bounds], [*bounds, None], strict=True))


def _in_seq(first: int | None, end: int | None) -> pl.Expr:
    """Whether a call's number falls in ``[first, end)`` (None: unbounded; calls without a
    number count as below every bound)."""
    below = pl.lit(True) if end is None else pl.col("seq").is_null() | (pl.col("seq") < end)
    return below if first is None else below & (pl.col("seq") >= first)

"""Communicator instances: which per-process communicator handles belong to one group.

A handle (``0x7f3a...``) is a pointer inside one process, so the members of one communicator
print different handles. NCCL Init lines (the ``comms`` table) join them by ``commId`` (plus the
split colour of ``ncclCommSplit`` children, which share their parent's ``commId``). Sources
without Init lines (the LD_PRELOAD hook CSV) only give per-process handles; there the members
are found from the calls themselves: every member of a collective leaves it together, so the
handles of one group have the same call signature and (up to clock skew) the same end times.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import polars as pl

SIGNATURE_CALLS = 64
"""Calls per handle compared when members are inferred from end times."""

COLLECTIVE_OPS = ("allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall",
                  "gather", "scatter", "barrier")
"""Operations every member of the communicator enters (send / recv pair only two ranks)."""

HANDLE = ("host", "pid", "comm")
"""What identifies one process's communicator handle."""


def handle_groups(collectives: pl.LazyFrame, comms: pl.DataFrame) -> pl.DataFrame:
    """One row per (host, pid, comm) handle seen in ``collectives``: its ``group`` id (the same
    for every member of one communicator) and ``group_source`` (``comms`` or ``inferred``)."""
    return assign_groups(*handle_summary(collectives), comms)


def handle_summary(collectives: pl.LazyFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """What group assignment needs from some ranks' calls, small enough to send: per handle
    its rank, communicator size, call count and last call number (``last_seq``: how far its
    calls reach, for cutting them into windows of call numbers), and its first
    :data:`SIGNATURE_CALLS` timed calls (op, bytes, end time) for inferring members. Handles
    belong to one process, so the summaries of disjoint sets of ranks concatenate into the
    job's."""
    handles = collectives.group_by(*HANDLE).agg(pl.col("rank").first(), pl.col("nranks").max(),
                                                pl.len().alias("calls"),
                                                pl.col("seq").max().alias("last_seq"))
    signatures = (collectives.filter(pl.col("seq") < SIGNATURE_CALLS,
                                     pl.col("t_end_ns").is_not_null())
                  .select(*HANDLE, "seq", "op", "bytes", "t_end_ns"))
    return tuple(pl.collect_all([handles, signatures]))


def assign_groups(handles: pl.DataFrame, signatures: pl.DataFrame,
                  comms: pl.DataFrame) -> pl.DataFrame:
    """:func:`handle_groups` from the (concatenated) :func:`handle_summary` of every rank."""
    known = _groups_from_comms(comms)
    joined = handles.join(known, on=list(HANDLE), how="left")
    missing = joined.filter(pl.col("group").is_null()).drop("group", "group_source")
    found = joined.filter(pl.col("group").is_not_null())
    if missing.height:
        inferred = _groups_from_end_times(signatures, missing)
        found = pl.concat([found, inferred], how="vertical_relaxed")
    return found.select(*HANDLE, "rank", "nranks", "group", "group_source", "calls",
                        "last_seq")


def _groups_from_comms(comms: pl.DataFrame) -> pl.DataFrame:
    """Group ids from Init lines: commId and size (a handle's START and COMPLETE lines may each
    carry only part of them). Split children share their parent's commId, so where that puts
    one rank twice in a group the split colour separates them. Splits that print no commId
    (NCCL 2.23+) are keyed by their parent's group and colour. What still collides is dropped,
    so those handles are inferred instead."""
    per_handle = (comms.group_by(HANDLE)
                  .agg(pl.col("rank").first(), pl.col("nranks").max(),
                       pl.col("comm_id").drop_nulls().first(),
                       pl.col("parent_comm").drop_nulls().first(),
                       pl.col("split_color").drop_nulls().first()))
    unique_ranks = (pl.col("rank").n_unique() == pl.len()).over("group")
    with_id = per_handle.filter(pl.col("comm_id").is_not_null())
    keyed = with_id.with_columns(pl.format("{}/{}", "comm_id", "nranks").alias("group"))
    keyed = keyed.with_columns(pl.when(unique_ranks).then("group").otherwise(
        pl.format("{}/{}/{}", "comm_id", "split_color", "nranks")).alias("group"))
    parents = keyed.select("host", "pid", pl.col("comm").alias("parent_comm"),
                           pl.col("group").alias("parent_group"))
    splits = (per_handle.filter(pl.col("comm_id").is_null(), pl.col("split_color").is_not_null())
              .join(parents, on=["host", "pid", "parent_comm"], how="inner")
              .with_columns(pl.format("{}/split{}/{}", "parent_group", "split_color", "nranks")
                            .alias("group")))
    keyed = pl.concat([keyed.select(*HANDLE, "rank", "group"),
                       splits.select(*HANDLE, "rank", "group")])
    clean = keyed.filter(pl.col("group").is_not_null(), unique_ranks)
    return clean.select(*HANDLE, "group").with_columns(pl.lit("comms").alias("group_source"))


def _groups_from_end_times(signatures: pl.DataFrame, handles: pl.DataFrame) -> pl.DataFrame:
    """Partition handles into communicators of ``nranks`` members by their end times.

    Handles are bucketed by call signature (nranks, op and bytes of their first calls); inside a
    bucket each unassigned handle takes the nranks - 1 handles of other ranks whose end times are
    closest (mean absolute difference over the first :data:`SIGNATURE_CALLS` calls). Groups
    that end in lock step (a DP group right after a TP all-reduce) tie; ties go to the rank
    that shares the fewest communicators with the members taken so far, since the groups of
    hybrid parallelism are orthogonal (a TP group and a DP group share at most one rank).
    Shared communicators are counted, not just noted: the world communicator puts every pair
    together, and a set of pairs then told nothing (DP groups {0, 2, 4, 6} and {1, 3, 5, 7}
    of tp2-dp4 were taken as {0, 1, 2, 3} and {4, 5, 6, 7}, whose rings cross other links).
    Buckets with the fewest ties go first.
    """
    calls = (signatures.join(handles.select(HANDLE), on=list(HANDLE), how="semi")
             .sort(*HANDLE, "seq"))
    signature = calls.group_by(HANDLE, maintain_order=True).agg(
        pl.format("{}:{}", "op", "bytes").str.join(",").alias("signature"),
        pl.col("t_end_ns"))
    table = handles.join(signature, on=list(HANDLE), how="left").sort("rank", *HANDLE)
    buckets = [_Bucket(frame) for _, frame in
               table.group_by("nranks", "signature", maintain_order=True)]
    together: Counter[tuple[int, int]] = Counter()
    rows = []
    for bucket in sorted(buckets, key=lambda b: b.ties):
        rows.extend(bucket.partition(together))
    frame = pl.DataFrame(rows, schema={"host": pl.String, "pid": pl.Int64, "comm": pl.String,
                                       "group": pl.String}, orient="row")
    return handles.join(frame, on=list(HANDLE), how="left").with_columns(
        pl.lit("inferred").alias("group_source"))


TIE_NS = 1_000
"""End-time differences below this (1 us) count as a tie between candidate members."""


class _Bucket:
    """Handles of one call signature and their pairwise end-time distances."""

    def __init__(self, frame: pl.DataFrame) -> None:
        self.size = int(frame["nranks"][0] or 1)
        self.keys = list(zip(frame["host"], frame["pid"], frame["comm"], strict=True))
        self.ranks = frame["rank"].to_numpy()
        ends = [e for e in frame["t_end_ns"].to_list()]
        length = min((len(e) for e in ends if e is not None), default=0)
        self.distance = None
        self.ties = 0.0
        if self.size > 1 and length and all(e is not None for e in ends):
            matrix = np.array([e[:length] for e in ends], dtype=np.float64)
            distance = np.abs(matrix[:, None, :] - matrix[None, :, :]).mean(axis=2)
            distance[self.ranks[:, None] == self.ranks[None, :]] = np.inf
            self.distance = np.floor(distance / TIE_NS)
            self.ties = float((self.distance == 0).sum(axis=1).mean())

    def partition(self, together: Counter[tuple[int, int]]) -> list[tuple]:
        """Greedy groups of ``size`` handles; counts the communicators each rank pair of
        them now shares in ``together``."""
        name = [f"{h}/{p}/{c}" for h, p, c in self.keys]
        if self.distance is None:
            return [(*k, n) for k, n in zip(self.keys, name, strict=True)]
        free = np.ones(len(self.keys), dtype=bool)
        # communicators each pair of these handles' ranks already shares
        shares = np.array([[together[(min(a, b), max(a, b))] for b in self.ranks.tolist()]
                           for a in self.ranks.tolist()], dtype=np.int64).reshape(
            len(self.keys), len(self.keys))
        out = []
        for first in range(len(self.keys)):
            if not free[first]:
                continue
            free[first] = False
            members = [first]
            load = shares[first].copy()
            open_ = free & np.isfinite(self.distance[first]) & (self.ranks != self.ranks[first])
            while len(members) < self.size and open_.any():
                order = np.lexsort((load, self.distance[first]))
                other = int(order[open_[order]][0])
                members.append(other)
                free[other] = False
                load += shares[other]
                open_ &= free & (self.ranks != self.ranks[other])
            member_ranks = sorted(int(self.ranks[m]) for m in members)
            together.update((a, b) for a in member_ranks for b in member_ranks if a < b)
            out.extend((*self.keys[m], name[first]) for m in members)
        return out

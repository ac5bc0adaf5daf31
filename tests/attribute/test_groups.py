"""Communicator groups inferred from end times (the hook CSV has no Init lines)."""

from __future__ import annotations

import polars as pl

from tracekit.attribute.groups import SIGNATURE_CALLS, assign_groups
from tracekit.core import schema

US = 1_000


def _handles(groups: dict[str, list[list[int]]], ends: dict[str, list[int]]
             ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Handle summaries and signatures of one handle per rank and communicator kind: kind ->
    its groups of ranks, and the end-time offset (ns) of each group's calls."""
    handles, calls = [], []
    for kind, members in groups.items():
        for group, ranks in enumerate(members):
            for rank in ranks:
                key = {"host": f"h{rank}", "pid": rank, "comm": f"0x{kind}{rank}"}
                handles.append({**key, "rank": rank, "nranks": len(ranks),
                                "calls": SIGNATURE_CALLS, "last_seq": SIGNATURE_CALLS - 1})
                calls += [{**key, "seq": seq, "op": "allreduce", "bytes": len(ranks),
                           "t_end_ns": seq * 1_000 * US + ends[kind][group]}
                          for seq in range(SIGNATURE_CALLS)]
    return (pl.DataFrame(handles, schema_overrides={"rank": pl.Int32, "nranks": pl.Int32}),
            pl.DataFrame(calls))


def _inferred(handles: pl.DataFrame, signatures: pl.DataFrame) -> list[list[int]]:
    comms = pl.DataFrame(schema=schema.COMMS.schema)
    groups = assign_groups(handles, signatures, comms)
    assert set(groups["group_source"]) == {"inferred"}
    return sorted(groups.group_by("group").agg(pl.col("rank").sort())["rank"].to_list())


def test_lock_step_groups_go_to_ranks_that_share_the_fewest_communicators():
    """tp2-dp4, one rank per host: the two DP groups end in lock step (tied end times), the TP
    pairs apart. With the world communicator putting every pair together, the DP groups were
    taken as {0, 1, 2, 3} and {4, 5, 6, 7}, TP partners together, so their rings crossed other
    links than the congested one (fresh seed 320468688, job 32)."""
    groups = {"world": [list(range(8))], "tp": [[0, 1], [2, 3], [4, 5], [6, 7]],
              "dp": [[0, 2, 4, 6], [1, 3, 5, 7]]}
    ends = {"world": [0], "tp": [10 * US, 20 * US, 30 * US, 40 * US], "dp": [50 * US] * 2}
    assert _inferred(*_handles(groups, ends)) == [
        [0, 1], [0, 1, 2, 3, 4, 5, 6, 7], [0, 2, 4, 6], [1, 3, 5, 7], [2, 3], [4, 5], [6, 7]]


def test_end_times_decide_before_shared_communicators():
    """Members are the handles whose calls end with the first one's: the count of shared
    communicators only breaks ties."""
    groups = {"tp": [[0, 1], [2, 3]], "dp": [[0, 1], [2, 3]]}
    ends = {"tp": [10 * US, 20 * US], "dp": [30 * US, 40 * US]}
    assert _inferred(*_handles(groups, ends)) == [[0, 1], [0, 1], [2, 3], [2, 3]]

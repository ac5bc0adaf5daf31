"""Where each rank's time goes, from profiler traces (torch.profiler / Kineto, Nsight Systems):
per collective call and per iteration.

A call's execution (``collectives.exec_start_ns`` / ``exec_end_ns``: its NCCL kernel, or the
gloo worker's span) starts when the rank arrives and ends when the data has moved, which needs
every member: so across the matched calls of one collective, issue -> own start is queueing /
launch, own start -> the last member's start is waiting for that peer, and the last start ->
the end is the transfer itself. Per iteration, the device timeline (CPU operators in a trace
without GPU activity) is cut into compute, communication hidden under compute, exposed
communication, copies, and gaps; a gap is host-bound when the work that ends it was launched
only after the device had run dry, idle otherwise.

Interval arithmetic is exact and vectorised: each class of activity is merged into sorted
disjoint intervals, and the time it covers inside any window is a difference of its coverage
function (:func:`_coverage`), evaluated for every window at once with ``searchsorted``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from tracekit.attribute.groups import COLLECTIVE_OPS, HANDLE, handle_groups
from tracekit.attribute.links import localise
from tracekit.core import schema
from tracekit.core.dataset import Dataset
from tracekit.core.thresholds import SUSPECT_RATIO

END_TOLERANCE_NS = 50_000
"""Members of one collective leave it together: calls of one group and call number whose
execution ends lie further apart than this (or than :data:`END_TOLERANCE_SHARE` of their
length) are different communicators that share a name (the per-stream comms of Nsight)."""
END_TOLERANCE_SHARE = 0.1

STRAGGLER_SHARE = 0.10
"""A rank is the one its peers wait for when its own time per iteration (the iteration less
its waits for peers) exceeds the median peer's by at least 10 % of the iteration, a
fail-slow's slowdown (the peers pad their iterations with that wait), and it starts last in at
least :data:`LAST_SHARE_MIN` of its matched calls (or made its receivers wait, a send chain's
head). In balanced CPU jobs on the shared development machine, scheduling noise stayed under
10 % at a normal load and reached 20-24 % when it ran 10-15 processes per core."""
LAST_SHARE_MIN = 0.5

TRANSFER_SHARE = 0.05
"""A slow group's transfer must exceed its comparable groups' by this share of the iteration
per call as well as by the ratio: a 0.01 ms send 35 % slower than another is noise."""

COMPUTE = ("kernel", "cpu_op")
MEMORY = ("memcpy", "memset")
COMM_OPERATOR = r"^(?:c10d::|nccl:|gloo:|record_param_comms)"
"""CPU operators of the communication layer: issuing a call is not compute."""

BEFORE_TRACE_NS = 10**15
"""Where the gap before a rank's first activity starts (long before any window)."""

SHARES = ("compute_s", "exposed_comm_s", "memory_s", "host_s", "idle_s")
"""The parts an iteration's duration splits into (``overlapped_comm_s`` is inside
``compute_s``)."""
BOUNDS = {"compute": ("compute_s", "memory_s"), "communication": ("exposed_comm_s",),
          "host": ("host_s",), "idle": ("idle_s",)}
"""What bounds an iteration: the largest of these sums."""


def split_dataset(dataset: Dataset) -> TimeVerdict | None:
    """Write the ``call_split`` and ``time_split`` of a dataset from a profiler trace and
    return its job verdict; None (nothing written) for other datasets."""
    if not has_timeline(dataset.table("collectives"), dataset.table("op_traces")):
        return None
    collectives = dataset.table("collectives").collect()
    calls = call_split(collectives, dataset.table("comms").collect())
    split = time_split(dataset.table("iterations").collect(),
                       dataset.table("op_traces").collect(), collectives)
    job = pl.lit(dataset.job, dtype=pl.String)
    with dataset.updating():
        dataset.write_table("call_split", calls.with_columns(job.alias("job")))
        dataset.write_table("time_split", split.with_columns(job.alias("job")))
    return job_verdict(split, calls, rank_hosts(collectives))


def rank_hosts(collectives: pl.DataFrame) -> dict[int, str]:
    """Each rank's host (where its calls say)."""
    known = collectives.filter(pl.col("host").is_not_null()).group_by("rank").agg(
        pl.col("host").first())
    return dict(known.iter_rows())


def has_timeline(collectives: pl.LazyFrame, op_traces: pl.LazyFrame) -> bool:
    """Whether the tables come from a profiler trace: calls with an execution span, or
    kernel-level op traces."""
    calls = collectives.filter(pl.col("exec_start_ns").is_not_null()).head(1).collect()
    ops = op_traces.filter(pl.col("category").is_not_null()).head(1).collect()
    return calls.height > 0 or ops.height > 0


def call_split(collectives: pl.DataFrame, comms: pl.DataFrame) -> pl.DataFrame:
    """Every call with an execution span split into queueing, waiting and transfer
    (:data:`~tracekit.core.schema.CALL_SPLIT`). A collective is matched across its group (from
    the commIds of ``comms``, else the communicator's name, as process groups are named) by
    its number among the rank's collectives of the group, then, without any ``comms``, apart
    by end time (:data:`END_TOLERANCE_NS`); a send with the receive of the same number
    between the same two ranks. ``seq`` numbers point-to-point and collective calls together,
    so it cannot match them: a rank that also sends numbers its collectives apart from its
    peers'."""
    calls = collectives.filter(pl.col("exec_start_ns").is_not_null(),
                               pl.col("exec_end_ns").is_not_null())
    if calls.is_empty():
        return schema.CALL_SPLIT.empty()
    if comms["comm_id"].is_not_null().any():  # NCCL Init lines: per-process handles
        groups = handle_groups(calls.lazy(), comms).select(*HANDLE, "group")
        calls = calls.join(groups, on=list(HANDLE), how="left", nulls_equal=True)
        calls = calls.with_columns(pl.col("group").fill_null(pl.col("comm")))
    else:
        calls = calls.with_columns(pl.col("comm").alias("group"))
    collective = pl.col("op").is_in(COLLECTIVE_OPS)
    p2p = pl.col("op").is_in(("send", "recv")) & pl.col("peer").is_not_null()
    source = pl.when(pl.col("op") == "send").then("rank").otherwise("peer")
    target = pl.when(pl.col("op") == "send").then("peer").otherwise("rank")
    calls = calls.sort("rank", "t_start_ns", "seq").with_columns(
        pl.when(collective).then(pl.format("{}#{}", "group", pl.int_range(pl.len()).over(
            "group", "rank", collective)))
        .when(p2p).then(pl.format("{}:{}->{}#{}", "group", source, target,
                                  pl.int_range(pl.len()).over("group", "rank", "op", "peer")))
        .alias("_key"))
    length = pl.col("exec_end_ns") - pl.col("exec_start_ns")
    tolerance = pl.max_horizontal(pl.lit(END_TOLERANCE_NS),
                                  END_TOLERANCE_SHARE * length.median().over("_key"))
    gap = pl.col("exec_end_ns").diff().over("_key")
    # only a name can be shared by two communicators; members from comms are one group (and
    # gloo's ranks leave a ring all-reduce up to a few ms apart)
    apart = (gap > tolerance).fill_null(False) if not comms.height else pl.lit(False)
    calls = calls.sort("_key", "exec_end_ns").with_columns(
        apart.cum_sum().over("_key").alias("_part"))
    instance = ["_key", "_part"]
    # a group is its name and its members: two pairs on streams of one name are two groups
    members = calls.group_by(instance).agg(
        pl.col("rank").unique().sort().cast(pl.String).str.join(",").alias("_ranks"))
    calls = calls.join(members, on=instance, how="left")
    matched = (pl.col("_key").is_not_null() & (pl.col("rank").n_unique().over(instance) > 1)
               & (pl.len().over(instance) == pl.col("rank").n_unique().over(instance)))
    last = pl.col("exec_start_ns").max().over(instance)
    arrival = pl.when(matched).then(pl.max_horizontal(last, "exec_start_ns")).otherwise(
        pl.col("exec_start_ns"))
    name = pl.when(collective).then(pl.format("{}[{}]#{}", "group", "_ranks", pl.col(
        "_key").str.extract(r"#(\d+)$"))).otherwise("_key")
    split = calls.with_columns(matched.alias("_matched")).select(
        "job", "rank", "comm", "seq", "op",
        pl.when("_matched").then(name).alias("instance"),
        pl.when("_matched").then(pl.len().over(instance)).cast(pl.Int32).alias("members"),
        pl.when("_matched").then(pl.col("rank").sort_by("exec_start_ns").last().over(instance))
        .alias("last_rank"),
        "t_start_ns",
        ((pl.col("exec_start_ns") - pl.col("t_start_ns")).clip(0) / 1e9).alias("queue_s"),
        pl.when("_matched").then((last - pl.col("exec_start_ns")).clip(0, length) / 1e9)
        .alias("wait_s"),
        ((pl.col("exec_end_ns") - arrival).clip(0) / 1e9).alias("transfer_s"),
        "exec_on")
    return schema.conform("call_split", split.sort("rank", "t_start_ns", "comm", "seq"))


def profiler_iterations(iterations: pl.DataFrame) -> pl.DataFrame:
    """Each rank's timed iterations from the trace's own markers (ProfilerStep, NVTX: source
    ``framework``), else from any other per-rank source but the simulator's truth."""
    timed = iterations.filter(pl.col("rank").is_not_null(), pl.col("t_start_ns").is_not_null(),
                              pl.col("t_end_ns") > pl.col("t_start_ns"),
                              pl.col("source") != "truth")
    if timed.is_empty():
        return timed
    chosen = "framework" if (timed["source"] == "framework").any() else timed["source"][0]
    return (timed.filter(pl.col("source") == chosen).unique(["rank", "iteration"])
            .sort("rank", "t_start_ns"))


def time_split(iterations: pl.DataFrame, op_traces: pl.DataFrame,
               collectives: pl.DataFrame) -> pl.DataFrame:
    """Each rank's iterations split into the parts of :data:`SHARES`
    (:data:`~tracekit.core.schema.TIME_SPLIT`), from its op traces (kernels, copies, CPU
    operators) and its calls' execution spans."""
    steps = profiler_iterations(iterations)
    ops, calls = _timeline(op_traces, collectives)
    frames = []
    for (rank,), windows in steps.group_by("rank", maintain_order=True):
        frames.append(_rank_split(windows, ops.filter(pl.col("rank") == rank),
                                  calls.filter(pl.col("rank") == rank)))
    if not frames:
        return schema.TIME_SPLIT.empty()
    return schema.conform("time_split", pl.concat(frames).sort("rank", "iteration"))


def span_split(op_traces: pl.DataFrame, collectives: pl.DataFrame) -> pl.DataFrame:
    """:func:`time_split` of one window per rank, from its first activity's start to its last
    one's end (the span HTA's temporal breakdown divides; ``iteration`` is null)."""
    ops, calls = _timeline(op_traces, collectives)
    frames = []
    for rank in sorted(set(ops["rank"].drop_nulls()) | set(calls["rank"].drop_nulls())):
        mine, own = ops.filter(pl.col("rank") == rank), calls.filter(pl.col("rank") == rank)
        on_gpu = _on_gpu(mine, own)
        if on_gpu:
            mine = mine.filter(pl.col("category") != "cpu_op")
        starts = pl.concat([mine["t_start_ns"], own["exec_start_ns"]])
        ends = pl.concat([mine["t_end_ns"], own["exec_end_ns"]])
        window = pl.DataFrame({"job": [None], "rank": [rank], "iteration": [None],
                               "t_start_ns": [starts.min()], "t_end_ns": [ends.max()]},
                              schema={"job": pl.String, "rank": pl.Int32,
                                      "iteration": pl.Int64, "t_start_ns": pl.Int64,
                                      "t_end_ns": pl.Int64})
        frames.append(_rank_split(window, mine, own))
    if not frames:
        return schema.TIME_SPLIT.empty()
    return schema.conform("time_split", pl.concat(frames))


def _timeline(op_traces: pl.DataFrame,
              collectives: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The timed activities of kernel-level op traces (with their end) and the calls with an
    execution span."""
    ops = op_traces.filter(pl.col("category").is_not_null(), pl.col("t_start_ns").is_not_null())
    ops = ops.with_columns(pl.coalesce("t_end_ns", pl.col("t_start_ns") + (
        pl.col("duration_s") * 1e9).round().cast(pl.Int64)).alias("t_end_ns"))
    calls = collectives.filter(pl.col("exec_start_ns").is_not_null(),
                               pl.col("exec_end_ns").is_not_null())
    return ops, calls


def _on_gpu(ops: pl.DataFrame, calls: pl.DataFrame) -> bool:
    """Whether a rank's trace has device activity (else its CPU operators are the timeline)."""
    return bool(ops["category"].is_in(("kernel", *MEMORY)).any()
                or (calls["exec_on"] == "gpu").any())


def _rank_split(windows: pl.DataFrame, ops: pl.DataFrame, calls: pl.DataFrame) -> pl.DataFrame:
    on_gpu = _on_gpu(ops, calls)
    if on_gpu:
        ops = ops.filter(pl.col("category") != "cpu_op")
    compute = ops.filter(pl.col("category").is_in(COMPUTE),
                         ~pl.col("op").fill_null("").str.contains(COMM_OPERATOR))
    memory = ops.filter(pl.col("category").is_in(MEMORY))
    spans = {"compute": _spans(compute["t_start_ns"], compute["t_end_ns"]),
             "comm": _spans(calls["exec_start_ns"], calls["exec_end_ns"]),
             "memory": _spans(memory["t_start_ns"], memory["t_end_ns"])}
    launched = pl.concat([
        compute.select(pl.col("t_start_ns").alias("start"), pl.col("t_launch_ns").alias("at")),
        memory.select(pl.col("t_start_ns").alias("start"), pl.col("t_launch_ns").alias("at")),
        calls.select(pl.col("exec_start_ns").alias("start"),
                     pl.when(pl.col("exec_on") == "gpu").then("t_start_ns").alias("at"))])
    begin, end = windows["t_start_ns"].to_numpy(), windows["t_end_ns"].to_numpy()

    def covered(*names: str) -> np.ndarray:
        starts, ends = _merge(*(spans[n] for n in names))
        return _coverage(starts, ends, end) - _coverage(starts, ends, begin)

    compute_ns, comm_ns = covered("compute"), covered("comm")
    either_ns, busy_ns = covered("compute", "comm"), covered("compute", "comm", "memory")
    busy_starts, busy_ends = _merge(*spans.values())
    host_starts, host_ends = _host_gaps(busy_starts, busy_ends, launched)
    host_ns = _coverage(host_starts, host_ends, end) - _coverage(host_starts, host_ends, begin)
    sends = calls.filter(pl.col("op") == "send")["t_start_ns"].drop_nulls().to_numpy()
    late_ns = _gaps_before(busy_starts, busy_ends, sends, begin, end)
    duration_ns = end - begin
    parts = {"compute_s": compute_ns, "overlapped_comm_s": compute_ns + comm_ns - either_ns,
             "exposed_comm_s": either_ns - compute_ns, "memory_s": busy_ns - either_ns,
             "host_s": host_ns, "idle_s": duration_ns - busy_ns - host_ns,
             "late_send_s": late_ns}
    frame = windows.select("job", "rank", "iteration", "t_start_ns", "t_end_ns").with_columns(
        pl.Series("duration_s", duration_ns / 1e9),
        *(pl.Series(name, values / 1e9) for name, values in parts.items()))
    sums = [pl.sum_horizontal(columns).alias(label) for label, columns in BOUNDS.items()]
    labels = list(BOUNDS)
    bound = pl.concat_list(*(pl.col(label) for label in labels)).list.arg_max().replace_strict(
        dict(enumerate(labels)), return_dtype=pl.String)
    return frame.with_columns(*sums).with_columns(
        bound.alias("bound"),
        pl.lit("gpu" if on_gpu else "cpu").alias("timeline")).drop(labels)


def _spans(starts: pl.Series, ends: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    return starts.to_numpy().astype(np.int64), ends.to_numpy().astype(np.int64)


def _merge(*spans: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals as sorted disjoint ``(starts, ends)``."""
    starts = np.concatenate([s for s, _ in spans]) if spans else np.empty(0, np.int64)
    ends = np.concatenate([e for _, e in spans]) if spans else np.empty(0, np.int64)
    if not starts.size:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    first = np.concatenate([[True], starts[1:] > reach[:-1]])
    return starts[first], np.maximum.reduceat(ends, np.flatnonzero(first))


def _coverage(starts: np.ndarray, ends: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Time the disjoint sorted intervals cover before each time in ``at``."""
    if not starts.size:
        return np.zeros(len(at), dtype=np.int64)
    lengths = ends - starts
    before = np.concatenate([[0], np.cumsum(lengths)])
    k = np.searchsorted(starts, at, side="right")
    inside = np.clip(at - starts[np.maximum(k - 1, 0)], 0, lengths[np.maximum(k - 1, 0)])
    return np.where(k > 0, before[np.maximum(k - 1, 0)] + inside, 0)


def _gaps_before(starts: np.ndarray, ends: np.ndarray, at: np.ndarray, begin: np.ndarray,
                 end: np.ndarray) -> np.ndarray:
    """Per window, the idle time right before each time in ``at`` that falls in a gap of the
    busy intervals (from the gap's start, or the window's, to it)."""
    out = np.zeros(len(begin), dtype=np.int64)
    if not at.size:
        return out
    k = np.searchsorted(starts, at, side="left") - 1  # the last interval begun before it
    gap_from = np.where(k >= 0, ends[np.maximum(k, 0)], np.iinfo(np.int64).min)
    window = np.searchsorted(begin, at, side="right") - 1
    inside = (window >= 0) & (at < end[np.maximum(window, 0)]) & (at > gap_from)
    length = at - np.maximum(gap_from, begin[np.maximum(window, 0)])
    np.add.at(out, window[inside], length[inside])
    return out


def _host_gaps(starts: np.ndarray, ends: np.ndarray,
               launched: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The gaps between busy intervals (and before the first) that the host left: the work
    starting the next interval was launched after the device went idle."""
    if not starts.size:
        return starts, ends
    first_launch = (launched.filter(pl.col("at").is_not_null()).group_by("start")
                    .agg(pl.col("at").min()))
    lookup = dict(zip(first_launch["start"].to_list(), first_launch["at"].to_list(),
                      strict=True))
    never = np.iinfo(np.int64).min
    at = np.array([lookup.get(int(s), never) for s in starts], dtype=np.int64)
    idle_from = np.concatenate([[starts[0] - BEFORE_TRACE_NS], ends[:-1]])
    host = at > idle_from
    return idle_from[host], starts[host]


@dataclass(frozen=True)
class TimeVerdict:
    """A job-level verdict from the time split: the rank the others waited for and what grew
    on it, or the link whose groups transfer slower, with the numbers; target None when the
    ranks are balanced."""

    kind: str
    cause: str
    target: str | None
    confidence: float
    evidence: str
    per_rank: pl.DataFrame


def rank_summary(split: pl.DataFrame, calls: pl.DataFrame) -> pl.DataFrame:
    """Per rank: median seconds per iteration of each part; from its matched calls, the wait
    it imposed on its peers (the others' mean wait in the calls it started last) and the wait
    it suffered itself (the time it spent waiting for others), each per iteration, its own
    time (``own_s``: the iteration less what it suffered, median over its iterations; a rank
    only late because
    it waited for another has no more of it than its peers), the share of the imposed wait its
    point-to-point calls caused (``p2p_share``: late sends) and the share of its matched calls
    it started last."""
    parts = split.group_by("rank").agg(
        pl.len().alias("iterations"), pl.col("duration_s").median(),
        *(pl.col(c).median() for c in (*SHARES, "overlapped_comm_s")),
        (pl.col("host_s") + pl.col("idle_s")).median().alias("gaps_s"),
        pl.col("late_send_s").median(),
        pl.col("bound").mode().first())
    windows = split.select("rank", "iteration", pl.col("t_start_ns").alias("_from"),
                           pl.col("t_end_ns").alias("_to")).sort("_from")
    matched = (calls.filter(pl.col("instance").is_not_null()).sort("t_start_ns")
               .join_asof(windows, left_on="t_start_ns", right_on="_from", by="rank",
                          strategy="backward", check_sortedness=False)
               .with_columns(pl.when(pl.col("t_start_ns") < pl.col("_to")).then("iteration")
                             .alias("iteration")))
    imposed = (matched.group_by("instance").agg(
        pl.col("last_rank").first().alias("rank"),
        pl.col("iteration").filter(pl.col("rank") == pl.col("last_rank")).first(),
        pl.col("op").is_in(("send", "recv")).any().alias("p2p"),
        (pl.col("wait_s").sum() / (pl.len() - 1)).alias("imposed_s"))
        .filter(pl.col("iteration").is_not_null()))
    per_iteration = (split.select("rank", "iteration")
                     .join(imposed.group_by("rank", "iteration").agg(pl.col("imposed_s").sum()),
                           on=["rank", "iteration"], how="left")
                     .join(_suffered(split, matched), on=["rank", "iteration"], how="left")
                     .with_columns(pl.col("imposed_s", "suffered_s").fill_null(0.0))
                     .join(split.select("rank", "iteration", "duration_s"),
                           on=["rank", "iteration"])
                     .group_by("rank").agg(
                         pl.col("imposed_s").median(), pl.col("suffered_s").median(),
                         (pl.col("duration_s") - pl.col("suffered_s")).median().alias("own_s")))
    shares = imposed.group_by("rank").agg(
        (pl.col("imposed_s").filter("p2p").sum() / pl.col("imposed_s").sum())
        .fill_nan(0.0).alias("p2p_share"), pl.len().alias("last_calls"))
    own = matched.group_by("rank").agg(pl.col("instance").n_unique().alias("matched_calls"),
                                       pl.col("queue_s").sum(), pl.col("transfer_s").sum())
    out = (parts.join(per_iteration, on="rank", how="left").join(own, on="rank", how="left")
           .join(shares, on="rank", how="left")
           .with_columns(pl.col("imposed_s", "suffered_s", "p2p_share",
                                "last_calls").fill_null(0))
           .with_columns((pl.col("last_calls") / pl.col("matched_calls")).alias("last_share"),
                         ((pl.col("queue_s").fill_null(0) + pl.col("transfer_s").fill_null(0))
                          / pl.col("iterations")).alias("own_comm_s")))
    return out.sort("rank")


def _suffered(split: pl.DataFrame, matched: pl.DataFrame) -> pl.DataFrame:
    """rank, iteration and ``suffered_s``: the time of the iteration the rank spent waiting
    for peers, the union of its calls' waits (DDP's buckets wait side by side)."""
    waits = matched.filter(pl.col("wait_s") > 0).select(
        "rank", (pl.col("t_start_ns") + (pl.col("queue_s") * 1e9).round().cast(pl.Int64))
        .alias("start"), (pl.col("wait_s") * 1e9).round().cast(pl.Int64).alias("length"))
    frames = []
    for (rank,), windows in split.group_by("rank", maintain_order=True):
        mine = waits.filter(pl.col("rank") == rank)
        starts, ends = _merge(_spans(mine["start"], mine["start"] + mine["length"]))
        begin, end = windows["t_start_ns"].to_numpy(), windows["t_end_ns"].to_numpy()
        covered = _coverage(starts, ends, end) - _coverage(starts, ends, begin)
        frames.append(windows.select("rank", "iteration").with_columns(
            pl.Series("suffered_s", covered / 1e9)))
    return pl.concat(frames) if frames else pl.DataFrame(
        schema={"rank": pl.Int32, "iteration": pl.Int64, "suffered_s": pl.Float64})


def job_verdict(split: pl.DataFrame, calls: pl.DataFrame,
                rank_hosts: dict[int, str]) -> TimeVerdict | None:
    """The rank its peers waited for (:data:`STRAGGLER_SHARE`: its own time over theirs)
    and what grew on it against its peers' medians (:func:`_straggler`); else the groups
    whose transfer exceeds their comparable ones' by more than
    :data:`~tracekit.core.thresholds.SUSPECT_RATIO`, localised to a rank or a link; else
    balanced. None without a time split."""
    if split.is_empty():
        return None
    per_rank = rank_summary(split, calls)
    iteration_s = per_rank["duration_s"].median()
    if per_rank.height > 1:
        peers_own = pl.concat([per_rank.filter(pl.col("rank") != rank).select(
            pl.lit(rank).alias("rank"), pl.col("own_s").median().alias("peer_own_s"))
            for rank in per_rank["rank"]])
        per_rank = per_rank.join(peers_own, on="rank").with_columns(
            (pl.col("own_s") - pl.col("peer_own_s")).alias("own_excess_s"))
        waited = per_rank.filter(
            pl.col("own_excess_s") >= STRAGGLER_SHARE * iteration_s,
            (pl.col("last_share") >= LAST_SHARE_MIN) | (pl.col("p2p_share") >= LATE_SEND_SHARE),
        )
        for culprit in waited.sort("own_excess_s", descending=True).iter_rows(named=True):
            verdict = _straggler(culprit, per_rank, rank_hosts, iteration_s)
            if verdict is not None:
                return verdict
    slow = _slow_groups(calls, iteration_s)
    if slow is not None:
        return _transfer_verdict(slow, per_rank, rank_hosts)
    return TimeVerdict("unknown", "none", None, 0.0, _balanced(per_rank, iteration_s),
                       per_rank)


WORDS = {"compute_s": "compute", "gaps_s": "time outside device work (host, launch, data "
         "loading)", "own_comm_s": "own communication (queueing and transfer)",
         "late_send_s": "idle time right before its sends"}
EXPLAINED_SHARE = 0.5
"""The parts of a straggler's own time that grew over its peers' (compute, gaps, own
communication) must account for at least half its extra own time."""
LATE_SEND_SHARE = 0.5
"""A rank's grown gaps are a delayed send when at least half of their excess lies right
before its own sends (or half the wait it imposed was its receivers')."""


def _straggler(culprit: dict, per_rank: pl.DataFrame, rank_hosts: dict[int, str],
               iteration_s: float) -> TimeVerdict | None:
    """What grew on the rank the others waited for, against its peers' medians: its compute
    (more than the profiling threshold over theirs, and more than anything else grew: a slow
    device); else, when its late point-to-point sends caused most of the wait, its
    communication (a delayed send); else the largest excess of its gaps (host-bound: launch,
    input pipeline) or its own communication. None when what grew explains less than
    :data:`EXPLAINED_SHARE` of its extra own time (noise in who waited for whom)."""
    rank = culprit["rank"]
    peers = per_rank.filter(pl.col("rank") != rank)
    median = {c: peers[c].median() or 0.0 for c in WORDS}
    excess = {c: culprit[c] - median[c] for c in WORDS}
    grew = max(("compute_s", "gaps_s", "own_comm_s"), key=excess.get)
    late = (excess["late_send_s"] >= LATE_SEND_SHARE * excess["gaps_s"] > 0
            or culprit["p2p_share"] >= LATE_SEND_SHARE)
    if grew == "compute_s" and culprit["compute_s"] > SUSPECT_RATIO * median["compute_s"]:
        kind, cause = "compute", "slow-compute"
    elif late and grew != "own_comm_s":
        grew, kind, cause = "late_send_s", "communication", "late-send"
    elif grew == "own_comm_s":
        kind, cause = "communication", "slow-communication"
    else:
        grew, kind, cause = "gaps_s", "compute", "host-bound"
    grown = sum(max(excess[c], 0.0) for c in ("compute_s", "gaps_s", "own_comm_s"))
    if grown < EXPLAINED_SHARE * culprit["own_excess_s"]:
        return None
    ratio = f" (x{culprit[grew] / median[grew]:.2f})" if median[grew] > 0 else ""
    host = rank_hosts.get(rank)
    text = (f"rank {rank}{f' ({host})' if host else ''} spent "
            f"{culprit['own_s'] * 1e3:.1f} ms per iteration on its own work (the iteration "
            f"less its waits for peers) vs {culprit['peer_own_s'] * 1e3:.1f} ms for the median "
            f"peer (+{culprit['own_excess_s'] / iteration_s:.0%} of the median "
            f"{iteration_s * 1e3:.1f} ms iteration); its peers waited "
            f"{culprit['imposed_s'] * 1e3:.1f} ms per iteration for it and it started last in "
            f"{culprit['last_share']:.0%} of its matched calls")
    if cause == "late-send":
        text += (f"; it issued its sends late ({culprit['p2p_share']:.0%} of that wait was "
                 "its receivers' in recv, the rest its late arrival at the collectives after)")
    text += (f"; its {WORDS[grew]} is {culprit[grew] * 1e3:.1f} ms per iteration vs "
             f"{median[grew] * 1e3:.1f} ms for the median peer{ratio}")
    if grew != "compute_s":
        text += (f"; its compute {culprit['compute_s'] * 1e3:.1f} ms vs "
                 f"{median['compute_s'] * 1e3:.1f} ms")
    confidence = min(1.0, 0.5 + culprit["own_excess_s"] / iteration_s)
    return TimeVerdict(kind, cause, f"rank:{rank}", round(confidence, 2), text, per_rank)


def _slow_groups(calls: pl.DataFrame, iteration_s: float) -> pl.DataFrame | None:
    """Per group of matched calls: median transfer, members, and ``suspect`` when it exceeds
    the median of its comparable groups (same op and size) by more than the threshold and by
    :data:`TRANSFER_SHARE` of the iteration."""
    matched = calls.filter(pl.col("instance").is_not_null())
    if matched.is_empty():
        return None
    group = pl.col("instance").str.replace(r"#\d+$", "")
    per_group = (matched.with_columns(group.alias("group"))
                 .group_by("group", "op", pl.col("members").alias("size")).agg(
                     pl.col("transfer_s").median(), pl.col("rank").unique().sort()
                     .alias("members"))
                 .with_columns((pl.col("transfer_s") / pl.col("transfer_s").median()
                                .over("op", "size")).alias("ratio"))
                 .with_columns(((pl.col("ratio") > SUSPECT_RATIO)
                                & (pl.col("transfer_s") - pl.col("transfer_s").median().over(
                                    "op", "size") >= TRANSFER_SHARE * iteration_s))
                               .alias("suspect")))
    return per_group if per_group["suspect"].any() else None


def _transfer_verdict(groups: pl.DataFrame, per_rank: pl.DataFrame,
                      rank_hosts: dict[int, str]) -> TimeVerdict:
    slow = groups.filter("suspect")
    worst = slow.sort("ratio", descending=True).row(0, named=True)
    timing = (f"{slow.height} of {groups.height} communication groups transfer more than "
              f"{SUSPECT_RATIO - 1:.0%} slower than comparable groups (worst x{worst['ratio']:.2f}"
              f", {worst['transfer_s'] * 1e3:.2f} ms per call), with no rank making its peers "
              "wait")
    common = set.intersection(*(set(r) for r in slow["members"].to_list()))
    healthy = {r for ranks in groups.filter(~pl.col("suspect"))["members"].to_list()
               for r in ranks}
    only = sorted(common - healthy)
    if len(only) == 1:
        return TimeVerdict("communication", "slow-communication", f"rank:{only[0]}", 0.75,
                           f"{timing}; rank {only[0]} is in every slow group and in no healthy "
                           "one", per_rank)
    link = localise(groups, rank_hosts)
    if link.target is not None:
        return TimeVerdict("communication", "network-congestion", link.target, 0.75,
                           f"{timing}; {link.target} is crossed by all {link.slow_groups} slow "
                           f"groups and by none of the {link.healthy_groups} healthy ones",
                           per_rank)
    return TimeVerdict("communication", "insufficient-evidence", None, 0.5,
                       timing + "; no single rank or link explains the slow groups", per_rank)


def _balanced(per_rank: pl.DataFrame, iteration_s: float) -> str:
    if "own_excess_s" not in per_rank.columns:
        return "one rank: nothing to compare it with"
    worst = per_rank.sort("own_excess_s", descending=True).row(0, named=True)
    return (f"balanced: no rank's own work exceeds its peers' by {STRAGGLER_SHARE:.0%} of the "
            f"median {iteration_s * 1e3:.1f} ms iteration with one part of it grown to explain "
            f"it (at most rank {worst['rank']}, +{worst['own_excess_s'] * 1e3:.2f} ms) and no "
            "group transfers more than "
            f"{SUSPECT_RATIO - 1:.0%} slower than comparable ones")


def episode_growth(split: pl.DataFrame, episodes: pl.DataFrame) -> pl.DataFrame:
    """Per episode: the part of the time split that grew most on one rank, inside the
    episode's iterations against as many iterations before it, in seconds per iteration."""
    rows = []
    for episode in episodes.iter_rows(named=True):
        first, last = episode["start_iteration"], episode["end_iteration"]
        if first is None or last is None:
            continue
        span = last - first + 1
        during = split.filter(pl.col("iteration").is_between(first, last))
        before = split.filter(pl.col("iteration").is_between(first - span, first - 1))
        if during.is_empty() or before.is_empty():
            continue
        now = during.group_by("rank").agg(pl.col(SHARES).mean())
        then = before.group_by("rank").agg(pl.col(SHARES).mean())
        grown = now.join(then, on="rank", suffix="_before").unpivot(
            index="rank", on=list(SHARES), variable_name="part", value_name="after_s")
        before_s = then.unpivot(index="rank", on=list(SHARES), variable_name="part",
                                value_name="before_s")
        grown = grown.join(before_s, on=["rank", "part"]).with_columns(
            (pl.col("after_s") - pl.col("before_s")).alias("growth_s"))
        top = grown.sort("growth_s", descending=True).row(0, named=True)
        rows.append({"detector": episode["detector"], "episode": episode["episode"],
                     "rank": top["rank"], "part": top["part"].removesuffix("_s"),
                     "before_s": top["before_s"], "after_s": top["after_s"],
                     "growth_s": top["growth_s"]})
    return pl.DataFrame(rows, schema={"detector": pl.String, "episode": pl.Int32,
                                      "rank": pl.Int32, "part": pl.String,
                                      "before_s": pl.Float64, "after_s": pl.Float64,
                                      "growth_s": pl.Float64})


def with_time_split(episodes: pl.DataFrame, split: pl.DataFrame) -> pl.DataFrame:
    """``episodes`` with what grew in the time split (:func:`episode_growth`) added to their
    evidence."""
    growth = episode_growth(split, episodes)
    if growth.is_empty():
        return episodes
    clause = pl.format("time split: rank {}'s {} grew from {} to {} ms per iteration", "rank",
                       "part", (pl.col("before_s") * 1e3).round(1),
                       (pl.col("after_s") * 1e3).round(1)).alias("_clause")
    joined = episodes.join(growth.select("detector", "episode", clause),
                           on=["detector", "episode"], how="left")
    return joined.with_columns(
        pl.when(pl.col("_clause").is_null()).then("evidence")
        .when(pl.col("evidence").is_null()).then("_clause")
        .otherwise(pl.format("{}; {}", "evidence", "_clause")).alias("evidence")
    ).drop("_clause")

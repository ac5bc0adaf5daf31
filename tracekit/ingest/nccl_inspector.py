"""NCCL Inspector JSON Lines (``<host>-pid<pid>.log``, output format v4.0): one object per
completed collective or P2P op with its comm, sequence number, size and execution time.

The Inspector (``plugins/profiler/inspector``, NCCL 2.28+) records only ops of at least
``NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES`` (8192 by default), so calls are sampled, not complete;
``op_count`` keeps NCCL's per-comm sequence number so gaps stay visible.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import polars as pl

from tracekit.core import schema
from tracekit.ingest import nccl_names
from tracekit.ingest.base import Chunk, Reader, Source, iter_line_batches, quarantine_frame

FORMAT_KEY = "inspector_output_format_version"

FIELDS = {
    "comm": "$.header.id",
    "comm_name": "$.header.comm_name",
    "comm_rank": "$.header.rank",
    "nranks": "$.header.n_ranks",
    "version": "$.metadata." + FORMAT_KEY,
    "dump_us": "$.metadata.dump_timestamp_us",
    "host": "$.metadata.hostname",
    "pid": "$.metadata.pid",
    "coll": "$.coll_perf.coll",
    "coll_sn": "$.coll_perf.coll_sn",
    "coll_bytes": "$.coll_perf.coll_msg_size_bytes",
    "coll_exec_us": "$.coll_perf.coll_exec_time_us",
    "kernel_start_us": "$.coll_perf.event_trace_ts.kernel_events[0].kernel_start_ts",
    "p2p": "$.p2p_perf.p2p",
    "p2p_sn": "$.p2p_perf.p2p_sn",
    "p2p_peer": "$.p2p_perf.p2p_peer",
    "p2p_bytes": "$.p2p_perf.p2p_msg_size_bytes",
    "p2p_exec_us": "$.p2p_perf.p2p_exec_time_us",
}
"""JSONPath of every value used, in the v4.0 layout (``inspector/json.cc``)."""


@dataclass
class _State:
    best_rank: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    """(host, pid) -> (n_ranks, rank) of the largest comm seen: the process's global rank."""
    calls: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema={
        "host": pl.String, "pid": pl.Int64, "comm": pl.String, "calls": pl.Int64}))
    comms_seen: set[tuple[str, int, str]] = field(default_factory=set)
    versions: set[str] = field(default_factory=set)


class NcclInspectorReader(Reader):
    format = "nccl-inspector"
    version = "1"
    tables = ("collectives", "comms")
    priority = 20
    description = "NCCL Inspector JSON Lines (per-op size and execution time, format v4.0)"

    def sniff(self, source: Source) -> bool:
        first = source.head_text.lstrip()[:4096]
        return first.startswith("{") and FORMAT_KEY in first

    def read(self, source: Source, options: dict[str, str]) -> Iterator[Chunk]:
        state = _State()
        for batch in iter_line_batches(source):
            yield _parse(source, batch.frame(), batch.bytes_read, state)
        notes = ["the Inspector records only ops of at least NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES "
                 "(8192 by default): calls are sampled; times are derived from the dump time "
                 "unless NCCL_INSPECTOR_VERBOSE event traces are present"]
        if state.versions - {"v4.0"}:
            notes.append("Inspector output format " + ", ".join(sorted(state.versions))
                         + " was read as v4.0")
        yield Chunk(notes=notes)


def _parse(source: Source, lines: pl.DataFrame, bytes_read: int, state: _State) -> Chunk:
    blank = pl.col("line").str.strip_chars() == ""
    records = lines.filter(~blank).with_columns(
        [pl.col("line").str.json_path_match(path).alias(name) for name, path in FIELDS.items()])
    is_p2p = pl.col("p2p").is_not_null()
    typed = records.with_columns(
        pl.col("comm_rank").cast(pl.Int32, strict=False),
        pl.col("nranks").cast(pl.Int32, strict=False),
        pl.col("pid").cast(pl.Int64, strict=False),
        pl.col("dump_us").cast(pl.Int64, strict=False),
        pl.col("kernel_start_us").cast(pl.Int64, strict=False),
        pl.when(is_p2p).then("p2p").otherwise("coll").alias("op_raw"),
        pl.when(is_p2p).then("p2p_sn").otherwise("coll_sn").cast(pl.Int64, strict=False)
        .alias("op_count"),
        pl.when(is_p2p).then("p2p_bytes").otherwise("coll_bytes").cast(pl.Int64, strict=False)
        .alias("bytes"),
        pl.when(is_p2p).then("p2p_exec_us").otherwise("coll_exec_us")
        .cast(pl.Float64, strict=False).alias("exec_us"),
        pl.col("p2p_peer").cast(pl.Int32, strict=False).alias("peer"),
    )
    reason = (
        pl.when(pl.col("version").is_null())
        .then(pl.lit("not an Inspector record (invalid JSON or no metadata)"))
        .when(pl.col("comm").is_null() | pl.col("comm_rank").is_null()
              | pl.col("nranks").is_null()).then(pl.lit("header without id, rank or n_ranks"))
        .when(pl.col("host").is_null() | pl.col("pid").is_null())
        .then(pl.lit("metadata without hostname or pid"))
        .when(pl.col("op_raw").is_null()).then(pl.lit("record without coll_perf or p2p_perf"))
        .when(pl.col("op_count").is_null() | pl.col("bytes").is_null()
              | pl.col("exec_us").is_null() | pl.col("dump_us").is_null())
        .then(pl.lit("op without sequence number, size, execution time or dump time"))
    )
    checked = typed.with_columns(reason.alias("reason"))
    good = checked.filter(pl.col("reason").is_null())
    state.versions.update(good["version"].unique().to_list())
    _update_ranks(state, good)
    comms = _new_comms(good, state)
    exec_ns = (pl.col("exec_us") * 1000).round().cast(pl.Int64)
    start_ns = pl.coalesce(pl.col("kernel_start_us") * 1000, pl.col("dump_us") * 1000 - exec_ns)
    key = ["host", "pid", "comm"]
    calls = good.join(state.calls, on=key, how="left").with_columns(
        (pl.col("calls").fill_null(0) + pl.int_range(pl.len()).over(key)).alias("seq"),
        _rank_expr(state).alias("rank"),
        start_ns.alias("t_start_ns"),
    )
    counts = good.group_by(key, maintain_order=True).len("calls").with_columns(
        pl.col("calls").cast(pl.Int64))
    state.calls = pl.concat([state.calls, counts]).group_by(key, maintain_order=True).agg(
        pl.col("calls").sum())
    op = nccl_names.op_name(pl.col("op_raw")).fill_null(pl.col("op_raw").str.to_lowercase())
    collectives = calls.select(
        pl.lit(None, dtype=pl.String).alias("job"), "rank", "host", "pid", "comm", "nranks",
        op.alias("op"), "seq", "op_count", "bytes",
        pl.when(op.is_in(nccl_names.P2P_OPS)).then("peer").alias("peer"),
        "t_start_ns", (pl.col("t_start_ns") + exec_ns).alias("t_end_ns"),
    )
    return Chunk(
        tables={"collectives": schema.conform("collectives", collectives), "comms": comms},
        quarantine=quarantine_frame(source, checked.filter(pl.col("reason").is_not_null())),
        lines=lines.height,
        skipped=lines.select(blank.sum()).item(),
        bytes_read=bytes_read,
    )


def _update_ranks(state: _State, good: pl.DataFrame) -> None:
    """The process's global rank is its rank on the largest comm it reports (the world comm
    whenever the Inspector saw an op on it), the rule the NCCL debug reader uses."""
    largest = good.group_by("host", "pid").agg(
        pl.col("nranks", "comm_rank").sort_by("nranks", descending=True).first())
    for host, pid, nranks, rank in largest.iter_rows():
        if nranks > state.best_rank.get((host, pid), (-1, 0))[0]:
            state.best_rank[(host, pid)] = (nranks, rank)


def _rank_expr(state: _State) -> pl.Expr:
    ranks = {f"{host}\x00{pid}": rank for (host, pid), (_, rank) in state.best_rank.items()}
    process = pl.concat_str([pl.col("host"), pl.col("pid").cast(pl.String)], separator="\x00")
    return process.replace_strict(ranks, default=None, return_dtype=pl.Int32)


def _new_comms(good: pl.DataFrame, state: _State) -> pl.DataFrame:
    members = good.unique(["host", "pid", "comm"], keep="first", maintain_order=True)
    members = members.filter(
        ~pl.struct("host", "pid", "comm").is_in(
            [{"host": h, "pid": p, "comm": c} for h, p, c in state.comms_seen]))
    state.comms_seen.update(members.select("host", "pid", "comm").iter_rows())
    comms = members.select(
        pl.lit(None, dtype=pl.String).alias("job"), "comm", pl.col("comm").alias("comm_id"),
        _rank_expr(state).alias("rank"), "comm_rank", "nranks", "host", "pid",
        pl.col("comm_name").replace("unknown", None).alias("comm_name"))
    return schema.conform("comms", comms)


READERS = [NcclInspectorReader()]

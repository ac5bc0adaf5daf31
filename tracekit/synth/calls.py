"""Turn simulated call records into a frame of NCCL calls, one row per call per rank, with the
identity a real rank would show: host, pid, device, communicator handle and per-communicator
call number. The collective-log writers (hook CSV, NCCL debug log) print this frame."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from tracekit.synth.layout import Layout
from tracekit.synth.timing import CycleResult

OPS = ("AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Send", "Recv")
GROUPS = ("world", "tp", "dp", "pp", "embedding")


@dataclass(frozen=True)
class Identity:
    """Process identity of every rank and the handles of its communicators."""

    hosts: list[str]
    pids: np.ndarray
    handles: dict[tuple[int, str], int]
    """(rank, group kind) -> communicator pointer value."""
    buffers: np.ndarray
    streams: np.ndarray

    @classmethod
    def draw(cls, layout: Layout, hosts: list[str], rng: np.random.Generator) -> Identity:
        """Pointers and pids that look like a real run's (heap addresses 0x55..., pids per
        host in a block), fixed by the seed."""
        host_pid = rng.integers(4_000, 90_000, size=layout.hosts)
        pids = np.array([host_pid[layout.host_of(r)] + layout.local_gpu(r)
                         for r in range(layout.world)])
        heaps = 0x550000000000 + (rng.integers(0x100, 0xFFFF, size=layout.world) << 28)
        handles = {}
        for r in range(layout.world):
            for g, group in enumerate(GROUPS):
                handles[(r, group)] = int(heaps[r] + 0x1C8A3F2A0 + g * 0x1A4C2E00)
        buffers = 0x7F0000000000 + (rng.integers(0x100, 0xFFF, size=layout.world) << 28)
        streams = heaps + 0x1C7F0E510
        return cls(hosts, pids, handles, buffers, streams)

    def group_of(self, layout: Layout, rank: int, group: str) -> int:
        """Index of the communicator instance of kind ``group`` that holds ``rank``."""
        t, d, p = layout.coords(rank)
        return {"world": 0, "tp": p * layout.dp + d, "dp": p * layout.tp + t,
                "pp": d * layout.tp + t, "embedding": d * layout.tp + t}[group]


def call_frame(layout: Layout, result: CycleResult, starts_ns: np.ndarray,
               first_cycle: int) -> pl.DataFrame:
    """All calls of a chunk, sorted per rank in issue order.

    Columns: rank, cycle (global), position, sub, op, group, nranks, count, datatype, redop,
    peer (communicator rank of the peer for send / recv, else -1), t_call_ns, t_end_ns.
    """
    tp, dp = layout.tp, layout.dp
    columns: dict[str, list[np.ndarray]] = {k: [] for k in (
        "rank", "cycle", "position", "sub", "op", "group", "nranks", "count", "datatype",
        "redop", "peer", "t_call_ns", "t_end_ns")}
    nranks = {"world": layout.world, "tp": tp, "dp": dp, "pp": layout.pp, "embedding": 2}
    for rec in result.calls:
        cycles = np.flatnonzero(rec.active)
        if not len(cycles):
            continue
        grid = (np.arange(tp)[None, :] + tp * (np.arange(dp)[:, None] + dp * rec.stage)).ravel()
        per = grid.size
        rank = np.tile(grid, len(cycles))
        cycle = np.repeat(cycles, per)
        base = starts_ns[cycles][:, None, None]
        t_call = (base + np.round(rec.arrival_s[cycles] * 1e9).astype(np.int64)).ravel()
        t_end = (base + np.round(rec.end_s[cycles] * 1e9).astype(np.int64)).ravel()
        op = rec.op
        # the peer of a send / recv, the root of a broadcast (TP rank 0), else none
        calls = op.calls if op.kind == "p2p" else ((op.op, 0 if op.op == "Broadcast" else -1),)
        group = "pp" if op.kind == "p2p" else op.group
        for sub, (name, peer) in enumerate(calls):
            size = rank.size
            columns["rank"].append(rank)
            columns["cycle"].append(cycle + first_cycle)
            columns["position"].append(np.full(size, rec.position, dtype=np.int32))
            columns["sub"].append(np.full(size, sub, dtype=np.int8))
            columns["op"].append(np.full(size, OPS.index(name), dtype=np.int8))
            columns["group"].append(np.full(size, GROUPS.index(group), dtype=np.int8))
            columns["nranks"].append(np.full(size, nranks[group], dtype=np.int32))
            columns["count"].append(np.full(size, op.count, dtype=np.int64))
            columns["datatype"].append(np.full(size, op.dtype, dtype=np.int32))
            columns["redop"].append(np.full(size, op.nccl_op, dtype=np.int32))
            columns["peer"].append(np.full(size, peer, dtype=np.int32))
            columns["t_call_ns"].append(t_call)
            columns["t_end_ns"].append(t_end)
    if not columns["rank"]:
        return pl.DataFrame()
    frame = pl.DataFrame({k: np.concatenate(v) for k, v in columns.items()})
    return frame.with_columns(
        pl.col("rank").cast(pl.Int32),
        pl.col("op").replace_strict(dict(enumerate(OPS)), return_dtype=pl.String),
        pl.col("group").replace_strict(dict(enumerate(GROUPS)), return_dtype=pl.String),
    ).sort("rank", "cycle", "position", "sub")


class CallNumbers:
    """Per-rank, per-communicator call numbers that continue across chunks."""

    def __init__(self) -> None:
        self.offsets: dict[tuple[int, str], tuple[int, int]] = {}
        self.events: dict[int, int] = {}

    def number(self, frame: pl.DataFrame) -> pl.DataFrame:
        """Add ``call`` (0-based per rank and communicator), ``launch`` (per rank and
        communicator, one per NCCL group: the send / recv of one pipeline exchange share it)
        and ``event_id`` (per rank)."""
        offsets = pl.DataFrame(
            {"rank": [k[0] for k in self.offsets], "group": [k[1] for k in self.offsets],
             "_offset": [v[0] for v in self.offsets.values()],
             "_launch": [v[1] for v in self.offsets.values()]},
            schema={"rank": pl.Int32, "group": pl.String, "_offset": pl.Int64,
                    "_launch": pl.Int64})
        events = pl.DataFrame({"rank": list(self.events), "_event": list(self.events.values())},
                              schema={"rank": pl.Int32, "_event": pl.Int64})
        numbered = (
            frame.join(offsets, on=["rank", "group"], how="left")
            .join(events, on="rank", how="left")
            .with_columns(
                (pl.int_range(pl.len()).over("rank", "group") + pl.col("_offset").fill_null(0))
                .alias("call"),
                ((pl.col("sub") == 0).cast(pl.Int64).cum_sum().over("rank", "group") - 1
                 + pl.col("_launch").fill_null(0)).alias("launch"),
                (pl.int_range(pl.len()).over("rank") + pl.col("_event").fill_null(0))
                .alias("event_id"),
            )
            .drop("_offset", "_launch", "_event")
        )
        last = numbered.group_by("rank", "group").agg(pl.col("call", "launch").max())
        for rank, group, call, launch in last.iter_rows():
            self.offsets[(rank, group)] = (call + 1, launch + 1)
        for row in numbered.group_by("rank").agg(pl.col("event_id").max()).iter_rows():
            self.events[row[0]] = row[1] + 1
        return numbered


def pointer_columns(identity: Identity) -> list[pl.Expr]:
    """``sendbuff`` / ``recvbuff`` as NCCL prints them (``%p``): one send and one receive
    buffer per rank; NCCL >= 2.12 prints ``(nil)`` for the unused send buffer of a Send / Recv
    and the user buffer as ``recvbuff``; in-place all-reduces and broadcasts use one buffer."""
    rank = pl.col("rank")
    send = {r: f"0x{int(b):x}" for r, b in enumerate(identity.buffers)}
    receive = {r: f"0x{int(b) + 0x4000000:x}" for r, b in enumerate(identity.buffers)}
    in_place = pl.col("op").is_in(["AllReduce", "Broadcast"])
    return [
        pl.when(pl.col("op").is_in(["Send", "Recv"])).then(pl.lit("(nil)"))
        .otherwise(rank.replace_strict(send, return_dtype=pl.String)).alias("sendbuff"),
        pl.when(in_place).then(rank.replace_strict(send, return_dtype=pl.String))
        .otherwise(rank.replace_strict(receive, return_dtype=pl.String)).alias("recvbuff"),
    ]


def comm_handles(identity: Identity) -> pl.Expr:
    """The ``comm`` pointer of each call's (rank, communicator kind)."""
    handles = {f"{r}/{g}": f"0x{v:x}" for (r, g), v in identity.handles.items()}
    return pl.format("{}/{}", "rank", "group").replace_strict(handles).alias("comm")

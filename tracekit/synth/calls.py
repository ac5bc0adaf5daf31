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
OP_NAMES, GROUP_KINDS = pl.Enum(OPS), pl.Enum(GROUPS)
"""Call rows hold op and communicator kind as enums: printed as their names, looked up by
their codes."""


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


@dataclass
class _Slots:
    """One stage's calls over a chunk, in issue order: every rank of a stage issues the same
    sequence, so one row per call of a single rank (a *slot*) stands for them all."""

    columns: dict[str, np.ndarray]
    """Per-slot values: cycle, position, sub, op / group codes, nranks, count, ..."""
    t_call_ns: np.ndarray
    t_end_ns: np.ndarray
    """``[slots, ranks of the stage]``."""


class CallBuilder:
    """Builds each chunk's call rows, per rank in issue order, and numbers them: ``call``
    (0-based per rank and communicator), ``launch`` (per rank and communicator, one per NCCL
    group: the send / recv of one pipeline exchange share it) and ``event_id`` (per rank),
    continuing across chunks.

    Rows are laid out already in order (stage by stage, rank-major, then the stage's slot
    sequence), so a chunk of millions of rows needs no sort; numbers are the slot's count
    within the chunk plus the rank's running offset."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.calls = np.zeros((layout.world, len(GROUPS)), dtype=np.int64)
        self.launches = np.zeros((layout.world, len(GROUPS)), dtype=np.int64)
        self.events = np.zeros(layout.world, dtype=np.int64)

    def frame(self, result: CycleResult, starts_ns: np.ndarray, first_cycle: int) -> pl.DataFrame:
        """All calls of a chunk, sorted by rank, each rank's in issue order. Columns: rank,
        cycle (global), position, sub, op, group, nranks, count, datatype, redop, peer
        (communicator rank of the peer for send / recv, else -1), t_call_ns, t_end_ns, call,
        launch, event_id."""
        L = self.layout
        per_stage = L.tp * L.dp
        parts = []
        for stage in range(L.pp):
            slots = _stage_slots(L, [r for r in result.calls if r.stage == stage], starts_ns)
            if slots is None:
                continue
            ranks = np.arange(per_stage) + stage * per_stage
            parts.append(self._rows(ranks, slots, first_cycle))
        if not parts:
            return pl.DataFrame()
        return pl.concat(parts)

    def _rows(self, ranks: np.ndarray, slots: _Slots, first_cycle: int) -> pl.DataFrame:
        col = slots.columns
        n = len(col["cycle"])
        group = col["group"]
        one_hot = group[:, None] == np.arange(len(GROUPS))[None, :]
        call_in_chunk = (np.cumsum(one_hot, axis=0) - 1)[np.arange(n), group]
        launch_in_chunk = (np.cumsum(one_hot & (col["sub"] == 0)[:, None], axis=0)
                           - 1)[np.arange(n), group]
        call = (self.calls[ranks][:, group] + call_in_chunk).ravel()
        launch = (self.launches[ranks][:, group] + launch_in_chunk).ravel()
        event_id = (self.events[ranks][:, None] + np.arange(n)).ravel()
        self.calls[ranks] += one_hot.sum(axis=0)
        self.launches[ranks] += (one_hot & (col["sub"] == 0)[:, None]).sum(axis=0)
        self.events[ranks] += n

        def tiled(values: np.ndarray) -> np.ndarray:
            return np.tile(values, len(ranks))

        return pl.DataFrame({
            "rank": np.repeat(ranks.astype(np.int32), n),
            "cycle": tiled(col["cycle"] + first_cycle),
            "position": tiled(col["position"]),
            "sub": tiled(col["sub"]),
            "op": pl.Series(OPS, dtype=OP_NAMES).gather(tiled(col["op"])),
            "group": pl.Series(GROUPS, dtype=GROUP_KINDS).gather(tiled(group)),
            "nranks": tiled(col["nranks"]),
            "count": tiled(col["count"]),
            "datatype": tiled(col["datatype"]),
            "redop": tiled(col["redop"]),
            "peer": tiled(col["peer"]),
            "t_call_ns": slots.t_call_ns.T.ravel(),
            "t_end_ns": slots.t_end_ns.T.ravel(),
            "call": call,
            "launch": launch,
            "event_id": event_id,
        })


def _stage_slots(layout: Layout, records: list, starts_ns: np.ndarray) -> _Slots | None:
    """The slot sequence of one stage: every (cycle, op position, sub-call) its ranks issue,
    sorted once at slot level, with the issue and end times of each rank."""
    nranks = {"world": layout.world, "tp": layout.tp, "dp": layout.dp, "pp": layout.pp,
              "embedding": 2}
    pieces: dict[str, list[np.ndarray]] = {k: [] for k in (
        "cycle", "position", "sub", "op", "group", "nranks", "count", "datatype", "redop",
        "peer")}
    times: list[tuple[np.ndarray, np.ndarray]] = []
    for rec in records:
        cycles = np.flatnonzero(rec.active)
        if not len(cycles):
            continue
        base = starts_ns[cycles][:, None]
        t_call = base + np.round(rec.arrival_s[cycles] * 1e9).astype(np.int64).reshape(
            len(cycles), -1)
        t_end = base + np.round(rec.end_s[cycles] * 1e9).astype(np.int64).reshape(
            len(cycles), -1)
        op = rec.op
        # the peer of a send / recv, the root of a broadcast (TP rank 0), else none
        calls = op.calls if op.kind == "p2p" else ((op.op, 0 if op.op == "Broadcast" else -1),)
        group = "pp" if op.kind == "p2p" else op.group
        for sub, (name, peer) in enumerate(calls):
            size = len(cycles)
            pieces["cycle"].append(cycles)
            for key, value, dtype in (
                    ("position", rec.position, np.int32), ("sub", sub, np.int8),
                    ("op", OPS.index(name), np.int8), ("group", GROUPS.index(group), np.intp),
                    ("nranks", nranks[group], np.int32), ("count", op.count, np.int64),
                    ("datatype", op.dtype, np.int32), ("redop", op.nccl_op, np.int32),
                    ("peer", peer, np.int32)):
                pieces[key].append(np.full(size, value, dtype=dtype))
            times.append((t_call, t_end))
    if not times:
        return None
    columns = {k: np.concatenate(v) for k, v in pieces.items()}
    order = np.lexsort((columns["sub"], columns["position"], columns["cycle"]))
    return _Slots({k: v[order] for k, v in columns.items()},
                  np.concatenate([t for t, _ in times])[order],
                  np.concatenate([t for _, t in times])[order])


def per_rank(values) -> pl.Expr:
    """A value of each row's rank, looked up by position (a gather, not a hash lookup)."""
    return pl.lit(pl.Series(values)).gather(pl.col("rank"))


def pointer_columns(identity: Identity) -> list[pl.Expr]:
    """``sendbuff`` / ``recvbuff`` as NCCL prints them (``%p``): one send and one receive
    buffer per rank; NCCL >= 2.12 prints ``(nil)`` for the unused send buffer of a Send / Recv
    and the user buffer as ``recvbuff``; in-place all-reduces and broadcasts use one buffer."""
    send = per_rank([f"0x{int(b):x}" for b in identity.buffers])
    receive = per_rank([f"0x{int(b) + 0x4000000:x}" for b in identity.buffers])
    in_place = pl.col("op").is_in(["AllReduce", "Broadcast"])
    return [
        pl.when(pl.col("op").is_in(["Send", "Recv"])).then(pl.lit("(nil)"))
        .otherwise(send).alias("sendbuff"),
        pl.when(in_place).then(send).otherwise(receive).alias("recvbuff"),
    ]


def per_communicator(values: dict[tuple[int, str], object]) -> pl.Expr:
    """A value of each row's (rank, communicator kind), looked up by position."""
    world = 1 + max(rank for rank, _ in values)
    table = [values[(r, g)] for r in range(world) for g in GROUPS]
    return pl.lit(pl.Series(table)).gather(pl.col("rank") * len(GROUPS)
                                           + pl.col("group").to_physical())


def comm_handles(identity: Identity) -> pl.Expr:
    """The ``comm`` pointer of each call's (rank, communicator kind)."""
    return per_communicator({k: f"0x{v:x}" for k, v in identity.handles.items()}).alias("comm")

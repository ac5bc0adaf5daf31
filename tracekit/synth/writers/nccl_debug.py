"""Per-process ``NCCL_DEBUG=INFO`` logs (``NCCL_DEBUG_SUBSYS=INIT,COLL``,
``NCCL_DEBUG_FILE=nccl.%h.%p``) as NCCL 2.27 prints them (FORMATS.md 1.1-1.3).

Each process logs its start-up (bootstrap, version, network), the world communicator's
``ncclCommInitRankConfig`` Init START / COMPLETE with topology and timings lines, one
``ncclCommSplit`` Init COMPLETE per Megatron group it belongs to, then one COLL line per call at
enqueue time. Since 2.27, ``opCount`` only advances on communicators with network (proxy) ops,
so NVLink-only communicators print ``opCount 0`` throughout; a Send / Recv pair of one pipeline
exchange shares one group launch.

Timestamps: NCCL prints none on INFO lines unless ``NCCL_DEBUG_TIMESTAMP_LEVELS=INFO`` (2.26+);
without them a log gives call order but no timing, so the writer turns them on by default with
``NCCL_DEBUG_TIMESTAMP_FORMAT="[%F %T.%6f] "`` (µs, UTC on a synthetic cluster).
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import polars as pl

from tracekit.synth.calls import (
    GROUPS,
    Identity,
    comm_handles,
    per_communicator,
    per_rank,
    pointer_columns,
)
from tracekit.synth.layout import Layout

NCCL_VERSION = "2.27.5+cuda12.9"
CUDA_DRIVER = 12090
TIMESTAMP_FORMAT = "[%Y-%m-%d %H:%M:%S%.6f] "
"""``NCCL_DEBUG_TIMESTAMP_FORMAT="[%F %T.%6f] "`` in chrono's spelling."""

INIT_LEAD_S = 60.0
"""The world communicator is created this long before the first training iteration (model
and data-loader setup run in between)."""

SPLIT_ORDER = ("tp", "dp", "pp", "embedding")
"""Megatron's initialize_model_parallel creates its groups in this order, each a split of the
world communicator."""

CUDA_DEV = 0
"""Every process runs under ``CUDA_VISIBLE_DEVICES`` set to its own GPU, as launchers do, so
NCCL prints CUDA device 0 for all of them; the GPU itself is in ``nvmlDev`` and ``busId``."""


def bus_id(local_gpu: int) -> str:
    """PCI bus id as NCCL's ``%lx`` prints it (``18000`` = 0000:18:00.0); dcgm-exporter shows
    the same GPUs as ``00000000:18:00.0`` (tracekit/synth/writers/monitoring.py)."""
    return f"{0x18 + 0x10 * local_gpu:x}000"


def hex_digits(values: np.ndarray) -> pl.Series:
    """Non-negative integers as lower-case hex without ``0x`` (``%lx``), vectorised."""
    values = np.asarray(values, dtype=np.uint64)
    nibbles = (values[:, None] >> (4 * np.arange(15, -1, -1, dtype=np.uint64))) & np.uint64(15)
    ascii_codes = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)[nibbles.astype(np.intp)]
    text = pl.Series(np.ascontiguousarray(ascii_codes).view("S16").ravel()).cast(pl.String)
    return text.str.strip_chars_start("0").replace("", "0")


class NcclDebugWriter:
    """Streams each rank's calls to ``nccl.<host>.<pid>.log``, after its Init lines."""

    def __init__(self, folder: Path, layout: Layout, identity: Identity, seed: int,
                 start_ns: int, timestamps: bool = True) -> None:
        self.layout = layout
        self.identity = identity
        self.timestamps = timestamps
        folder.mkdir(parents=True, exist_ok=True)
        self.paths = [folder / f"nccl.{identity.hosts[layout.host_of(r)]}.{identity.pids[r]}.log"
                      for r in range(layout.world)]
        self.comm_ids = {c.name: zlib.crc32(f"{seed}/{c.name}".encode()) << 32
                         | zlib.crc32(f"{c.name}/{seed}".encode()) for c in layout.communicators}
        self.network = {(r, c.kind): layout.crosses_hosts(c.ranks)
                        for c in layout.communicators for r in c.ranks}
        rng = np.random.default_rng([seed, 6])
        for rank, path in enumerate(self.paths):
            path.write_text("\n".join(self._start_up(rank, start_ns, rng)) + "\n")

    # -- start-up --------------------------------------------------------------------------------

    def _prefix(self, t_ns: int, tid: int, rank: int) -> str:
        L, ident = self.layout, self.identity
        stamp = ""
        if self.timestamps:
            stamp = pl.select(pl.from_epoch(pl.lit(t_ns), "ns").dt.strftime(TIMESTAMP_FORMAT)
                              ).item()
        return (f"{stamp}{ident.hosts[L.host_of(rank)]}:{ident.pids[rank]}:{tid} "
                f"[{CUDA_DEV}] NCCL INFO ")

    def _start_up(self, rank: int, start_ns: int, rng: np.random.Generator) -> list[str]:
        L, ident = self.layout, self.identity
        pid = int(ident.pids[rank])
        init_tid = pid + 178 + int(rng.integers(0, 12))
        host = L.host_of(rank)
        address = f"bond0:10.20.{host // 250}.{host % 250 + 1}<0>"
        gpu = L.local_gpu(rank)
        device = f"cudaDev {CUDA_DEV} nvmlDev {gpu} busId {bus_id(gpu)}"
        t = start_ns - int(INIT_LEAD_S * 1e9) + int(rng.integers(0, 200_000_000))
        nics = " ".join(f"[{n}]mlx5_{n}:1/RoCE" for n in range(L.hardware.nics_per_host))

        def line(tid: int, text: str, after_s: float = 0.0) -> str:
            nonlocal t
            t += int(after_s * 1e9)
            return self._prefix(t, tid, rank) + text

        world = self.layout.communicators[0]
        world_ptr = f"0x{ident.handles[(rank, 'world')]:x}"
        api = "ncclCommInitRankConfig"
        lines = [
            line(pid, f"Bootstrap: Using {address}"),
            line(pid, f"cudaDriverVersion {CUDA_DRIVER}"),
            line(pid, f"NCCL version {NCCL_VERSION}"),
            line(pid, "Comm config Blocking set to 1"),
            line(init_tid, "NET/Plugin: Could not find: libnccl-net.so. ", 0.05),
            line(init_tid, f"NET/IB : Using {nics} [RO]; OOB {address}"),
            line(init_tid, "Using network IB"),
            line(init_tid, f"{api} comm {world_ptr} rank {rank} nranks {L.world} {device} "
                           f"commId 0x{self.comm_ids[world.name]:x} - Init START", 0.01),
            line(init_tid, f"comm {world_ptr} rank {rank} nRanks {L.world} nNodes {L.hosts} "
                           f"localRanks {min(L.gpus_per_host, L.world)} localRank {gpu} MNNVL 0"),
        ]
        total_s = 1.2 + float(rng.uniform(0, 1.5))
        lines += [
            line(init_tid, f"{api} comm {world_ptr} rank {rank} nranks {L.world} {device} "
                           f"commId 0x{self.comm_ids[world.name]:x} - Init COMPLETE", total_s),
            line(init_tid, f"Init timings - {api}: rank {rank} nranks {L.world} "
                           + _timings(total_s, rng)),
        ]
        splits = 0
        for kind in SPLIT_ORDER:
            for comm in self.layout.comms_of_kind(kind):
                if rank not in comm.ranks or len(comm.ranks) < 2:
                    continue
                splits += 1
                pointer = f"0x{ident.handles[(rank, kind)]:x}"
                color = zlib.crc32(f"{kind}:{comm.ranks}".encode()) & 0x7FFFFFFF
                total_s = 0.2 + float(rng.uniform(0, 0.8))
                lines += [
                    line(pid, f"ncclCommSplit comm {pointer} rank {comm.ranks.index(rank)} "
                              f"nranks {len(comm.ranks)} {device} parent {world_ptr} "
                              f"splitCount {splits} color {color} key {rank} - Init COMPLETE",
                         total_s),
                    line(pid, f"Init timings - ncclCommSplit: rank {comm.ranks.index(rank)} "
                              f"nranks {len(comm.ranks)} " + _timings(total_s, rng)),
                ]
        return lines

    # -- calls -----------------------------------------------------------------------------------

    def write(self, calls: pl.DataFrame) -> None:
        """Append a chunk's calls (sorted by rank, as CallBuilder makes them)."""
        L, ident = self.layout, self.identity
        envelope = per_rank([f"{ident.hosts[L.host_of(r)]}:{ident.pids[r]}:{ident.pids[r]} "
                             f"[{CUDA_DEV}] NCCL INFO " for r in range(L.world)])
        streams = per_rank([f"0x{int(s):x}" for s in ident.streams])
        network = per_communicator({(r, g): self.network.get((r, g), False)
                                    for r in range(L.world) for g in GROUPS})
        op_count = pl.when(network).then(pl.col("_launch")).otherwise(pl.lit("0"))
        stamp = (pl.from_epoch("t_call_ns", "ns").dt.strftime(TIMESTAMP_FORMAT)
                 if self.timestamps else pl.lit(""))
        launches = hex_digits(calls["launch"].to_numpy()).alias("_launch")
        lines = calls.with_columns(launches).select(
            pl.concat_str(
                stamp,
                envelope,
                pl.format("{}: opCount {} sendbuff {} recvbuff {} count {} datatype {} op {} "
                          "root {} comm {} [nranks={}] stream {}",
                          "op", op_count, *pointer_columns(ident),
                          "count", "datatype", "redop", pl.max_horizontal("peer", 0),
                          comm_handles(ident), "nranks", streams),
            ).alias("line"),
        )["line"]
        bounds = np.searchsorted(calls["rank"].to_numpy(), np.arange(L.world + 1))
        for rank, (start, end) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
            if end > start:
                with self.paths[rank].open("a") as stream:
                    stream.write("\n".join(lines.slice(start, end - start).to_list()) + "\n")


def _timings(total_s: float, rng: np.random.Generator) -> str:
    """The ``Init timings`` breakdown (2.23+): phases that add up to the total."""
    phases = ("kernels", "alloc", "bootstrap", "allgathers", "topo", "graphs", "connections",
              "rest")
    shares = rng.dirichlet([1.5, 0.4, 0.3, 0.2, 2.0, 0.1, 5.0, 0.4])
    return f"total {total_s:.2f} (" + ", ".join(
        f"{name} {total_s * share:.2f}" for name, share in zip(phases, shares, strict=True)) + ")"

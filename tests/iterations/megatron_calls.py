"""Megatron-like per-rank call sequences with known iteration times, for the iteration tests.

One iteration of one rank: 1F1B micro-batches (PP recv/send around each forward and backward),
two TP all-reduces per layer each way, the last stage's DP loss all-reduce, embedding-grad
all-reduce on first/last stages, DP buckets (reduce-scatter + all-gather with the distributed
optimizer, else all-reduce) and the world grad-norm all-reduce that ends the iteration (after a
found-inf all-reduce of the same size with fp16). With experts, every layer adds a dispatch and
a combine all-to-all whose sizes change from iteration to iteration (MoE token routing). An
iteration ``i`` runs from ``T_i`` to ``T_i + d_i``; each call sits at a fixed fraction of it,
and the grad-norm all-reduce completes exactly at ``T_i + d_i``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from tracekit.core import schema

ACT = 4096 * 1 * 1024 * 2
"""Bytes of one activation (seq 4096, micro-batch 1, hidden 1024, bf16)."""


@dataclass(frozen=True)
class Layout:
    tp: int = 2
    pp: int = 1
    dp: int = 2
    micro: int = 4
    layers: int = 2
    buckets: int = 3
    distributed_optimizer: bool = False
    found_inf: bool = False
    experts: bool = False

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp


def iteration_calls(layout: Layout, stage: int) -> list[tuple[str, int, int, int | None]]:
    """(op, nranks, bytes, peer) of one iteration on a rank of ``stage``, in issue order."""
    calls: list[tuple[str, int, int, int | None]] = []
    tp = [("allreduce", layout.tp, ACT, None)] * (2 * layout.layers) if layout.tp > 1 else []
    if layout.experts:
        tp += [("alltoall", layout.dp, ACT, None)] * (2 * layout.layers)
    first, last = stage == 0, stage == layout.pp - 1

    def forward() -> None:
        if not first:
            calls.append(("recv", 2, ACT, stage - 1))
        calls.extend(tp)
        if last and layout.dp > 1:
            calls.append(("allreduce", layout.dp, 8, None))
        if not last:
            calls.append(("send", 2, ACT, stage + 1))

    def backward() -> None:
        if not last:
            calls.append(("recv", 2, ACT, stage + 1))
        calls.extend(tp)
        if not first:
            calls.append(("send", 2, ACT, stage - 1))

    warmup = min(layout.pp - stage - 1, layout.micro)
    for _ in range(warmup):
        forward()
    for _ in range(layout.micro - warmup):
        forward()
        backward()
    for _ in range(warmup):
        backward()
    if layout.pp > 1 and (first or last):
        calls.append(("allreduce", 2, 50_000_000, None))
    if layout.dp > 1:
        sizes = [160_000_000] * (layout.buckets - 1) + [37_000_000]
        op = "reducescatter" if layout.distributed_optimizer else "allreduce"
        calls.extend((op, layout.dp, size, None) for size in sizes)
    calls.extend([("allreduce", layout.world, 4, None)] * (2 if layout.found_inf else 1))
    if layout.dp > 1 and layout.distributed_optimizer:
        calls[:0] = [("allgather", layout.dp, size // 2, None)
                     for size in [160_000_000] * (layout.buckets - 1) + [37_000_000]]
    return calls


def rank_frame(
    layout: Layout,
    stage: int = 0,
    rank: int = 0,
    iterations: int = 200,
    base_s: float = 1.0,
    jitter: float = 0.02,
    seed: int = 0,
    t0_ns: int = 1_700_000_000_000_000_000,
    pid: int = 1000,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Collectives of one rank and its true iterations (job-level truth, rank null)."""
    rng = np.random.default_rng(seed)
    pattern = iteration_calls(layout, stage)
    calls = len(pattern)
    durations_s = base_s * (1 + jitter * rng.standard_normal(iterations))
    starts_s = np.r_[0.0, np.cumsum(durations_s)[:-1]]
    fraction = (np.arange(calls) + 1) / calls
    t_end = starts_s[:, None] + fraction[None, :] * durations_s[:, None]
    t_start = t_end - 0.2 * durations_s[:, None] / calls
    ops, nranks, nbytes, peers = zip(*pattern, strict=True)
    sizes = np.tile(np.array(nbytes, dtype=np.int64), iterations)
    routed = np.tile(np.array(ops) == "alltoall", iterations)
    sizes[routed] = (sizes[routed] * rng.uniform(0.5, 1.5, routed.sum())).astype(np.int64)
    frame = pl.DataFrame({
        "job": "test",
        "rank": np.full(iterations * calls, rank, dtype=np.int32),
        "pid": np.full(iterations * calls, pid, dtype=np.int64),
        "op": np.tile(np.array(ops), iterations),
        "nranks": np.tile(np.array(nranks, dtype=np.int32), iterations),
        "bytes": sizes,
        "peer": pl.Series(list(peers) * iterations, dtype=pl.Int32),
        "t_start_ns": (t0_ns + t_start.ravel() * 1e9).astype(np.int64),
        "t_end_ns": (t0_ns + t_end.ravel() * 1e9).astype(np.int64),
    })
    truth = pl.DataFrame({
        "job": "test",
        "rank": pl.Series([None] * iterations, dtype=pl.Int32),
        "iteration": np.arange(1, iterations + 1, dtype=np.int64),
        "t_start_ns": (t0_ns + starts_s * 1e9).astype(np.int64),
        "t_end_ns": (t0_ns + (starts_s + durations_s) * 1e9).astype(np.int64),
        "duration_s": durations_s,
        "source": "truth",
        "quality": "ok",
    })
    return collectives(frame), schema.conform("iterations", truth)


def collectives(frame: pl.DataFrame) -> pl.DataFrame:
    """Conform a test frame to the ``collectives`` schema, numbering ``seq`` per rank."""
    return schema.conform("collectives", frame.with_columns(
        pl.int_range(pl.len()).over("rank").cast(pl.Int64).alias("seq")))


def drop_records(frame: pl.DataFrame, share: float, seed: int = 1) -> pl.DataFrame:
    """Drop ``share`` of the records at random (as NCCL Inspector does under load)."""
    keep = np.random.default_rng(seed).random(frame.height) >= share
    return frame.filter(pl.Series(keep))


def insert_calls(frame: pl.DataFrame, after_ns: int, calls: list[tuple[str, int, int]],
                 span_ns: int) -> pl.DataFrame:
    """Insert extra calls (evaluation, checkpoint barriers) spread over ``span_ns`` after
    ``after_ns``, and delay every later call by ``span_ns``."""
    later = pl.col("t_start_ns") > after_ns
    shifted = frame.with_columns(
        pl.when(later).then(pl.col(c) + span_ns).otherwise(pl.col(c)).alias(c)
        for c in ("t_start_ns", "t_end_ns"))
    offsets = (np.arange(len(calls)) + 1) * span_ns // (len(calls) + 1)
    template = frame.row(0, named=True)
    extra = pl.DataFrame([
        {**template, "op": op, "nranks": nranks, "bytes": size, "peer": None,
         "t_start_ns": after_ns + int(o), "t_end_ns": after_ns + int(o) + 1000}
        for (op, nranks, size), o in zip(calls, offsets, strict=True)
    ], schema=frame.schema)
    return collectives(pl.concat([shifted, extra]).sort("t_start_ns"))

"""Iteration reconstruction speed: a job's ``collectives`` table written to Parquet (one file
per rank), then reconstructed from one scan per rank as a dataset's are read, against the
baseline of only reading that table back (``scan_parquet`` + ``collect``); CPU seconds of this
process (run it with ``POLARS_MAX_THREADS=1`` for a worker's one core). Sizes:
``TRACEKIT_BENCH_RANKS`` x ``TRACEKIT_BENCH_ITERATIONS`` (default 256 x 10,000 as the issue
asks; set smaller for a quick run)."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

from tracekit.core import schema
from tracekit.iterations import reconstruct

PATTERN = (
    [("allreduce", 8, 8_388_608, None)] * 32
    + [("send", 2, 8_388_608, 1), ("recv", 2, 8_388_608, 1)]
    + [("reducescatter", 4, 160_000_000, None)] * 3 + [("allreduce", 64, 4, None)]
)
"""One rank's iteration: TP all-reduces, PP send/recv, DP reduce-scatters, world grad norm."""


def _rank_calls(rank: int, iterations: int, rng: np.random.Generator) -> pl.DataFrame:
    calls = len(PATTERN)
    durations_s = 1.0 + 0.02 * rng.standard_normal(iterations)
    starts_s = np.r_[0.0, np.cumsum(durations_s)[:-1]]
    t_ns = 1_700_000_000_000_000_000 + (
        (starts_s[:, None] + (np.arange(calls) + 1) / calls * durations_s[:, None]) * 1e9
    ).astype(np.int64).ravel()
    ops, nranks, nbytes, peers = zip(*PATTERN, strict=True)
    n = iterations * calls
    return schema.conform("collectives", pl.DataFrame({
        "job": "bench", "rank": np.full(n, rank, dtype=np.int32),
        "pid": np.full(n, 1000 + rank, dtype=np.int64),
        "op": np.tile(np.array(ops), iterations),
        "nranks": np.tile(np.array(nranks, dtype=np.int32), iterations),
        "seq": np.arange(n, dtype=np.int64),
        "bytes": np.tile(np.array(nbytes, dtype=np.int64), iterations),
        "peer": pl.Series(list(peers) * iterations, dtype=pl.Int32),
        "t_start_ns": t_ns, "t_end_ns": t_ns + 1000,
    }))


def main() -> None:
    ranks = int(os.environ.get("TRACEKIT_BENCH_RANKS", "256"))
    iterations = int(os.environ.get("TRACEKIT_BENCH_ITERATIONS", "10000"))
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as folder:
        table = Path(folder) / "collectives"
        table.mkdir()
        for rank in range(ranks):
            _rank_calls(rank, iterations, rng).write_parquet(table / f"rank{rank:05d}.parquet")
        rows = ranks * iterations * len(PATTERN)
        files = sorted(table.glob("*.parquet"))

        started = time.process_time()
        pl.scan_parquet(files).collect()
        read_s = time.process_time() - started

        started = time.process_time()
        result = reconstruct({rank: pl.scan_parquet(file) for rank, file in enumerate(files)})
        reconstruct_s = time.process_time() - started
    print(f"{ranks} ranks x {iterations:,} iterations = {rows:,} calls; "
          f"{result.iterations.height:,} iteration rows")
    print(f"baseline read collectives from Parquet: {read_s:.2f} CPU-s "
          f"({rows / read_s / 1e6:.1f} M calls per CPU-s)")
    print(f"reconstruct iterations:                {reconstruct_s:.2f} CPU-s "
          f"({rows / reconstruct_s / 1e6:.1f} M calls per CPU-s) = {reconstruct_s / read_s:.1f}x "
          "the read")


if __name__ == "__main__":
    main()

"""Per-rank tracekit hook CSV files (tracekit/ingest/hook_csv.py, docs/hook-csv.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from tracekit.ingest.hook_csv import COLUMNS, HEADER
from tracekit.synth.calls import Identity, comm_handles, per_rank, pointer_columns
from tracekit.synth.layout import Layout


class HookCsvWriter:
    """Appends each chunk's calls to ``rank<N>.hook.csv``, one file per rank."""

    def __init__(self, folder: Path, layout: Layout, identity: Identity) -> None:
        self.folder = folder
        self.layout = layout
        self.identity = identity
        folder.mkdir(parents=True, exist_ok=True)
        self.width = len(str(layout.world - 1))
        self.paths = [self.path(r) for r in range(layout.world)]
        for path in self.paths:
            path.write_text(HEADER + "\n")

    def path(self, rank: int) -> Path:
        return self.folder / f"rank{rank:0{self.width}d}.hook.csv"

    def write(self, calls: pl.DataFrame) -> None:
        """Append a chunk's calls (sorted by rank, as CallBuilder makes them)."""
        L, ident = self.layout, self.identity
        rows = calls.select(
            pl.col("event_id"),
            pl.col("t_call_ns"),
            (pl.col("t_end_ns") - pl.col("t_call_ns")).alias("duration_ns"),
            per_rank([ident.hosts[L.host_of(r)] for r in range(L.world)]).alias("host"),
            per_rank(ident.pids.astype(np.int64)).alias("pid"),
            (pl.col("rank") % L.gpus_per_host).cast(pl.Int64).alias("device"),
            comm_handles(ident),
            pl.col("nranks"),
            pl.col("call"),
            pl.col("op"),
            pl.col("count"),
            pl.col("datatype"),
            *pointer_columns(ident),
            pl.col("peer"),
            pl.col("rank"),
        ).select(COLUMNS)
        bounds = np.searchsorted(calls["rank"].to_numpy(), np.arange(L.world + 1))
        for rank, (start, end) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
            if end > start:
                with self.paths[rank].open("ab") as stream:
                    rows.slice(start, end - start).write_csv(stream, include_header=False)

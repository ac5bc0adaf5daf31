"""Per-rank tracekit hook CSV files (tracekit/ingest/hook_csv.py, docs/hook-csv.md)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from tracekit.ingest.hook_csv import COLUMNS, HEADER
from tracekit.synth.calls import Identity, comm_handles, pointer_columns
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
        L, ident = self.layout, self.identity
        hosts = {r: ident.hosts[L.host_of(r)] for r in range(L.world)}
        rows = calls.select(
            pl.col("event_id"),
            pl.col("t_call_ns"),
            (pl.col("t_end_ns") - pl.col("t_call_ns")).alias("duration_ns"),
            pl.col("rank").replace_strict(hosts, return_dtype=pl.String).alias("host"),
            pl.col("rank").replace_strict(dict(enumerate(ident.pids.tolist())),
                                          return_dtype=pl.Int64).alias("pid"),
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
            pl.col("rank").alias("_rank"),
        ).select(*COLUMNS, "_rank")
        for (rank,), part in rows.partition_by("_rank", as_dict=True, maintain_order=True).items():
            with self.paths[rank].open("ab") as stream:
                part.drop("_rank").write_csv(stream, include_header=False)

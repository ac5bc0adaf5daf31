"""The tracekit hook CSV: one row per NCCL call, written by an LD_PRELOAD shim.

The record follows the published Greyhound shim (comm address, per-comm call number, count,
buffers, datatype, pid, call time, device, global rank, aux / peer, duration, number of ranks,
event id) with a header line and nanosecond epoch timestamps. docs/hook-csv.md is the spec.
"""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from tracekit import schema
from tracekit.ingest import nccl_names
from tracekit.ingest.base import Chunk, Reader, Source, iter_line_batches, quarantine_frame

COLUMNS = (
    "event_id", "t_call_ns", "duration_ns", "host", "pid", "rank", "device", "comm", "nranks",
    "call", "op", "count", "datatype", "sendbuff", "recvbuff", "peer",
)
HEADER = ",".join(COLUMNS)
INTEGER_COLUMNS = ("event_id", "t_call_ns", "pid", "rank", "device", "nranks", "call", "count",
                   "datatype")
"""Columns that must hold an integer; ``duration_ns`` and ``peer`` may be empty or -1."""


class HookCsvReader(Reader):
    format = "hook-csv"
    version = "1"
    tables = ("collectives",)
    priority = 10
    description = "tracekit LD_PRELOAD hook CSV (one row per NCCL call)"

    def sniff(self, source: Source) -> bool:
        first = next((line for line in source.head_text.splitlines()
                      if line.strip() and not line.startswith("#")), "")
        return first.strip() == HEADER

    def read(self, source: Source, options: dict[str, str]) -> Iterator[Chunk]:
        for batch in iter_line_batches(source):
            yield _parse(source, batch.frame(), batch.bytes_read)


def _parse(source: Source, lines: pl.DataFrame, bytes_read: int) -> Chunk:
    line = pl.col("line")
    blank_or_comment = (line.str.strip_chars() == "") | line.str.starts_with("#")
    is_header = pl.col("line").str.strip_chars() == HEADER
    skip = lines.select((blank_or_comment | is_header).sum()).item()
    rows = lines.filter(~(blank_or_comment | is_header))

    fields = rows.with_columns(
        pl.col("line").str.count_matches(",", literal=True).alias("_commas"),
        pl.col("line").str.split_exact(",", len(COLUMNS) - 1)
        .struct.rename_fields(list(COLUMNS)).alias("_f"),
    ).unnest("_f")
    typed = fields.with_columns(
        [pl.col(c).str.strip_chars().cast(pl.Int64, strict=False).alias(f"_{c}")
         for c in (*INTEGER_COLUMNS, "duration_ns", "peer")]
    )
    reason = (
        pl.when(pl.col("_commas") != len(COLUMNS) - 1)
        .then(pl.format("expected {} fields, found {}", pl.lit(len(COLUMNS)),
                        pl.col("_commas") + 1))
    )
    for column in INTEGER_COLUMNS:
        reason = reason.when(pl.col(f"_{column}").is_null()).then(
            pl.lit(f"{column} is not an integer"))
    for column in ("duration_ns", "peer"):
        reason = reason.when(
            pl.col(f"_{column}").is_null() & (pl.col(column).str.strip_chars() != "")
        ).then(pl.lit(f"{column} is not an integer"))
    reason = (
        reason.when(nccl_names.op_name(pl.col("op")).is_null()).then(pl.lit("unknown op"))
        .when(nccl_names.dtype_name(pl.col("_datatype")).is_null())
        .then(pl.lit("unknown datatype"))
        .otherwise(None)
    )
    checked = typed.with_columns(reason.alias("reason"))
    bad = checked.filter(pl.col("reason").is_not_null())
    good = checked.filter(pl.col("reason").is_null())

    dtype = nccl_names.dtype_name(pl.col("_datatype"))
    duration = pl.when(pl.col("_duration_ns") >= 0).then(pl.col("_duration_ns"))
    collectives = good.select(
        pl.lit(None, dtype=pl.String).alias("job"),
        pl.col("_rank").cast(pl.Int32).alias("rank"),
        pl.col("host"),
        pl.col("_pid").alias("pid"),
        pl.col("_device").cast(pl.Int32).alias("cuda_dev"),
        pl.col("comm"),
        pl.col("_nranks").cast(pl.Int32).alias("nranks"),
        nccl_names.op_name(pl.col("op")).alias("op"),
        pl.col("_call").alias("seq"),
        pl.lit(None, dtype=pl.Int64).alias("op_count"),
        pl.col("_count").alias("count"),
        dtype.alias("dtype"),
        (pl.col("_count") * nccl_names.dtype_size(dtype)).alias("bytes"),
        pl.when(pl.col("_peer") >= 0).then(pl.col("_peer")).cast(pl.Int32).alias("peer"),
        pl.col("_t_call_ns").alias("t_start_ns"),
        (pl.col("_t_call_ns") + duration).alias("t_end_ns"),
    )
    return Chunk(
        tables={"collectives": schema.conform("collectives", collectives)},
        quarantine=quarantine_frame(source, bad),
        lines=lines.height,
        skipped=skip,
        bytes_read=bytes_read,
    )


READERS = [HookCsvReader()]

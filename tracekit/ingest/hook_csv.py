"""The tracekit hook CSV: one row per NCCL call, written by an LD_PRELOAD shim.

The record follows the published Greyhound shim (comm address, per-comm call number, count,
buffers, datatype, pid, call time, device, global rank, aux / peer, duration, number of ranks,
event id) with a header line and nanosecond epoch timestamps. docs/hook-csv.md is the spec.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

import numpy as np
import polars as pl

from tracekit.core import schema
from tracekit.ingest import hook_csv_scan, nccl_names
from tracekit.ingest.base import (
    Chunk,
    LineBatch,
    Reader,
    Source,
    map_line_blocks,
    polars_bytes,
    quarantine_frame,
    split_on_reason,
)
from tracekit.ingest.limits import POLARS_DECOMPRESSES

COLUMNS = (
    "event_id", "t_call_ns", "duration_ns", "host", "pid", "rank", "device", "comm", "nranks",
    "call", "op", "count", "datatype", "sendbuff", "recvbuff", "peer",
)
HEADER = ",".join(COLUMNS)
INTEGER_COLUMNS = ("event_id", "t_call_ns", "pid", "rank", "device", "nranks", "call", "count",
                   "datatype")
"""Columns that must hold an integer; ``duration_ns`` and ``peer`` may be empty or -1."""
NUMERIC_COLUMNS = (*INTEGER_COLUMNS, "duration_ns", "peer")
INT32_COLUMNS = ("rank", "device", "nranks", "peer")
"""Columns the ``collectives`` table holds as 32-bit integers: a larger value is refused."""
INT32_RANGE = (-(2**31), 2**31 - 1)
CSV_SCHEMA = {c: pl.Int64 if c in NUMERIC_COLUMNS else pl.String for c in COLUMNS}
"""Column types of a well-formed block, for the fast path."""
FAST_PATH_FIELDS = [i for i, c in enumerate(COLUMNS) if c not in ("sendbuff", "recvbuff")]
"""Fields the fast path converts: the buffer pointers are free text no table keeps, and
skipping them saves a fifth of the CSV parse."""
COMPILED_SCAN = True
"""Whether a block is offered to the compiled scan (:mod:`~tracekit.ingest.hook_csv_scan`)
before polars' CSV reader; the tests run the reader both ways."""


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
        """Chunks of one block each. Blocks are parsed two at a time on the parse threads while
        the caller handles the previous chunk (a read-ahead thread on top held two more chunks
        for no speed). A file of one block (one per process is the usual layout) is parsed
        without threads (:func:`~tracekit.ingest.base.map_line_blocks`)."""
        return _chunks(source)


def _chunks(source: Source) -> Iterator[Chunk]:
    """The source's chunks in order: the fast path runs on each block (it needs nothing from
    the blocks before); a block it refuses is read line by line here, where its first line
    number is known."""
    line_no = 1
    for block, fast in map_line_blocks(partial(_parse_fast, names=source.names), source):
        chunk = fast or _parse_lines(
            source, LineBatch.from_block(block, line_no).frame(), len(block))
        line_no += chunk.lines
        yield chunk


def _parse_fast(block: bytes, names: pl.DataType) -> tuple[bytes | None, Chunk | None]:
    """The block's fast-path chunk, and the block only where the line path needs it: a block
    kept in a result is not read into again until the caller drops it
    (:func:`~tracekit.ingest.base.map_line_blocks`)."""
    chunk = _parse_block(block, names)
    return (block if chunk is None else None), chunk


def _parse_block(block: bytes, names: pl.DataType = pl.String) -> Chunk | None:
    """The fast path: a block of well-formed rows (and at most a header line first) parsed in
    one piece, by the compiled scan when it takes the block, else by polars' CSV reader. None
    when the block holds anything else (comments, blank lines, a bad row, undecodable bytes),
    so that :func:`_parse_lines` accounts for every line with its number."""
    first_end = block.find(b"\n") + 1 or len(block)
    has_header = block[:first_end].rstrip(b"\r\n") == HEADER.encode()
    data = block[first_end:] if has_header else block
    if data.startswith(POLARS_DECOMPRESSES):  # polars would decompress it
        return None
    if not data:
        return Chunk(lines=int(has_header), skipped=int(has_header), bytes_read=len(block))
    collectives = _scanned_collectives(data, names) if COMPILED_SCAN else None
    if collectives is None:
        collectives = _read_collectives(data)
    if collectives is None:
        return None
    return Chunk(tables={"collectives": collectives}, lines=collectives.height + has_header,
                 skipped=int(has_header), bytes_read=len(block))


def _scanned_collectives(data: bytes, names: pl.DataType) -> pl.DataFrame | None:
    """The ``collectives`` rows of a block the compiled scan takes, the frame
    :func:`_read_collectives` gives, with its names as ``names`` (:attr:`Source.names`); None
    when it refuses the block. The texts are gathered from the block's few distinct ones and
    the dtype names from a table by code."""
    scanned = hook_csv_scan.scan(data)
    if scanned is None:
        return None
    strings = pl.lit(scanned.strings.cast(names))

    def known(column: str) -> pl.Expr:  # the scan writes -1 for null
        return pl.when(pl.col(column) >= 0).then(pl.col(column))

    return schema.conform("collectives", scanned.rows.select(
        pl.col("rank", "cuda_dev", "nranks"),
        strings.gather(pl.col("host_id")).alias("host"),
        strings.gather(pl.col("comm_id")).alias("comm"),
        pl.lit(scanned.op_names.cast(names)).gather(pl.col("op_id")).alias("op"),
        pl.lit(hook_csv_scan.DTYPE_NAMES.cast(names)).gather(pl.col("datatype")).alias("dtype"),
        pl.col("pid", "seq", "count", "bytes", "t_start_ns"),
        known("peer"),
        known("t_end_ns"),
    ))


def _read_collectives(data: bytes) -> pl.DataFrame | None:
    """The ``collectives`` rows of a block of well-formed rows read by one typed
    ``polars.read_csv`` call; None when the block holds anything else."""
    if b"#" in data:
        return None
    try:
        rows = pl.read_csv(polars_bytes(data), has_header=False, schema=CSV_SCHEMA,
                           columns=FAST_PATH_FIELDS, quote_char=None, empty_string_is_null=False)
    except pl.exceptions.PolarsError:
        return None
    if not _well_formed(data, rows):
        return None
    collectives = _collectives(rows)
    if collectives["op"].null_count() or collectives["dtype"].null_count():
        return None
    return collectives


def _well_formed(data: bytes, rows: pl.DataFrame) -> bool:
    """Whether every row of ``data`` has all its fields and its integers where the line path
    wants them (ops and datatypes are checked on the output). A row with too many fields
    already failed the CSV reader; a short one reads as empty fields, so the separators are
    counted: exactly one fewer than the fields on every row."""
    separators = np.count_nonzero(np.frombuffer(data, np.uint8) == ord(","))
    if separators != rows.height * (len(COLUMNS) - 1):
        return False
    return all(rows.select(
        pl.all_horizontal(pl.col(INTEGER_COLUMNS).null_count() == 0),
        pl.all_horizontal(pl.col(INT32_COLUMNS).is_between(*INT32_RANGE).all()),
    ).row(0))


def _parse_lines(source: Source, lines: pl.DataFrame, bytes_read: int) -> Chunk:
    """The line-by-line path: each line checked on its own, bad rows quarantined with their
    line numbers and reasons."""
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
         for c in NUMERIC_COLUMNS]
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
    for column in INT32_COLUMNS:
        reason = reason.when(~pl.col(f"_{column}").is_between(*INT32_RANGE)).then(
            pl.lit(f"{column} is out of range"))
    reason = (
        reason.when(nccl_names.op_name(pl.col("op")).is_null()).then(pl.lit("unknown op"))
        .when(nccl_names.dtype_name(pl.col("_datatype")).is_null())
        .then(pl.lit("unknown datatype"))
        .otherwise(None)
    )
    good, bad = split_on_reason(typed, reason)

    typed = good.select(
        [pl.col(f"_{c}").alias(c) if c in NUMERIC_COLUMNS else pl.col(c) for c in COLUMNS])
    return Chunk(
        tables={"collectives": _collectives(typed)},
        quarantine=quarantine_frame(source, bad),
        lines=lines.height,
        skipped=skip,
        bytes_read=bytes_read,
    )


def _collectives(rows: pl.DataFrame) -> pl.DataFrame:
    """Canonical ``collectives`` rows from valid hook rows (integer columns typed)."""
    duration = pl.when(pl.col("duration_ns") >= 0).then(pl.col("duration_ns"))
    collectives = rows.select(
        pl.lit(None, dtype=pl.String).alias("job"),
        pl.col("rank").cast(pl.Int32),
        pl.col("host"),
        pl.col("pid"),
        pl.col("device").cast(pl.Int32).alias("cuda_dev"),
        pl.col("comm"),
        pl.col("nranks").cast(pl.Int32),
        nccl_names.op_name(pl.col("op")).alias("op"),
        pl.col("call").alias("seq"),
        pl.lit(None, dtype=pl.Int64).alias("op_count"),
        pl.col("count"),
        nccl_names.dtype_name(pl.col("datatype")).alias("dtype"),
        (pl.col("count") * nccl_names.dtype_bytes(pl.col("datatype"))).alias("bytes"),
        pl.when(pl.col("peer") >= 0).then(pl.col("peer")).cast(pl.Int32).alias("peer"),
        pl.col("t_call_ns").alias("t_start_ns"),
        (pl.col("t_call_ns") + duration).alias("t_end_ns"),
    )
    return schema.conform("collectives", collectives)


READERS = [HookCsvReader()]

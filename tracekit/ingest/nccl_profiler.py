"""NCCL profiler-plugin example output: a Chrome trace of async begin / end events, one per
line (``plugins/profiler/example``; ``<prefix>-<host>-<tid>.txt`` in 2.23-2.26,
``<prefix>_<commHash>_<rank>.json`` from 2.27).

Each COLL or P2P begin event with its matching end becomes one call. ``ts`` counts
microseconds since the plugin started (a steady clock, not wall time); when KernelCh events
carry the GPU global timer (``StartGpuClk``, ns) the trace is anchored to it, else the
``t0_ns`` option gives the wall time of the plugin start. Both README and ``print_event.cc``
variants are accepted: bare ``0x..`` pointers and ``nccl..`` datatype names are quoted before
decoding, so the README's not-quite-JSON lines parse too.
"""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from tracekit.core import schema
from tracekit.ingest import nccl_names
from tracekit.ingest.base import Chunk, Reader, Source, iter_line_batches, quarantine_frame

CALL_CATEGORIES = ("COLL", "P2P")
BARE_TOKEN = r'(:\s*)(0x[0-9a-fA-F]+|\(nil\)|nccl[A-Za-z0-9]+|[A-Za-z_][A-Za-z_0-9]*)(\s*[,}])'
"""A value printed without quotes (README variant); ``true``/``false``/``null`` are restored
after quoting."""

DATATYPES = {
    "ncclInt8": "int8", "ncclChar": "int8", "ncclUint8": "uint8", "ncclInt32": "int32",
    "ncclInt": "int32", "ncclUint32": "uint32", "ncclInt64": "int64", "ncclUint64": "uint64",
    "ncclFloat16": "float16", "ncclHalf": "float16", "ncclFloat32": "float32",
    "ncclFloat": "float32", "ncclFloat64": "float64", "ncclDouble": "float64",
    "ncclBfloat16": "bfloat16", "ncclFloat8e4m3": "float8e4m3", "ncclFloat8e5m2": "float8e5m2",
}
"""Datatype names printed by 2.24+ (``ncclDatatypeToString``); 2.23 prints the enum value."""


def comm_hash_hex(decimal: pl.Expr) -> pl.Expr:
    """A 64-bit comm hash printed in decimal, as the ``0x..`` hex the Inspector and PyTorch
    print, so one comm is spelled one way across formats."""
    value = decimal.cast(pl.UInt64, strict=False)
    digits = [((value // (16 ** i)) % 16) for i in range(15, -1, -1)]
    hex_digits = [d.replace_strict(dict(enumerate("0123456789abcdef")), return_dtype=pl.String)
                  for d in digits]
    return pl.when(value.is_not_null()).then(
        pl.lit("0x") + pl.concat_str(hex_digits).str.strip_chars_start("0"))


class NcclProfilerReader(Reader):
    format = "nccl-profiler"
    options = ("t0_ns",)
    version = "1"
    tables = ("collectives",)
    priority = 20
    description = "NCCL profiler plugin example Chrome trace (COLL / P2P async events)"

    def sniff(self, source: Source) -> bool:
        head = source.head_text.lstrip()
        return head.startswith("[") and '"ph"' in head and (
            '"cat": "COLL' in head or '"cat": "GROUP' in head or '"cat": "P2P' in head)

    def read(self, source: Source, options: dict[str, str]) -> Iterator[Chunk]:
        frames = []
        for batch in iter_line_batches(source):
            frames.append(batch.frame())
        lines = pl.concat(frames) if frames else pl.DataFrame(
            schema={"line_no": pl.Int64, "line": pl.String})
        yield _parse(source, lines, source.size, options)


def _parse(source: Source, lines: pl.DataFrame, bytes_read: int,
           options: dict[str, str]) -> Chunk:
    """The whole trace at once: begin and end events of one call can be far apart."""
    text = pl.col("line").str.strip_chars().str.strip_suffix(",")
    framing = text.is_in(["", "[", "]", "{}]", "{}", "{}]"]) | (text == "[{}]")
    fixed = text.str.replace_all(BARE_TOKEN, "${1}\"${2}\"${3}").str.replace_all(
        r'"(true|false|null)"', "${1}")
    events = lines.filter(~framing).with_columns(fixed.alias("json"))
    events = events.with_columns(
        *[pl.col("json").str.json_path_match(f"$.{k}").alias(k)
          for k in ("name", "cat", "ph", "id", "pid", "ts")],
        *[pl.col("json").str.json_path_match(f"$.args.{k}").alias(f"a_{k}")
          for k in ("SeqNum", "CommHash", "Rank", "Count", "Datatype", "Peer", "StartGpuClk")],
    ).with_columns(pl.col("ts").cast(pl.Float64, strict=False),
                   pl.col("pid").cast(pl.Int64, strict=False))
    invalid = events.filter(pl.col("ph").is_null() | pl.col("ts").is_null()).with_columns(
        pl.lit("not a trace event (invalid JSON or no ph / ts)").alias("reason"))
    valid = events.filter(pl.col("ph").is_not_null() & pl.col("ts").is_not_null())
    offset_ns, note = _clock_offset(valid, options)
    calls = valid.filter(pl.col("cat").is_in(CALL_CATEGORIES))
    order = pl.int_range(pl.len()).over("cat", "pid", "id", "ph")
    begins = calls.filter(pl.col("ph") == "b").with_columns(order.alias("k"))
    ends = calls.filter(pl.col("ph") == "e").with_columns(order.alias("k")).select(
        "cat", "pid", "id", "k", pl.col("ts").alias("ts_end"))
    paired = begins.join(ends, on=["cat", "pid", "id", "k"], how="left")
    bad_begin = paired.filter(pl.col("a_CommHash").is_null() | pl.col("a_Count").is_null())
    good = paired.filter(pl.col("a_CommHash").is_not_null() & pl.col("a_Count").is_not_null())
    dtype = pl.coalesce(
        pl.col("a_Datatype").replace_strict(DATATYPES, default=None, return_dtype=pl.String),
        nccl_names.dtype_name(pl.col("a_Datatype").cast(pl.Int64, strict=False)))
    op = nccl_names.op_name(pl.col("name")).fill_null(pl.col("name").str.to_lowercase())
    comm = comm_hash_hex(pl.col("a_CommHash"))
    count = pl.col("a_Count").cast(pl.Int64, strict=False)
    collectives = good.with_columns(comm.alias("comm")).select(
        pl.lit(None, dtype=pl.String).alias("job"),
        pl.col("a_Rank").cast(pl.Int32, strict=False).alias("rank"),
        "pid", "comm", op.alias("op"),
        pl.int_range(pl.len()).over("pid", "comm").cast(pl.Int64).alias("seq"),
        pl.col("a_SeqNum").cast(pl.Int64, strict=False).alias("op_count"),
        count.alias("count"), dtype.alias("dtype"),
        (count * nccl_names.dtype_size(dtype)).alias("bytes"),
        pl.col("a_Peer").cast(pl.Int32, strict=False).alias("peer"),
        (pl.col("ts") * 1000).round().cast(pl.Int64).add(offset_ns).alias("t_start_ns"),
        (pl.col("ts_end") * 1000).round().cast(pl.Int64).add(offset_ns).alias("t_end_ns"),
    )
    bad = pl.concat([
        invalid.select("line_no", "line", "reason"),
        bad_begin.select("line_no", "line", pl.lit("COLL/P2P event without CommHash or Count")
                         .alias("reason")),
    ]).sort("line_no")
    notes = [note, "rank is the rank inside the communicator (the profiler prints no global "
             "rank)"]
    return Chunk(
        tables={"collectives": schema.conform("collectives", collectives)},
        quarantine=quarantine_frame(source, bad),
        lines=lines.height,
        skipped=lines.height - collectives.height - bad.height,
        bytes_read=bytes_read,
        notes=[n for n in notes if n],
    )


def _clock_offset(events: pl.DataFrame, options: dict[str, str]) -> tuple[int | None, str]:
    """Nanoseconds to add to ``ts * 1000`` for wall time, and a note saying where it came from."""
    if "t0_ns" in options:
        return int(options["t0_ns"]), "times anchored with the t0_ns option"
    kernels = events.filter((pl.col("cat") == "GPU") & (pl.col("ph") == "b")).select(
        (pl.col("a_StartGpuClk").cast(pl.Int64, strict=False)
         - (pl.col("ts") * 1000).round().cast(pl.Int64)).median())
    offset = kernels.item() if kernels.height else None
    if offset is not None:
        return int(offset), ("times anchored to the GPU global timer of KernelCh events "
                             "(plugin clock + median offset)")
    return None, ("no wall-clock anchor (no KernelCh StartGpuClk): times are null; pass "
                  "--option t0_ns=NS, the wall time of the plugin start")


READERS = [NcclProfilerReader()]

"""``dcgmi dmon`` text: fixed-width columns of DCGM fields per entity, as DCGM prints them.

Layout (DCGM ``dcgmi/DeviceMonitor.cpp``, FORMATS.md 3.2): a ``#Entity`` header of field short
names, a units line starting with ``ID``, then one row per entity per sample (``GPU 0``,
``GPU-I 3``, ``GPU-CI 1``); the header repeats, values may be ``N/A`` or cut with ``...``.
dmon prints no time: a collector may prefix each line with an epoch or ISO timestamp, else the
user gives ``--option start=<time> --option interval=<dmon -d, ms>``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import polars as pl

from tracekit.core.errors import InputError
from tracekit.core.identity import short_host
from tracekit.ingest import metric_names
from tracekit.ingest.base import (
    Chunk,
    Reader,
    Source,
    iter_line_batches,
    quarantine_frame,
    split_on_reason,
)
from tracekit.ingest.prometheus import gpu_metric_rows
from tracekit.ingest.snapshots import TIMESTAMP_PATTERN, SnapshotClock, epoch_ns, option_ts_ns

_PREFIX = rf"^\s*\[?({TIMESTAMP_PATTERN})\]?\s+(.*)$"
_ENTITY = r"^(GPU-CI|GPU-I|GPU|Switch|vGPU|Link|CPU|Core)\s+(\d+)\s+(.*?)\s*$"
ENTITY_INSTANCE_PREFIX = {"GPU-I": "gi", "GPU-CI": "ci"}
"""MIG entities become ``gpu_instance`` values gi<id> / ci<id> (the same as dcgm-exporter's
``GPU_I_ID`` label gives)."""


def parse_interval_ns(text: str, source: Source) -> int:
    """``1000`` (ms, as ``dmon -d``), ``500ms``, ``1s`` or ``1.5s`` to ns."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s)?\s*", text)
    if not match or float(match.group(1)) <= 0:
        raise InputError(f"--option interval={text!r} is not a positive duration (e.g. 1000 for "
                         "dmon -d 1000, 500ms or 1s)", source.name)
    factor = 10**9 if match.group(2) == "s" else 10**6
    return round(float(match.group(1)) * factor)


class DcgmiDmonReader(Reader):
    format = "dcgmi-dmon"
    options = ("host", "start", "interval")
    version = "1"
    tables = ("gpu_metrics",)
    priority = 35
    description = "dcgmi dmon text (optional timestamp prefix; else --option start= interval=)"

    def sniff(self, source: Source) -> bool:
        head = source.head_text
        return bool(re.search(r"^(?:\S+\s+)?#Entity\s+\S", head, re.MULTILINE)) \
            or bool(re.search(r"^\$?\s*dcgmi\s+dmon\b", head, re.MULTILINE))

    def read(self, source: Source, options: dict[str, str]) -> Iterator[Chunk]:
        clock = SnapshotClock(None, options.get("host"))
        start_ns = option_ts_ns(options, source, "start")
        interval_ns = parse_interval_ns(options["interval"], source) \
            if "interval" in options else None
        header: list[str] = []
        seen: dict[str, int] = {}
        for batch in iter_line_batches(source):
            lines = clock.stamp(batch.frame())
            rows, bad, header, notes = _parse(lines, header)
            if rows.height and rows["prefix_ts_ns"].null_count():
                if start_ns is None or interval_ns is None:
                    raise InputError(
                        "dmon lines carry no timestamps; pass --option start=<first sample time> "
                        "and --option interval=<dmon -d in ms>, or prefix each line with a time "
                        "when collecting", source.name)
                rows = _clock_from_start(rows, seen, start_ns, interval_ns)
            yield Chunk(
                tables={"gpu_metrics": gpu_metric_rows(_metric_rows(rows))},
                quarantine=quarantine_frame(source, bad),
                lines=lines.height,
                skipped=lines.height - rows.select("line_no").n_unique() - bad.height
                if rows.height else lines.height - bad.height,
                bytes_read=batch.bytes_read,
                notes=notes,
            )


def _words(text: pl.Expr) -> pl.Expr:
    return text.str.strip_chars().str.replace_all(r"\s+", " ").str.split(" ")


def _parse(lines: pl.DataFrame, header: list[str]) \
        -> tuple[pl.DataFrame, pl.DataFrame, list[str], list[str]]:
    """Data cells (line_no, entity, index, field, raw, prefix time) with the header in force,
    bad lines, the header at the end of the batch, notes."""
    line = pl.col("line")
    split = lines.with_columns(
        line.str.extract(_PREFIX, 1).alias("_prefix"),
        pl.coalesce(line.str.extract(_PREFIX, 2), line).alias("body"),
    ).with_columns(epoch_ns(pl.col("_prefix")).alias("prefix_ts_ns"))
    body = pl.col("body").str.strip_chars()
    is_header = body.str.starts_with("#Entity")
    with_header = split.with_columns(
        pl.when(is_header).then(_words(body).list.slice(1))
        .otherwise(None).forward_fill().alias("fields"),
    ).with_columns(pl.col("fields").fill_null(pl.lit(header, pl.List(pl.String))))
    new_header = with_header["fields"][-1].to_list() if with_header.height else header
    data = with_header.filter(body.str.contains(_ENTITY)).with_columns(
        body.str.extract_groups(_ENTITY).struct.rename_fields(["entity", "index", "rest"])
        .alias("m")
    ).unnest("m").with_columns(_words(pl.col("rest")).alias("values"))
    reason = (
        pl.when(pl.col("fields").list.len() == 0).then(pl.lit("data row before any #Entity header"))
        .when(pl.col("values").list.len() != pl.col("fields").list.len())
        .then(pl.format("expected {} values, found {}", pl.col("fields").list.len(),
                        pl.col("values").list.len()))
    )
    good, rejected = split_on_reason(data, reason)
    bad = rejected.select("line_no", "line", "reason")
    cells = good.explode("fields", "values").rename(
        {"fields": "field", "values": "raw"})
    truncated = cells.filter(pl.col("raw").str.ends_with("...")).height
    notes = [f"{truncated} values cut short by dmon ('...') were left out"] if truncated else []
    return cells.select("line_no", "entity", "index", "field", "raw", "prefix_ts_ns",
                        "snap_host"), bad, new_header, notes


def _clock_from_start(rows: pl.DataFrame, seen: dict[str, int], start_ns: int,
                      interval_ns: int) -> pl.DataFrame:
    """The k-th row of an entity is sample k: time start + k x interval (counts carry over
    batches in ``seen``)."""
    entity_rows = rows.unique(["line_no"]).sort("line_no").select(
        "line_no", pl.concat_str("entity", pl.lit(" "), "index").alias("_entity"))
    offsets = pl.col("_entity").replace_strict(seen, default=0, return_dtype=pl.Int64)
    numbered = entity_rows.with_columns(
        (pl.int_range(pl.len()).over("_entity") + offsets).alias("_sample"))
    for entity, last in numbered.group_by("_entity").agg(pl.col("_sample").max()).iter_rows():
        seen[entity] = last + 1
    return rows.join(numbered, on="line_no").with_columns(
        pl.coalesce("prefix_ts_ns", pl.lit(start_ns) + pl.col("_sample") * interval_ns)
        .alias("prefix_ts_ns")
    ).drop("_entity", "_sample")


def _metric_rows(cells: pl.DataFrame) -> pl.DataFrame:
    metric, scale = metric_names.dcgm_lookup(pl.col("field"), by="dmon")
    value = pl.col("raw").cast(pl.Float64, strict=False)
    is_gpu = pl.col("entity") == "GPU"
    instance = pl.col("entity").replace_strict(ENTITY_INSTANCE_PREFIX, default=None)
    return cells.filter(pl.col("entity").is_in(["GPU", "GPU-I", "GPU-CI"]) & value.is_not_null())\
        .select(
            pl.col("prefix_ts_ns").alias("ts_ns"),
            short_host(pl.col("snap_host")).alias("host"),
            pl.when(is_gpu).then(pl.col("index").cast(pl.Int32)).alias("gpu"),
            pl.lit(None, pl.String).alias("gpu_uuid"),
            pl.lit(None, pl.String).alias("bus_id"),
            pl.when(~is_gpu).then(pl.concat_str(instance, pl.col("index"))).alias("gpu_instance"),
            pl.coalesce(metric, pl.col("field").str.to_lowercase()).alias("metric"),
            (value * scale.fill_null(1.0)).alias("value"),
            pl.lit("dcgmi-dmon").alias("source"),
        )


READERS = [DcgmiDmonReader()]

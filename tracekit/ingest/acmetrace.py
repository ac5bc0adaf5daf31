"""AcmeTrace-style wide CSVs: ``Time`` plus one column per server (or server-device), 15 s.

The format of the largest public GPU-cluster monitoring dataset (InternLM/AcmeTrace, NSDI'24;
FORMATS.md section 6): one file per metric named after it (``NODE_IB_SEND_raw.csv``,
``GPU_TEMP-2023-07-01.csv``), ``Time`` in unix seconds, columns ``<ip>`` or ``<ip>-<device>``
(``10.140.1.10-mlx5_0``), empty cells for missing samples and repeated timestamps.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import polars as pl

from tracekit.core import schema
from tracekit.core.errors import InputError
from tracekit.core.identity import IdentityMap
from tracekit.ingest import metric_names
from tracekit.ingest.base import (
    Chunk,
    Reader,
    Source,
    csv_row_text,
    quarantine_frame,
    read_csv_cells,
)
from tracekit.ingest.prometheus import gpu_metric_rows
from tracekit.ingest.snapshots import epoch_ns

HOST_METRICS = {
    "NODE_CPU_UTILIZATION": ("cpu_util_pct", "%", 100.0),
    "NODE_MEMORY_UTILIZATION": ("mem_util_pct", "%", 100.0),
}
"""Node metrics -> (metric, unit, factor); AcmeTrace stores utilisation as a fraction."""

NIC_METRICS = {"NODE_IB_SEND": "ib_send_bytes", "NODE_IB_RECEIVE": "ib_receive_bytes"}
"""IB throughput columns are already rates: they fill ``rate_per_s`` with no raw value."""

_METRIC_IN_NAME = re.compile(r"(?:^|_)((?:NODE|GPU|DCGM|XID|MEM|SM|DRAM|POWER|PIPE|FB|"
                             r"MEMORY)[A-Z0-9_]*?)(?:_raw)?(?:-\d{4}.*)?\.csv$")
_IP_COLUMN = r"^\d{1,3}(?:\.\d{1,3}){3}(?:-\S+)?$"


def metric_of(source: Source, options: dict[str, str]) -> str:
    """The metric a wide file holds: ``--option metric=`` or its file name."""
    if "metric" in options:
        return options["metric"].upper()
    match = _METRIC_IN_NAME.search(source.file_name)
    if not match:
        raise InputError("cannot tell the metric from the file name; name it after the metric "
                         "(e.g. NODE_IB_SEND.csv) or pass --option metric=NAME", source.name)
    return match.group(1)


class AcmeTraceReader(Reader):
    format = "acmetrace"
    options = ("metric", "identity_map")
    version = "1"
    tables = ("gpu_metrics", "nic_counters", "host_metrics")
    priority = 55
    description = "AcmeTrace wide CSV (Time + one column per server / server-device)"

    def sniff(self, source: Source) -> bool:
        header = source.head_text.split("\n", 1)[0].strip().split(",")
        return len(header) >= 2 and header[0] == "Time" \
            and all(re.match(_IP_COLUMN, column) for column in header[1:])

    def read(self, source: Source, options: dict[str, str]) -> Iterator[Chunk]:
        metric = metric_of(source, options)
        identity = IdentityMap.load(options.get("identity_map"))
        wide = read_csv_cells(source)
        if "Time" not in wide.columns or wide.width < 3:  # line_no, Time, a server
            raise InputError("the header is not Time and a column per server", source.name, 1)
        stamped = wide.with_columns(epoch_ns(pl.col("Time")).alias("ts_ns"))
        untimed = stamped.filter(pl.col("ts_ns").is_null()).select(
            "line_no", pl.lit("Time is not a unix time").alias("reason"), csv_row_text(wide))
        long = stamped.drop_nulls("ts_ns").unpivot(
            [c for c in wide.columns if c not in ("Time", "line_no")],
            index=["ts_ns", "line_no"], variable_name="column", value_name="raw",
        ).with_columns(pl.col("raw").cast(pl.Float64, strict=False).alias("value"))\
            .filter(pl.col("raw").str.strip_chars() != "")
        unreadable = _unreadable_cells(long, stamped, wide)
        long = long.filter(pl.col("value").is_finite())\
            .unique(["column", "ts_ns"], keep="first", maintain_order=True)
        cells = long.with_columns(
            identity.host(pl.col("column").str.extract(r"^([\d.]+)", 1)).alias("host"),
            pl.col("column").str.extract(r"^[\d.]+-(\S+)$", 1).alias("device"),
        )
        yield Chunk(
            tables=_tables(metric, cells),
            quarantine=quarantine_frame(source, pl.concat([untimed, unreadable])),
            lines=wide.height + 1,
            skipped=1,
            bytes_read=source.size,
            notes=[f"{stamped.height - stamped.unique('Time').height} repeated timestamps "
                   "collapsed"] if stamped.height != stamped.unique("Time").height else [],
        )


def _unreadable_cells(long: pl.DataFrame, stamped: pl.DataFrame,
                      wide: pl.DataFrame) -> pl.DataFrame:
    """The lines with a cell that holds no finite number (a stray quote, a stray byte, NaN):
    quarantined with the first such cell named; the line's other cells are read. An empty cell
    is a missing sample, not a bad one."""
    bad = long.filter(~pl.col("value").is_finite().fill_null(False)).group_by(
        "line_no", maintain_order=True).first().select(
        "line_no", pl.format("{}: {} is not a finite number", "column", "raw").alias("reason"))
    return bad.join(stamped.select("line_no", csv_row_text(wide)), on="line_no")\
        .select("line_no", "reason", "line")


def _tables(metric: str, cells: pl.DataFrame) -> dict[str, pl.DataFrame]:
    if metric in HOST_METRICS:
        name, unit, factor = HOST_METRICS[metric]
        return {"host_metrics": schema.conform("host_metrics", cells.select(
            "ts_ns", "host", pl.lit("acmetrace").alias("source"), pl.lit(name).alias("metric"),
            pl.col("value") * factor, pl.lit(unit).alias("unit")))}
    if metric in NIC_METRICS:
        return {"nic_counters": schema.conform("nic_counters", cells.select(
            "ts_ns", "host", "device", pl.lit(None, pl.Int32).alias("port"),
            pl.lit(NIC_METRICS[metric]).alias("counter"), pl.lit(None, pl.Int64).alias("value"),
            pl.col("value").alias("rate_per_s")))}
    canonical, scale = next(
        ((f.metric, f.scale) for f in metric_names.DCGM_FIELDS
         if any(n.endswith("_" + metric) or n == metric for n in f.names)), (None, 1.0))
    if canonical is None:
        raise InputError(f"unknown AcmeTrace metric {metric!r}; known: "
                         f"{', '.join([*HOST_METRICS, *NIC_METRICS])} and DCGM field names")
    gpu = cells.select(
        "ts_ns", "host",
        pl.col("device").str.extract(r"(\d+)$", 1).cast(pl.Int32, strict=False).alias("gpu"),
        pl.lit(None, pl.String).alias("gpu_uuid"), pl.lit(None, pl.String).alias("bus_id"),
        pl.lit(None, pl.String).alias("gpu_instance"), pl.lit(canonical).alias("metric"),
        pl.col("value") * scale, pl.lit("acmetrace").alias("source"),
    )
    return {"gpu_metrics": gpu_metric_rows(gpu)}


READERS = [AcmeTraceReader()]

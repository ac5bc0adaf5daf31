"""RDMA NIC counters: mlx5 sysfs ``hw_counters`` snapshots and ``ethtool -S`` snapshots.

The congestion story of a RoCE fabric is in a few counters (FORMATS.md section 4):
``np_ecn_marked_roce_packets`` / ``np_cnp_sent`` at the receiver, ``rp_cnp_handled`` at the
sender, ``out_of_sequence`` / ``packet_seq_err`` for loss, and PFC pause counters in
``ethtool -S``. Snapshots become ``nic_counters`` rows with rates (wraps and resets handled by
:mod:`tracekit.core.counters`).
"""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from tracekit.core import schema
from tracekit.core.counters import (
    GLITCH_REASON,
    NIC_SERIES,
    nic_counter_rates,
    split_glitches,
)
from tracekit.core.identity import short_host
from tracekit.ingest.base import Chunk, Reader, Source, iter_line_batches, quarantine_frame
from tracekit.ingest.snapshots import SnapshotClock, missing_time_error

NOT_COUNTERS = frozenset({"lifespan"})
"""hw_counters entries that are settings, not counters (``lifespan``: ms caching window)."""

_SYSFS = (r"^(?:\S*/)?([^/\s]+)/ports/(\d+)/(hw_counters|counters)/([A-Za-z0-9_]+):\s*(\S*)\s*$")


def nic_rows(samples: pl.DataFrame) -> pl.DataFrame:
    """Canonical ``nic_counters`` from samples with ts_ns, host, device, port, counter and
    value: repeats collapsed, rates computed with 32-bit wraps for the Q counters."""
    rated = nic_counter_rates(samples)
    return schema.conform("nic_counters", rated.select(
        pl.col("ts_ns"), pl.col("host"), pl.col("device"), pl.col("port").cast(pl.Int32),
        pl.col("counter"), pl.col("value").cast(pl.Int64), pl.col("rate_per_s"),
    ))


def _counter_chunk(source: Source, lines: pl.DataFrame, samples: pl.DataFrame,
                   bad: pl.DataFrame, bytes_read: int) -> Chunk:
    if samples.filter(pl.col("ts_ns").is_null()).height:
        raise missing_time_error(source, "the counter snapshots")
    notes = []
    if samples.height and samples["host"].null_count():
        notes.append("no host name in the file; pass --option host=NAME")
    samples, glitches = split_glitches(samples, NIC_SERIES)
    rows = nic_rows(samples.drop("line_no", "line"))
    bad = pl.concat([bad.select("line_no", "line", "reason"), glitches.select(
        "line_no", "line", pl.lit(GLITCH_REASON).alias("reason"))]).sort("line_no")
    return Chunk(
        tables={"nic_counters": rows},
        quarantine=quarantine_frame(source, bad),
        lines=lines.height,
        skipped=lines.height - samples.height - bad.height + (samples.height - rows.height),
        bytes_read=bytes_read,
        notes=notes + ([f"collapsed {samples.height - rows.height} repeated samples"]
                       if samples.height > rows.height else []),
    )


class Mlx5HwCountersReader(Reader):
    format = "mlx5-hw-counters"
    options = ("ts", "host")
    version = "1"
    tables = ("nic_counters",)
    priority = 40
    rows_depend_on_name = True
    description = "mlx5 sysfs hw_counters / counters snapshots (grep -H . style, # ts= markers)"

    def sniff(self, source: Source) -> bool:
        head = source.head_text
        return "/ports/" in head and ("/hw_counters/" in head or "/counters/port_" in head) \
            and pl.Series(head.splitlines()).str.contains(_SYSFS).any()

    def read(self, source: Source, options: dict[str, str]) -> Iterator[Chunk]:
        clock = SnapshotClock.for_source(source, options)
        for batch in iter_line_batches(source):
            lines = clock.stamp(batch.frame())
            parsed = lines.filter(~pl.col("is_marker")).with_columns(
                pl.col("line").str.extract_groups(_SYSFS)
                .struct.rename_fields(["device", "port", "group", "counter", "raw"]).alias("m"),
            ).unnest("m")
            matched = parsed.filter(pl.col("device").is_not_null()
                                    & ~pl.col("counter").is_in(list(NOT_COUNTERS)))
            typed = matched.with_columns(
                pl.col("raw").cast(pl.Int64, strict=False).alias("value"),
                pl.col("port").cast(pl.Int32),
            )
            bad = typed.filter(pl.col("value").is_null()).with_columns(
                pl.lit("counter value is not an integer").alias("reason"))
            good = typed.filter(pl.col("value").is_not_null()).select(
                pl.col("snap_ts_ns").alias("ts_ns"), short_host(pl.col("snap_host")).alias("host"),
                "device", "port", "counter", "value", "line_no", "line",
            )
            yield clock.annotate(_counter_chunk(source, lines, good, bad, batch.bytes_read))


_ETHTOOL_STAT = r"^\s+([A-Za-z0-9_.\[\]:-]+):\s*(\S*)\s*$"


class EthtoolStatsReader(Reader):
    format = "ethtool-stats"
    options = ("ts", "host", "device")
    version = "1"
    tables = ("nic_counters",)
    priority = 45
    rows_depend_on_name = True
    description = "ethtool -S snapshots (NIC statistics:), device from the command line or " \
                  "--option device=NAME"

    def sniff(self, source: Source) -> bool:
        return any(line.strip() == "NIC statistics:" for line in source.head_text.splitlines()[:20])

    def read(self, source: Source, options: dict[str, str]) -> Iterator[Chunk]:
        clock = SnapshotClock.for_source(source, options)
        device_carry = options.get("device")
        for batch in iter_line_batches(source):
            lines = clock.stamp(batch.frame()).with_columns(
                pl.col("line").str.extract(r"^\s*\$?\s*ethtool\s+(?:-S|--statistics)\s+(\S+)", 1)
                .alias("_device"),
            ).with_columns(
                pl.col("_device").forward_fill().fill_null(pl.lit(device_carry, pl.String)),
            )
            if lines.height:
                device_carry = lines["_device"][-1]
            stats = lines.filter(~pl.col("is_marker")).with_columns(
                pl.col("line").str.extract_groups(_ETHTOOL_STAT)
                .struct.rename_fields(["counter", "raw"]).alias("m"),
            ).unnest("m").filter(pl.col("counter").is_not_null())
            typed = stats.with_columns(pl.col("raw").cast(pl.Int64, strict=False).alias("value"))
            bad = typed.filter(pl.col("value").is_null()).with_columns(
                pl.lit("statistic value is not an integer").alias("reason"))
            good = typed.filter(pl.col("value").is_not_null())
            if good["_device"].null_count():
                raise _no_device_error(source)
            good = good.select(
                pl.col("snap_ts_ns").alias("ts_ns"), short_host(pl.col("snap_host")).alias("host"),
                pl.col("_device").alias("device"), pl.lit(None, pl.Int32).alias("port"),
                "counter", "value", "line_no", "line",
            )
            yield clock.annotate(_counter_chunk(source, lines, good, bad, batch.bytes_read))


def _no_device_error(source: Source) -> Exception:
    from tracekit.core.errors import InputError

    return InputError("cannot tell which netdev these ethtool statistics belong to; keep the "
                      "'$ ethtool -S <dev>' line or pass --option device=NAME", source.name)


READERS = [Mlx5HwCountersReader(), EthtoolStatsReader()]

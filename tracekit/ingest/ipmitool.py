"""ipmitool sensor snapshots: ``sdr list``, ``sdr elist``, ``sensor`` and ``-c sensor``.

Layouts follow ipmitool ``lib/ipmi_sdr.c`` and ``lib/ipmi_sensor.c`` (FORMATS.md 5.1): fields
split on ``|`` (``,`` for ``-c``), the variant told apart per line by its field count, so a file
mixing commands still reads. Readings become ``host_metrics`` rows named after the sensor with
the unit as suffix (``Inlet Temp`` in degrees C -> ``inlet_temp_c``); thresholds are not kept.
"""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from tracekit.core import schema
from tracekit.core.identity import short_host
from tracekit.ingest.base import Chunk, Reader, Source, iter_line_batches, quarantine_frame
from tracekit.ingest.snapshots import SnapshotClock, missing_time_error

UNITS: dict[str, tuple[str, str]] = {
    "degrees c": ("c", "C"),
    "degrees f": ("f", "F"),
    "volts": ("v", "V"),
    "amps": ("a", "A"),
    "watts": ("w", "W"),
    "rpm": ("rpm", "RPM"),
    "percent": ("pct", "%"),
    "cfm": ("cfm", "CFM"),
}
"""ipmitool unit strings -> (metric-name suffix, unit); discrete and unspecified have none."""

STATUS: dict[str, str] = {
    "ok": "ok", "nc": "nc", "cr": "cr", "nr": "nr", "ns": "ns", "na": "ns",
    "lnc": "nc", "unc": "nc", "lcr": "cr", "ucr": "cr", "lnr": "nr", "unr": "nr",
}
"""Sensor states (ipmitool ``sdr`` / ``sensor``) normalised to ok / nc / cr / nr / ns; the
direction (lower / upper) is plain from the value."""

NO_READING = ("no reading", "disabled", "not readable", "na", "")

_STATE = r"(?:ok|nc|cr|nr|ns|na|lnc|unc|lcr|ucr|lnr|unr|0x[0-9a-f]+)"
_LIMIT = r"\s*(?:na|-?[0-9.]+)\s*"
SNIFF_SHAPES = "|".join((
    # sdr list (name | reading | state) and sdr elist (name | 04h | state | 7.1 | reading)
    rf"^[^|]{{1,16}}\s*\|\s*[^|]*\|\s*{_STATE}\b",
    # sensor: name | value | units | state then six thresholds (lnr .. unr), 10 fields
    rf"^[^|]{{1,16}}\s*\|[^|]*\|[^|0-9]*\|\s*{_STATE}\s*(?:\|{_LIMIT}){{6}}$",
    # -c sensor: the same ten fields joined by commas
    rf"^[^,|]{{1,16}},\s*(?:na|-?[0-9.]+|0x[0-9a-f]+),[^,0-9]*,{_STATE},{_LIMIT}(?:,{_LIMIT}){{5}}$",
))
"""Line shapes of the layouts, for sniffing files without the ``$ ipmitool`` command line: the
``sensor`` layouts are told by their ten fields, a unit without digits and six thresholds."""


def sensor_metric(name: pl.Expr, suffix: pl.Expr) -> pl.Expr:
    """``Inlet Temp`` + ``c`` -> ``inlet_temp_c``; names without a unit keep no suffix."""
    slug = name.str.to_lowercase().str.replace_all(r"[^a-z0-9]+", "_").str.strip_chars("_")
    return pl.when(suffix.is_not_null() & (suffix != "")).then(pl.concat_str(slug, pl.lit("_"),
                                                                            suffix)).otherwise(slug)


def disambiguate(frame: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Number repeated sensor names inside one snapshot (Dell boards print ``Temp`` twice):
    the second becomes ``temp_c_2``."""
    occurrence = pl.int_range(pl.len()).over(by) + 1
    return frame.with_columns(
        pl.when(occurrence > 1).then(pl.concat_str(pl.col("metric"), pl.lit("_"),
                                                   occurrence.cast(pl.String)))
        .otherwise(pl.col("metric")).alias("metric")
    )


class IpmitoolReader(Reader):
    format = "ipmitool"
    options = ("ts", "host")
    version = "1"
    tables = ("host_metrics",)
    priority = 50
    rows_depend_on_name = True
    description = "ipmitool sdr list / sdr elist / sensor / -c sensor snapshots"

    def sniff(self, source: Source) -> bool:
        """A ``$ ipmitool ...`` command line near the top, or a majority of lines shaped like
        one of the layouts (a timestamp or marker line per snapshot does not count)."""
        lines = [line for line in source.head_text.splitlines()[:40] if line.strip()]
        if any(line.lstrip("$ ").startswith("ipmitool") for line in lines[:3]):
            return True
        shaped = pl.Series(lines, dtype=pl.String).str.contains(SNIFF_SHAPES)
        return bool(lines) and shaped.sum() >= max(2, len(lines) // 2)

    def read(self, source: Source, options: dict[str, str]) -> Iterator[Chunk]:
        clock = SnapshotClock.for_source(source, options)
        for batch in iter_line_batches(source):
            lines = clock.stamp(batch.frame())
            rows, bad = _parse(lines)
            if rows.filter(pl.col("ts_ns").is_null()).height:
                raise missing_time_error(source, "the ipmitool readings")
            notes = (["no host name in the file; pass --option host=NAME"]
                     if rows.height and rows["host"].null_count() else [])
            yield clock.annotate(Chunk(
                tables={"host_metrics": schema.conform("host_metrics", rows)},
                quarantine=quarantine_frame(source, bad),
                lines=lines.height,
                skipped=lines.height - rows.height - bad.height,
                bytes_read=batch.bytes_read,
                notes=notes,
            ))


def _parse(lines: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    line = pl.col("line")
    candidates = lines.filter(
        ~pl.col("is_marker") & ~line.str.starts_with("$") & ~line.str.starts_with("#")
        & (line.str.strip_chars() != "")
    )
    pipe = candidates.with_columns(
        pl.when(line.str.contains("|", literal=True)).then(line.str.split("|"))
        .otherwise(line.str.split(",")).list.eval(pl.element().str.strip_chars()).alias("f"),
    ).with_columns(pl.col("f").list.len().alias("n"))
    field = pl.col("f").list.get
    # sdr list: name | reading | status; elist: name | num | status | entity | reading;
    # sensor (and -c sensor): name | value | units | status | six thresholds.
    shaped = pipe.with_columns(
        pl.when(pl.col("n") == 3).then(field(1)).when(pl.col("n") == 5).then(field(4))
        .when(pl.col("n") == 10).then(pl.concat_str(field(1), pl.lit(" "), field(2)))
        .alias("reading"),
        pl.when(pl.col("n") == 3).then(field(2)).when(pl.col("n") == 5).then(field(2))
        .when(pl.col("n") == 10).then(field(3)).alias("state"),
        field(0, null_on_oob=True).alias("sensor"),
    )
    bad = shaped.filter(~pl.col("n").is_in([3, 5, 10])).with_columns(
        pl.format("expected 3 (sdr list), 5 (sdr elist) or 10 (sensor) fields, found {}",
                  pl.col("n")).alias("reason"))
    good = shaped.filter(pl.col("n").is_in([3, 5, 10]))
    reading = pl.col("reading").str.strip_chars()
    number = reading.str.extract(r"^(-?[0-9.]+)(?:\s|$)", 1).cast(pl.Float64, strict=False)
    unit_text = pl.when(pl.col("n") == 10).then(field(2)).otherwise(
        reading.str.extract(r"^-?[0-9.]+\s+(.*)$", 1)).str.strip_chars().str.to_lowercase()
    hex_value = reading.str.extract(r"^0x([0-9a-fA-F]+)", 1)
    suffix = unit_text.replace_strict({k: v[0] for k, v in UNITS.items()}, default=None)
    unit = unit_text.replace_strict({k: v[1] for k, v in UNITS.items()}, default="")
    state = pl.col("state").str.to_lowercase()
    parsed = good.with_columns(
        pl.coalesce(
            hex_value.str.to_integer(base=16, strict=False).cast(pl.Float64),
            pl.when(unit_text != "discrete").then(number),
        ).alias("value"),
        suffix.alias("_suffix"),
        unit.alias("unit"),
        pl.when(reading.str.to_lowercase().str.strip_chars().is_in(NO_READING)).then(pl.lit("ns"))
        .otherwise(state.replace_strict(STATUS, default=state)).alias("status"),
        # elist prints discrete states as words ("Presence detected, Failure detected").
        pl.when((pl.col("n") == 5) & number.is_null() & hex_value.is_null()
                & ~reading.str.to_lowercase().is_in(NO_READING)).then(reading).alias("_states"),
    ).with_columns(
        # a sensor that cannot be read in one snapshot keeps the unit it has in the others
        pl.col("_suffix").forward_fill().backward_fill().over("sensor"),
        pl.when(pl.col("unit") == "").then(
            pl.col("unit").replace("", None).forward_fill().backward_fill().over("sensor")
        ).otherwise(pl.col("unit")).fill_null("").alias("unit"),
    ).with_columns(
        pl.when(pl.col("_states").is_not_null())
        .then(pl.concat_str(pl.col("status").fill_null("ok"), pl.lit(": "), pl.col("_states")))
        .otherwise(pl.col("status")).alias("status"),
        sensor_metric(pl.col("sensor"), pl.col("_suffix")).alias("metric"),
    )
    rows = disambiguate(parsed, ["snapshot", "metric"]).select(
        pl.col("snap_ts_ns").alias("ts_ns"),
        short_host(pl.col("snap_host")).alias("host"),
        pl.lit("ipmitool").alias("source"),
        "metric", "value", "unit", "status",
    )
    return rows, bad


READERS = [IpmitoolReader()]

"""DLLogger JSON-lines logs (``dllogger.json``), as NeMo writes them next to its stdout.

NVIDIA's dllogger (``dllogger/logger.py`` JSONStreamBackend) writes one record a line:
``DLLL {"timestamp": "<epoch s>", "datetime": "<local time>", "elapsedtime": "<s>", "type":
"LOG", "step": <n>, "data": {...}}`` (``METADATA`` records name a metric instead of a step).
NeMo's DLLogger logs its Lightning metrics through it, among them the step's own duration
``train_step_timing in s``: a record holding it is one iteration, its ``timestamp`` the step's
end, its ``step`` the iteration. Every other record becomes a ``training_events`` row with the
record as detail, so nothing is dropped; lines that are not records are skipped.
"""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from tracekit.core import schema
from tracekit.ingest.base import Chunk, Reader, Source, iter_line_batches, quarantine_frame
from tracekit.ingest.numbers import bad_number_note, finite_number, tagged_json

DLLL_TAG = "DLLL "
STEP_TIMING_KEYS = ("train_step_timing in s", "train_step_timing")
"""Keys of a step's own duration in seconds: NeMo's TimingCallback metric (its name since NeMo
1.x), and the same without unit."""


class DlloggerReader(Reader):
    format = "dllogger"
    version = "1"
    tables = ("iterations", "training_events")
    priority = 20
    description = "DLLogger JSON lines (NeMo dllogger.json: per-step train_step_timing)"

    def sniff(self, source: Source) -> bool:
        return f'{DLLL_TAG}{{"timestamp": ' in source.head_text

    def read(self, source: Source, options: dict[str, str]) -> Iterator[Chunk]:
        for batch in iter_line_batches(source):
            yield _parse(source, batch.frame(), batch.bytes_read)


def _parse(source: Source, lines: pl.DataFrame, bytes_read: int) -> Chunk:
    records = tagged_json(lines, DLLL_TAG)
    field = {name: pl.col("_json").str.json_path_match(path) for name, path in {
        "timestamp": "$.timestamp", "type": "$.type", "step": "$.step",
        **{key: f'$.data["{key}"]' for key in STEP_TIMING_KEYS}}.items()}
    stamp = pl.col("timestamp").str.extract_groups(r"^(?P<s>\d{1,12})(?:\.(?P<f>\d{1,9})\d*)?$")
    records = records.with_columns(**field).with_columns(
        # str(datetime.timestamp()): whole seconds and a fraction, read exactly (not via float)
        (stamp.struct.field("s").cast(pl.Int64) * 10**9
         + stamp.struct.field("f").str.pad_end(9, "0").cast(pl.Int64).fill_null(0))
        .alias("ts_ns"),
        pl.col("step").cast(pl.Int64, strict=False),
        pl.coalesce(*STEP_TIMING_KEYS).alias("timing"),
    )
    valid = (pl.col("json").str.ends_with("}") & pl.col("type").is_not_null()
             & pl.col("ts_ns").is_not_null())
    bad = records.filter(~valid).select(
        "line_no", "line", pl.lit("truncated or invalid DLLogger record").alias("reason"))
    records = records.filter(valid)

    # a step whose timing is NaN (nulled above) is still a step, its duration null
    has_timing = pl.any_horizontal(pl.col("_json").str.contains(f'"{key}":', literal=True)
                                   for key in STEP_TIMING_KEYS)
    is_step = (pl.col("type") == "LOG") & has_timing & pl.col("step").is_not_null()
    steps = records.filter(is_step)
    duration = finite_number(pl.col("timing"))
    iterations = steps.select(
        pl.lit(None, dtype=pl.String).alias("job"),
        pl.lit(None, dtype=pl.Int32).alias("rank"),
        pl.col("step").alias("iteration"),
        (pl.col("ts_ns") - (duration * 1e9).round().cast(pl.Int64)).alias("t_start_ns"),
        pl.col("ts_ns").alias("t_end_ns"),
        duration.alias("duration_s"),
        pl.lit("framework").alias("source"),
        pl.lit("ok").alias("quality"),
    )
    events = records.filter(~is_step).select(
        pl.lit(None, dtype=pl.String).alias("job"),
        pl.lit("dllogger").alias("source"),
        pl.col("type").str.to_lowercase().alias("event"),
        pl.col("step").alias("iteration"),
        "ts_ns",
        pl.col("json").alias("detail"),
    )
    return Chunk(
        tables={"iterations": schema.conform("iterations", iterations),
                "training_events": schema.conform("training_events", events)},
        quarantine=quarantine_frame(source, bad),
        lines=lines.height,
        skipped=lines.height - records.height - bad.height,
        bytes_read=bytes_read,
        notes=bad_number_note({"train_step_timing in s": steps.filter(duration.is_null()).height}),
    )


READERS = [DlloggerReader()]

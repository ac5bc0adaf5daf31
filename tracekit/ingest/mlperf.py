"""MLPerf Training logs: ``:::MLLOG {json}`` lines from the mlperf_logging library.

Per-step times come from NeMo-based submissions' ``tracked_stats`` records
(``{"train_step_timing": s}`` with ``metadata.step`` counting samples or tokens); every other
record (run / block / epoch / eval start and stop, eval accuracy, configuration) becomes a
``training_events`` row with the record's JSON as detail, so nothing of the log is dropped.
Lines that are not MLLOG records (the rest of stdout) are skipped.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import polars as pl

from tracekit.core import schema
from tracekit.ingest.base import Chunk, Reader, Source, iter_line_batches, quarantine_frame
from tracekit.ingest.numbers import bad_number_note, finite_number, tagged_json

MLLOG_TAG = ":::MLLOG "
STEP_TIMING_KEY = "train_step_timing"
NS_PER_MS = 1_000_000


class MlperfLogReader(Reader):
    format = "mlperf-log"
    version = "1"
    tables = ("iterations", "training_events")
    priority = 20
    description = "MLPerf Training log (:::MLLOG JSON lines; per-step train_step_timing)"

    def sniff(self, source: Source) -> bool:
        return f"{MLLOG_TAG}{{" in source.head_text

    def read(self, source: Source, options: dict[str, str]) -> Iterator[Chunk]:
        stride: list[int] = []
        for batch in iter_line_batches(source):
            yield _parse(source, batch.frame(), batch.bytes_read, stride)


def _parse(source: Source, lines: pl.DataFrame, bytes_read: int, stride: list[int]) -> Chunk:
    """``stride`` holds the step counter's increment per iteration once known (the greatest
    common divisor of the first batch's steps), so later batches number iterations alike."""
    records = tagged_json(lines, MLLOG_TAG)
    field = {name: pl.col("_json").str.json_path_match(path) for name, path in {
        "key": "$.key", "time_ms": "$.time_ms", "event_type": "$.event_type",
        "value": "$.value", "timing": f"$.value.{STEP_TIMING_KEY}",
        "step": "$.metadata.step"}.items()}
    records = records.with_columns(**field)
    valid = (pl.col("json").str.ends_with("}") & pl.col("key").is_not_null()
             & pl.col("time_ms").cast(pl.Int64, strict=False).is_not_null())
    bad = records.filter(~valid).select(
        "line_no", "line", pl.lit("truncated or invalid MLLOG record").alias("reason"))
    records = records.filter(valid).with_columns(
        (pl.col("time_ms").cast(pl.Int64) * NS_PER_MS).alias("ts_ns"),
        pl.col("step").cast(pl.Int64, strict=False),
    )

    is_step = pl.col("_json").str.contains(f'"{STEP_TIMING_KEY}"', literal=True)
    steps = records.filter(is_step)
    if not stride:
        positive = steps["step"].drop_nulls().filter(steps["step"].drop_nulls() > 0).to_numpy()
        stride.append(int(np.gcd.reduce(positive)) if positive.size else 0)
    duration = finite_number(pl.col("timing"))
    iteration = (pl.col("step") // stride[0]) if stride[0] else pl.lit(None, dtype=pl.Int64)
    iterations = steps.select(
        pl.lit(None, dtype=pl.String).alias("job"),
        pl.lit(None, dtype=pl.Int32).alias("rank"),
        iteration.alias("iteration"),
        (pl.col("ts_ns") - (duration * 1e9).round().cast(pl.Int64)).alias("t_start_ns"),
        pl.col("ts_ns").alias("t_end_ns"),
        duration.alias("duration_s"),
        pl.lit("framework").alias("source"),
        pl.lit("ok").alias("quality"),
    )
    events = records.filter(~is_step).select(
        pl.lit(None, dtype=pl.String).alias("job"),
        pl.lit("mlperf").alias("source"),
        pl.col("key").alias("event"),
        "ts_ns",
        finite_number(pl.col("value")).alias("value"),
        pl.col("json").str.strip_chars().alias("detail"),
    )
    nulled = steps.filter(duration.is_null()).height
    return Chunk(
        tables={"iterations": schema.conform("iterations", iterations),
                "training_events": schema.conform("training_events", events)},
        quarantine=quarantine_frame(source, bad),
        lines=lines.height,
        skipped=lines.height - records.height - bad.height,
        bytes_read=bytes_read,
        notes=bad_number_note({STEP_TIMING_KEY: nulled}),
    )


READERS = [MlperfLogReader()]

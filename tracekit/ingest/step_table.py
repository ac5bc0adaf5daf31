"""Per-worker step tables in CSV or Parquet: one row per worker per step (or per sample time).

Schedulers and training platforms export exactly this (the Alibaba PAI mini-batch table in
cluster-trace-gpu-v2020 is one), each with its own column names, so the columns are mapped by
options: ``worker``, ``step``, ``duration`` (with ``duration_unit``: s, ms, us, ns or normalised)
and an optional absolute ``time`` column (``time_unit``: s, ms, us, ns since the epoch). Without
options the reader recognises known headers (``PRESETS``) and common column names, in any case.
A table without a worker column is one job-level series (rank null). A Parquet table is read as
the CSV would be, a row's number standing for its line; its datetime and duration columns carry
their own unit.
"""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from tracekit.core import schema
from tracekit.core.dataset import SAMPLE_SECONDS
from tracekit.core.errors import InputError
from tracekit.ingest.base import (
    Chunk,
    Reader,
    Source,
    iter_line_batches,
    quarantine_frame,
    read_parquet,
    split_on_reason,
)
from tracekit.ingest.numbers import bad_number_note, finite_number, is_bad_number

PRESETS: dict[str, dict[str, str]] = {
    ",worker,gpu,time,batch_time_norm": {
        "worker": "worker", "step": "time", "duration": "batch_time_norm",
        "duration_unit": "normalised",
    },
}
"""Known headers and their mapping. Alibaba PAI ``mini-batch-time/job_N_norm.csv``
(alibaba/clusterdata cluster-trace-gpu-v2020): times normalised to 0..1000 per job."""
SAMPLE_TIME_STEPS = {",worker,gpu,time,batch_time_norm": "time"}
"""Presets whose "step" column is the sample time in seconds (a row per worker every ~10 s),
so iteration numbers, and the episode lengths counted from them, are seconds."""
WORKER_NAMES = ("rank", "global_rank", "worker", "worker_id", "worker_name", "node_rank")
STEP_NAMES = ("step", "iteration", "iter", "global_step")
DURATION_NAMES = {
    "duration_s": "s", "step_time_s": "s", "iteration_time_s": "s", "batch_time_s": "s",
    "duration_ms": "ms", "step_time_ms": "ms", "iteration_time_ms": "ms", "batch_time_ms": "ms",
}
SECONDS_PER_UNIT = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "normalised": 1.0}
NS_PER_UNIT = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}
INT64_LIMIT = 2.0**63
"""Times and durations are stored as int64 nanoseconds; a value at 2^63 ns (292 years) or more,
or below zero, is a corrupt field, not a step."""
RANK_LIMIT = 2**31
"""Ranks are stored as int32."""
JOB_LEVEL = -1
"""The rank a table without a worker column has while rows are checked (null in the output),
so its repeated steps are found like a worker's."""
PARQUET_MAGIC = b"PAR1"


class StepTableReader(Reader):
    format = "step-table"
    options = ("worker", "step", "duration", "duration_unit", "time", "time_unit")
    version = "2"
    tables = ("iterations",)
    priority = 80
    description = ("per-worker step table, CSV or Parquet (worker, step, duration; columns "
                   "mapped by options)")

    def sniff(self, source: Source) -> bool:
        if _is_parquet(source):
            names, durations = _parquet_names(source)
        else:
            names, durations = _names(_header(source.head_text)), []
        if ",".join(names) in PRESETS:
            return True
        return (_known(names, STEP_NAMES) is not None
                and _known(names, (*DURATION_NAMES, *durations)) is not None)

    def read(self, source: Source, options: dict[str, str]) -> Iterator[Chunk]:
        seen = [pl.DataFrame(schema={"_rank": pl.Int64, "_step": pl.Int64})]
        if _is_parquet(source):
            table = read_parquet(source)
            names = table.columns
            mapping = _mapping(source, names, options, _typed_units(table))
            yield _parse(source, _parquet_fields(table, mapping), source.size, names, mapping,
                         seen)
            return
        names = _names(_header(source.head_text))
        mapping = _mapping(source, names, {**PRESETS.get(",".join(names), {}), **options})
        for batch in iter_line_batches(source):
            yield _parse(source, _csv_fields(batch.frame(), names), batch.bytes_read, names,
                         mapping, seen)


def _is_parquet(source: Source) -> bool:
    return source.head.startswith(PARQUET_MAGIC)


def _parquet_names(source: Source) -> tuple[list[str], list[str]]:
    """The Parquet file's column names and those of its duration columns."""
    try:
        with source.open() as stream:
            columns = pl.read_parquet_schema(stream)
    except (OSError, ValueError, pl.exceptions.PolarsError):
        return [], []
    return list(columns), [n for n, dtype in columns.items() if isinstance(dtype, pl.Duration)]


def _typed_units(table: pl.DataFrame) -> dict[str, str]:
    """What the column types say: ``duration`` or ``datetime`` (their values are handed over
    as nanoseconds, :func:`_parquet_fields`)."""
    kinds = {pl.Duration: "duration", pl.Datetime: "datetime"}
    return {name: kind for name, dtype in table.schema.items()
            for type_, kind in kinds.items() if isinstance(dtype, type_)}


def _known(names: list[str], candidates) -> str | None:
    """The first of ``names`` that is one of ``candidates``, in any case."""
    wanted = {candidate.lower() for candidate in candidates}
    return next((name for name in names if name.lower() in wanted), None)


def _header(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _names(header: str) -> list[str]:
    """The header's column names, unquoted: a table written by polars or pandas quotes an empty
    index name (``"",worker,...``)."""
    return [name.strip().strip('"') for name in header.split(",")]


def _mapping(source: Source, names: list[str], options: dict[str, str],
             typed: dict[str, str] | None = None) -> dict[str, str]:
    """Resolve every mapped column against the header; a clear error naming what is missing.
    No worker column is a job-level table; ``typed`` columns (:func:`_typed_units`) are in
    nanoseconds, and a duration column may be the duration whatever its name."""
    typed = typed or {}

    def pick(role: str, candidates, required: bool = True) -> str | None:
        column = options.get(role) or _known(names, candidates)
        if column is None and required:
            raise InputError(f"cannot tell which column holds the {role}; pass --option "
                             f"{role}=COLUMN (columns: {', '.join(names)})", source.name)
        if column is not None and column not in names:
            raise InputError(f"no column {column!r} for {role}; columns: {', '.join(names)}",
                             source.name)
        return column

    durations = [n for n, kind in typed.items() if kind == "duration"]
    mapping = {"step": pick("step", STEP_NAMES),
               "duration": pick("duration", (*DURATION_NAMES, *durations))}
    worker = pick("worker", WORKER_NAMES, required=False)
    if worker is not None:
        mapping["worker"] = worker
    unit = (("ns" if mapping["duration"] in typed else None) or options.get("duration_unit")
            or DURATION_NAMES.get(mapping["duration"].lower()))
    if unit not in SECONDS_PER_UNIT:
        raise InputError(f"duration unit of column {mapping['duration']!r} is unknown; pass "
                         f"--option duration_unit={'|'.join(SECONDS_PER_UNIT)}", source.name)
    mapping["duration_unit"] = unit
    if SAMPLE_TIME_STEPS.get(",".join(names)) == mapping["step"]:
        mapping["step_is_time"] = "s"
    if "time" in options:
        mapping["time"] = pick("time", ())
        mapping["time_unit"] = "ns" if mapping["time"] in typed else options.get("time_unit", "s")
        if mapping["time_unit"] not in NS_PER_UNIT:
            raise InputError(f"--option time_unit must be one of {', '.join(NS_PER_UNIT)}",
                             source.name)
    return mapping


def _csv_fields(lines: pl.DataFrame, names: list[str]) -> tuple[pl.DataFrame, int, int]:
    """A batch of CSV lines as :func:`_parse` takes them: the rows (``line_no``, ``line``,
    ``_commas`` and the fields as texts ``_c0``...), the number of lines and of those
    skipped (blank lines, repeated headers)."""
    blank = pl.col("line").str.strip_chars() == ""
    is_header = (pl.col("line").str.strip_chars().str.replace_all('"', "", literal=True)
                 == ",".join(names))
    rows = lines.filter(~blank & ~is_header)
    fields = rows.with_columns(
        pl.col("line").str.count_matches(",", literal=True).alias("_commas"),
        pl.col("line").str.split_exact(",", len(names) - 1).struct.rename_fields(
            [f"_c{i}" for i in range(len(names))]).alias("_f"),
    ).unnest("_f")
    return fields, lines.height, lines.height - rows.height


def _parquet_fields(table: pl.DataFrame, mapping: dict[str, str]) -> tuple[pl.DataFrame, int,
                                                                          int]:
    """A Parquet table as :func:`_csv_fields` gives a CSV: row n is line n, its values as
    texts; datetimes as nanoseconds since the epoch and durations as nanoseconds."""
    def text(name: str) -> pl.Expr:
        column = pl.col(name)
        if isinstance(table.schema[name], pl.Datetime):
            column = column.dt.epoch("ns")
        elif isinstance(table.schema[name], pl.Duration):
            column = column.dt.total_nanoseconds()
        return column.cast(pl.String)

    texts = [text(name).alias(f"_c{i}") for i, name in enumerate(table.columns)]
    fields = table.select(
        (pl.int_range(pl.len(), dtype=pl.Int64) + 1).alias("line_no"),
        pl.concat_str([t.fill_null("") for t in texts], separator=",").alias("line"),
        pl.lit(table.width - 1).alias("_commas"),
        *texts,
    )
    return fields, table.height, 0


def _parse(source: Source, rows: tuple[pl.DataFrame, int, int], bytes_read: int,
           names: list[str], mapping: dict[str, str], seen: list[pl.DataFrame]) -> Chunk:
    """``rows`` as :func:`_csv_fields` gives them; ``seen`` holds the (worker, step) pairs of
    earlier batches, so a repeated row is quarantined as a duplicate wherever it appears."""
    fields, line_count, skipped = rows
    column = {name: pl.col(f"_c{i}").str.strip_chars().str.strip_chars('"')
              for i, name in enumerate(names)}
    if "worker" in mapping:
        worker = column[mapping["worker"]]
        rank = worker.cast(pl.Int64, strict=False).fill_null(
            worker.str.extract(r"(\d+)$").cast(pl.Int64, strict=False))
    else:
        rank = pl.lit(JOB_LEVEL, dtype=pl.Int64)
    step = column[mapping["step"]].cast(pl.Int64, strict=False)
    duration_text = column[mapping["duration"]]
    time_text = column[mapping["time"]] if "time" in mapping else pl.lit(None, pl.String)
    typed = fields.with_columns(rank.alias("_rank"), step.alias("_step"),
                                duration_text.alias("_duration"), time_text.alias("_time"))
    earlier = seen[0].with_columns(pl.lit(True).alias("_earlier"))
    typed = typed.join(earlier, on=["_rank", "_step"], how="left", maintain_order="left",
                       nulls_equal=False).with_columns(
        (pl.struct("_rank", "_step").is_first_distinct() & pl.col("_earlier").is_null())
        .alias("_first"),
    )
    unit = mapping["duration_unit"]
    duration_s = finite_number(pl.col("_duration")) * SECONDS_PER_UNIT[unit]
    time_ns = (finite_number(pl.col("_time")) * NS_PER_UNIT[mapping.get("time_unit", "s")]).round()
    reason = (
        pl.when(pl.col("_commas") != len(names) - 1)
        .then(pl.format("expected {} fields, found {}", pl.lit(len(names)), pl.col("_commas") + 1))
        .when(pl.col("_rank").is_null())
        .then(pl.lit(f"{mapping.get('worker')} is not a worker id"))
        .when(~pl.col("_rank").is_between(0 if "worker" in mapping else JOB_LEVEL,
                                          RANK_LIMIT - 1))
        .then(pl.format("worker id {} is out of range", pl.col("_rank")))
        .when(pl.col("_step").is_null()).then(pl.lit(f"{mapping['step']} is not an integer"))
        .when(~(duration_s * 1e9).is_between(0, INT64_LIMIT, closed="left"))
        .then(pl.format("duration {} is out of range", pl.col("_duration")))
        .when(~time_ns.is_between(0, INT64_LIMIT, closed="left"))
        .then(pl.format("time {} is out of range", pl.col("_time")))
        .when(~pl.col("_first")).then(pl.lit("duplicate worker and step (first row kept)"))
        .otherwise(None)
    )
    good, bad = split_on_reason(typed, reason)
    seen[0] = pl.concat([seen[0], good.select("_rank", "_step")])

    t_end = time_ns.cast(pl.Int64)
    real_time = unit != "normalised"
    iterations = good.select(
        pl.lit(None, dtype=pl.String).alias("job"),
        pl.when(pl.col("_rank") != JOB_LEVEL).then(pl.col("_rank")).cast(pl.Int32).alias("rank"),
        pl.col("_step").alias("iteration"),
        (t_end - (duration_s * 1e9).round().cast(pl.Int64)).alias("t_start_ns") if real_time
        else pl.lit(None, dtype=pl.Int64).alias("t_start_ns"),
        t_end.alias("t_end_ns"),
        duration_s.alias("duration_s"),
        pl.lit("framework").alias("source"),
        pl.lit("ok" if real_time else "normalised").alias("quality"),
    )
    notes = bad_number_note({mapping["duration"]: good.filter(
        is_bad_number(pl.col("_duration"))).height})
    if "step_is_time" in mapping and good.height:
        notes.append(f"column {mapping['step']} is the sample time in seconds (one row per "
                     "worker every few seconds, not per step): iteration numbers are seconds")
    if not real_time and good.height:
        notes.append("durations are normalised (unit-less), stored as-is in duration_s with "
                     "quality 'normalised'")
    return Chunk(
        tables={"iterations": schema.conform("iterations", iterations)},
        quarantine=quarantine_frame(source, bad),
        lines=line_count,
        skipped=skipped,
        bytes_read=bytes_read,
        notes=notes,
        step_axis=SAMPLE_SECONDS if "step_is_time" in mapping else None,
    )


READERS = [StepTableReader()]

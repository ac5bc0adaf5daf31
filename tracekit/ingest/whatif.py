"""Per-rank op traces in the ByteDance what-if format, read and written back.

The format is the input of the what-if analyser of "Understanding Stragglers in Large Model
Training Using What-if Analysis" (ByteDance-Seed/StragglerAnalysis): ``trace-<trial>.parquet``
with one row per timed Megatron operation (``dp_rank, stage, rank, step, optype, start_ts,
duration, seq_id, mc, mb_id, gmc``; times in seconds from the step's start, -1 for "not
applicable") and ``meta-<trial>.yaml`` with the parallel layout. The reader fills ``op_traces``,
per-rank ``iterations`` and ``parallel_layout``; :func:`export_whatif` writes the same two files
from a dataset, so the authors' analyser runs on what tracekit ingested.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import polars as pl

from tracekit.core import schema
from tracekit.core.dataset import atomic_path, open_dataset
from tracekit.core.errors import InputError
from tracekit.ingest.base import Chunk, Reader, Source, quarantine_frame

TRACE_COLUMNS: dict[str, pl.DataType] = {
    "dp_rank": pl.Int8(), "stage": pl.Int8(), "rank": pl.Int16(), "step": pl.Int64(),
    "optype": pl.Categorical(), "start_ts": pl.Float32(), "duration": pl.Float32(),
    "seq_id": pl.Int32(), "mc": pl.Int8(), "mb_id": pl.Int8(), "gmc": pl.Int16(),
}
"""Trace columns and the dtypes of the published traces; the exporter widens an integer column
only when the values do not fit."""
NOT_APPLICABLE = -1
"""What the format writes in ``mc``, ``mb_id`` and ``gmc`` where they do not apply."""
META_SIZES = ("dp_size", "dsp_size", "pp_size", "tp_size", "vpp_size", "world_size")
"""Layout fields of ``meta-*.yaml`` (``JobMeta`` in the analyser's ``metatypes.py``)."""
ROWS_PER_CHUNK = 1_000_000
INTEGER_BITS = {pl.Int8: 8, pl.Int16: 16, pl.Int32: 32, pl.Int64: 64}
OPTIONAL_INDEX = {"mc": "model_chunk", "mb_id": "micro_batch", "gmc": "global_model_chunk"}


def _parquet_columns(source: Source) -> list[str]:
    with source.open() as stream:
        return pl.read_parquet_schema(stream).names()


class WhatIfTraceReader(Reader):
    format = "whatif-trace"
    version = "1"
    tables = ("op_traces", "iterations")
    priority = 20
    description = "ByteDance what-if per-rank op trace (trace-*.parquet)"

    def sniff(self, source: Source) -> bool:
        if not source.head.startswith(b"PAR1"):
            return False
        try:
            return set(TRACE_COLUMNS) <= set(_parquet_columns(source))
        except (OSError, ValueError, pl.exceptions.PolarsError):
            return False

    def read(self, source: Source, options: dict[str, str]) -> Iterator[Chunk]:
        try:
            with source.open() as stream:
                trace = pl.read_parquet(stream)
        except (OSError, ValueError, pl.exceptions.PolarsError) as error:
            raise InputError(f"not a readable Parquet file: {error}", source.name) from None
        missing = [c for c in TRACE_COLUMNS if c not in trace.columns]
        if missing:
            raise InputError(f"what-if trace lacks columns {missing}; it needs "
                             f"{', '.join(TRACE_COLUMNS)}", source.name)
        trace = trace.select(list(TRACE_COLUMNS)).with_row_index("line_no", offset=1)
        required = ("dp_rank", "stage", "rank", "step", "optype", "start_ts", "duration")
        reason = pl.when(pl.any_horizontal(pl.col(required).is_null())).then(
            pl.lit("row has a null in dp_rank, stage, rank, step, optype, start_ts or duration"))
        for column in ("start_ts", "duration"):
            reason = reason.when(~pl.col(column).cast(pl.Float64).is_finite()).then(
                pl.lit(f"{column} is not a finite number"))
        trace = trace.with_columns(reason.otherwise(None).alias("reason"))
        bad = trace.filter(pl.col("reason").is_not_null())
        good = trace.filter(pl.col("reason").is_null())
        for offset in range(0, max(good.height, 1), ROWS_PER_CHUNK):
            rows = good.slice(offset, ROWS_PER_CHUNK)
            yield Chunk(tables={"op_traces": schema.conform("op_traces", _op_traces(rows))},
                        lines=rows.height, bytes_read=source.size if offset == 0 else 0)
        yield Chunk(
            tables={"iterations": _rank_iterations(good)},
            quarantine=quarantine_frame(source, bad.select(
                pl.col("line_no").cast(pl.Int64), "reason",
                pl.concat_str([pl.format("{}={}", pl.lit(c), pl.col(c).cast(pl.String))
                               for c in TRACE_COLUMNS], separator=", ", ignore_nulls=False)
                .fill_null("(row with nulls)").alias("line"))),
            lines=bad.height,
        )


def _op_traces(rows: pl.DataFrame) -> pl.DataFrame:
    optional = [pl.when(pl.col(c) != NOT_APPLICABLE).then(pl.col(c)).cast(pl.Int32).alias(name)
                for c, name in OPTIONAL_INDEX.items()]
    return rows.select(
        pl.lit(None, dtype=pl.String).alias("job"),
        pl.col("rank").cast(pl.Int32),
        pl.col("dp_rank").cast(pl.Int32),
        pl.col("stage").cast(pl.Int32).alias("pp_stage"),
        pl.col("step").cast(pl.Int64),
        pl.col("optype").cast(pl.String).alias("op"),
        pl.col("seq_id").cast(pl.Int64).alias("seq"),
        pl.col("start_ts").cast(pl.Float64).alias("start_s"),
        pl.col("duration").cast(pl.Float64).alias("duration_s"),
        *optional,
    )


def _rank_iterations(rows: pl.DataFrame) -> pl.DataFrame:
    """Each rank's step time: from the step's start to the end of the rank's last operation,
    the same measure as the analyser's ``get_step_time`` takes over all ranks."""
    end = (pl.col("start_ts").cast(pl.Float64) + pl.col("duration").cast(pl.Float64)).max()
    steps = rows.group_by("rank", "step").agg(end.alias("duration_s")).sort("rank", "step")
    return schema.conform("iterations", steps.select(
        pl.lit(None, dtype=pl.String).alias("job"),
        pl.col("rank").cast(pl.Int32),
        pl.col("step").cast(pl.Int64).alias("iteration"),
        pl.col("duration_s"),
        pl.lit("framework").alias("source"),
        pl.lit("ok").alias("quality"),
    ))


class WhatIfMetaReader(Reader):
    format = "whatif-meta"
    version = "1"
    tables = ("parallel_layout",)
    priority = 20
    description = "ByteDance what-if job metadata (meta-*.yaml: parallel layout)"

    def sniff(self, source: Source) -> bool:
        keys = {line.split(":", 1)[0].strip() for line in source.head_text.splitlines()}
        return {"trial_name", "world_size", "dp_size", "pp_size"} <= keys

    def read(self, source: Source, options: dict[str, str]) -> Iterator[Chunk]:
        # Imported here: reader discovery imports this module in every ingest, and importing
        # yaml (compiling its resolver's regexes) is a third of what discovery costs.
        import yaml

        with source.open() as stream:
            text = stream.read().decode("utf-8", errors="replace")
        try:
            meta = yaml.safe_load(text)
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            raise InputError(f"not valid YAML: {getattr(error, 'problem', error)}", source.name,
                             mark.line + 1 if mark else None) from None
        if not isinstance(meta, dict):
            raise InputError("expected a mapping of trial_name, run_id and *_size fields",
                             source.name)
        sizes = {k: meta.get(k) for k in META_SIZES}
        wrong = [k for k, v in sizes.items() if v is not None and (type(v) is not int or v <= 0)]
        if wrong:
            raise InputError(f"{', '.join(wrong)} must be positive integers", source.name)
        extra = {k: v for k, v in meta.items() if k not in META_SIZES or k == "dsp_size"}
        layout = pl.DataFrame({
            "job": [None], "source": ["whatif"], "world_size": [sizes["world_size"]],
            "tp_size": [sizes["tp_size"]], "pp_size": [sizes["pp_size"]],
            "dp_size": [sizes["dp_size"]], "vpp_size": [sizes["vpp_size"]],
            "extra_json": [json.dumps(extra, sort_keys=True, default=str)],
        }, schema_overrides={"job": pl.String, **{c: pl.Int32 for c in (
            "world_size", "tp_size", "pp_size", "dp_size", "vpp_size")}})
        lines = len(text.splitlines())
        yield Chunk(tables={"parallel_layout": schema.conform("parallel_layout", layout)},
                    lines=lines, skipped=lines - 1, bytes_read=source.size)


class WhatIfResultReader(Reader):
    format = "whatif-result"
    version = "1"
    tables = ()
    priority = 20
    description = ("ByteDance what-if analyser output (result/ms/mw-*.json): recognised, "
                   "not ingested")

    def sniff(self, source: Source) -> bool:
        head = source.head_text.lstrip()
        return head.startswith("{") and (
            '"step_t_base"' in head or ('"tideal"' in head and '"tori"' in head))

    def read(self, source: Source, options: dict[str, str]) -> Iterator[Chunk]:
        yield Chunk(lines=1, skipped=1, bytes_read=source.size,
                    notes=["what-if analyser output: nothing to ingest (it is derived from the "
                           "trace)"])


def _fitting_dtype(values: pl.Series, published: pl.DataType) -> pl.DataType:
    """The published integer dtype, or a wider one when the values do not fit in it."""
    low, high = values.min(), values.max()
    for dtype in (pl.Int8(), pl.Int16(), pl.Int32()):
        bits = INTEGER_BITS[type(dtype)]
        wide_enough = bits >= INTEGER_BITS[type(published)]
        if wide_enough and (low is None or -(2 ** (bits - 1)) <= low <= high < 2 ** (bits - 1)):
            return dtype
    return pl.Int64()


def export_whatif(dataset_path: str | Path, output: str | Path,
                  trial: str | None = None) -> list[Path]:
    """Write ``trace-<trial>.parquet`` and ``meta-<trial>.yaml`` for the what-if analyser from a
    dataset's ``op_traces`` and ``parallel_layout``; returns the two paths. ``trial`` defaults to
    the ingested meta's trial name, else the job id."""
    dataset = open_dataset(dataset_path)
    ops = dataset.table("op_traces").collect()
    if ops.height == 0:
        raise InputError("dataset has no op_traces to export; ingest per-rank op traces (e.g. a "
                         "what-if trace-*.parquet) first", str(dataset_path))
    meta = _meta(dataset.table("parallel_layout").collect(), ops)
    meta["trial_name"] = trial or meta["trial_name"] or dataset.job
    trace = ops.select(
        pl.col("dp_rank").alias("dp_rank"), pl.col("pp_stage").alias("stage"), "rank", "step",
        pl.col("op").alias("optype"), pl.col("start_s").alias("start_ts"),
        pl.col("duration_s").alias("duration"), pl.col("seq").alias("seq_id"),
        *[pl.col(name).fill_null(NOT_APPLICABLE).alias(c) for c, name in OPTIONAL_INDEX.items()],
    )
    trace = trace.select(
        pl.col(c).cast(dtype if not dtype.is_integer() else _fitting_dtype(trace[c], dtype))
        for c, dtype in TRACE_COLUMNS.items())
    output = Path(output)
    trace_path = output / f"trace-{meta['trial_name']}.parquet"
    meta_path = output / f"meta-{meta['trial_name']}.yaml"
    with atomic_path(trace_path) as temporary:
        trace.write_parquet(temporary)
    import yaml  # imported here: see WhatIfMetaReader.read

    with atomic_path(meta_path) as temporary:
        temporary.write_text(yaml.safe_dump(meta, sort_keys=False))
    return [trace_path, meta_path]


def _meta(layouts: pl.DataFrame, ops: pl.DataFrame) -> dict:
    """The meta yaml: the ingested what-if layout, else Megatron's, else one counted from the
    trace (sizes the trace cannot show default to 1)."""
    preferred = layouts.sort(pl.col("source") != "whatif")
    row = preferred.row(0, named=True) if preferred.height else {}
    extra = json.loads(row["extra_json"]) if row.get("extra_json") else {}
    world = row.get("world_size") or ops["rank"].n_unique()
    dp = row.get("dp_size") or ops["dp_rank"].n_unique()
    pp = row.get("pp_size") or ops["pp_stage"].n_unique()
    dsp = extra.get("dsp_size", 1)
    tp = row.get("tp_size") or max(world // (dp * pp * dsp), 1)
    return {"trial_name": extra.get("trial_name"), "run_id": extra.get("run_id", 0),
            "dp_size": dp, "dsp_size": dsp, "pp_size": pp, "tp_size": tp,
            "vpp_size": row.get("vpp_size") or 1, "world_size": world}


READERS = [WhatIfTraceReader(), WhatIfMetaReader(), WhatIfResultReader()]

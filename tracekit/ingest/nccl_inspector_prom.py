"""NCCL Inspector Prometheus files (``NCCL_INSPECTOR_PROM_DUMP=1``): per-GPU aggregates of the
collective and P2P calls completed in one dump interval, one series per (comm, op, message-size
bucket, algorithm / protocol).

The Inspector (``plugins/profiler/inspector/inspector_prom.cc``) truncates and rewrites
``<dir>/nccl_inspector_metrics_<GPU-UUID>.prom`` every interval (at least 30 s) and prints no
timestamps, so a row's time is the snapshot's ``# ts=`` marker (collectors that append
snapshots), else a time in the file name, else ``--option ts=``, else null. Each bucket is two
samples with the same labels, bus bandwidth and execution time; they become one row.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import polars as pl

from tracekit.core import schema
from tracekit.core.identity import IdentityMap
from tracekit.ingest import nccl_names
from tracekit.ingest.base import (
    Chunk,
    Reader,
    Source,
    iter_line_batches,
    quarantine_frame,
    split_on_reason,
)
from tracekit.ingest.prometheus import head_samples, label, nccl_only, parse_exposition
from tracekit.ingest.snapshots import SnapshotClock, file_name_ts_ns, option_ts_ns

BANDWIDTH_METRICS = ("nccl_bus_bandwidth_gbs", "nccl_p2p_bus_bandwidth_gbs")
EXEC_TIME_METRICS = ("nccl_collective_exec_time_microseconds", "nccl_p2p_exec_time_microseconds")
P2P_METRICS = ("nccl_p2p_bus_bandwidth_gbs", "nccl_p2p_exec_time_microseconds")

SIZE_UNIT_BYTES = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3, "TB": 1024**4}
"""``message_size`` units: powers of 1024 (``inspectorPromFormatMessageSizeRange`` divides by
1024.0 per unit), although the bandwidths are in 10^9 B/s."""

_SIZE_RANGE = r"^(\d+)(?:-(\d+))?(B|KB|MB|GB|TB)$"
_UUID_IN_NAME = r"GPU-[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}"
_FILE_NAME = rf"^nccl_inspector_metrics_({_UUID_IN_NAME})\.prom$"

KEY = ["snap_ts_ns", "slurm_job_id", "host", "cuda_dev", "comm_name", "n_nodes", "nranks",
       "kind", "op", "bytes_low", "algorithm", "protocol", "inspector_version"]
"""The label set of a bucket (plus its snapshot time): samples sharing it become one row."""


@dataclass
class _State:
    pending: pl.DataFrame | None = None
    """Buckets seen with only one of their two samples, waiting for the other in the next batch."""
    other_metrics: set[str] = field(default_factory=set)
    untimed: bool = False
    """Whether some bucket could not be placed in time."""


class NcclInspectorPromReader(Reader):
    format = "nccl-inspector-prom"
    options = ("ts", "identity_map")
    version = "1"
    tables = ("collective_buckets",)
    priority = 55
    description = "NCCL Inspector Prometheus files (per-GPU bandwidth and time aggregates)"

    def sniff(self, source: Source) -> bool:
        """A text exposition whose samples are all ``nccl_*`` (the Prometheus text reader
        refuses exactly these, so every exposition has one reader)."""
        names, bad = head_samples(source)
        return len(names) >= max(1, bad) and nccl_only(names)

    def read(self, source: Source, options: dict[str, str]) -> Iterator[Chunk]:
        clock = SnapshotClock(_dump_time_ns(source, options), None)
        identity = IdentityMap.load(options.get("identity_map"))
        gpu_uuid = _gpu_uuid(source)
        state = _State()
        for batch in iter_line_batches(source):
            lines = clock.stamp(batch.frame())
            yield _parse(source, lines, batch.bytes_read, identity, gpu_uuid, state)
        yield Chunk(tables=_flush_pending(state, gpu_uuid), notes=_notes(state))


def _dump_time_ns(source: Source, options: dict[str, str]) -> int | None:
    """The time of a file without ``# ts=`` markers: a time in its name (the GPU UUID cut out
    first, its hex digits can look like an epoch), else ``--option ts``."""
    name = source.file_name
    uuid = _gpu_uuid(source)
    named = file_name_ts_ns(Source(name.replace(uuid, "") if uuid else name, 0, source.opener))
    return named if named is not None else option_ts_ns(options, source)


def _gpu_uuid(source: Source) -> str | None:
    return pl.select(pl.lit(source.file_name).str.extract(_FILE_NAME, 1)).item()


def _parse(source: Source, lines: pl.DataFrame, bytes_read: int, identity: IdentityMap,
           gpu_uuid: str | None, state: _State) -> Chunk:
    parsed = parse_exposition(lines.filter(~pl.col("is_marker")).select("line_no", "line"))
    samples = parsed.samples.join(lines.select("line_no", "line", "snap_ts_ns"), on="line_no")
    name = pl.col("name")
    known = name.is_in([*BANDWIDTH_METRICS, *EXEC_TIME_METRICS])
    state.other_metrics.update(samples.filter(~known)["name"].unique().to_list())
    buckets = _bucket_columns(samples.filter(known), identity)
    good, bad = split_on_reason(buckets, _reason())
    partial = good.select(
        *KEY,
        pl.when(name.is_in(BANDWIDTH_METRICS)).then("value").alias("busbw_geomean_gbs"),
        pl.when(name.is_in(EXEC_TIME_METRICS)).then("value").alias("exec_time_mean_us"),
        "bytes_high",
    )
    if state.pending is not None:
        partial = pl.concat([state.pending, partial], how="vertical")
    merged = _merge_pairs(partial)
    complete = pl.col("busbw_geomean_gbs").is_not_null() & pl.col("exec_time_mean_us").is_not_null()
    state.pending = merged.filter(~complete)
    state.untimed |= bool(merged["snap_ts_ns"].null_count())
    return Chunk(
        tables={"collective_buckets": _rows(merged.filter(complete), gpu_uuid)},
        quarantine=quarantine_frame(source, pl.concat(
            [parsed.bad, bad.select("line_no", "line", "reason")], how="vertical")),
        lines=lines.height,
        skipped=parsed.skipped + int(lines["is_marker"].sum()) + samples.height - buckets.height,
        bytes_read=bytes_read,
    )


def _bucket_columns(samples: pl.DataFrame, identity: IdentityMap) -> pl.DataFrame:
    """The label set of each sample as typed columns (raw label text kept for the checks)."""
    is_p2p = pl.col("name").is_in(P2P_METRICS)
    op_raw = pl.when(is_p2p).then(label(samples, "p2p_operation")) \
        .otherwise(label(samples, "collective"))
    size = label(samples, "message_size").str.extract_groups(_SIZE_RANGE) \
        .struct.rename_fields(["_low", "_high", "_unit"])
    algo_proto = label(samples, "algo_proto")
    return samples.with_columns(
        op_raw.alias("_op"),
        label(samples, "message_size").alias("_size"),
        label(samples, "gpu").alias("_gpu"),
        label(samples, "nranks").alias("_nranks"),
        label(samples, "node").alias("_node"),
        label(samples, "coll_sn").alias("_coll_sn"),
        size.alias("_range"),
    ).unnest("_range").with_columns(
        _unknown_as_null(label(samples, "slurm_job_id")).alias("slurm_job_id"),
        identity.host(pl.col("_node")).alias("host"),
        pl.col("_gpu").str.extract(r"^GPU(\d+)$", 1).cast(pl.Int32, strict=False)
        .alias("cuda_dev"),
        _unknown_as_null(label(samples, "comm_name")).alias("comm_name"),
        label(samples, "n_nodes").cast(pl.Int32, strict=False).alias("n_nodes"),
        pl.col("_nranks").cast(pl.Int32, strict=False).alias("nranks"),
        pl.when(is_p2p).then(pl.lit("p2p")).otherwise(pl.lit("collective")).alias("kind"),
        nccl_names.op_name(pl.col("_op")).fill_null(pl.col("_op").str.to_lowercase())
        .alias("op"),
        *_size_bounds(),
        _unknown_as_null(algo_proto.str.extract(r"^(.*)_[^_]*$", 1)).str.to_lowercase()
        .alias("algorithm"),
        _unknown_as_null(algo_proto.str.extract(r"_([^_]*)$", 1)).str.to_lowercase()
        .alias("protocol"),
        label(samples, "version").alias("inspector_version"),
    )


def _size_bounds() -> list[pl.Expr]:
    """``320-321MB`` -> [320 MiB, 321 MiB); ``0B`` (a single number) -> [0, 1) of its unit."""
    unit = pl.col("_unit").replace_strict(SIZE_UNIT_BYTES, default=None, return_dtype=pl.Int64)
    low = pl.col("_low").cast(pl.Int64, strict=False)
    high = pl.coalesce(pl.col("_high").cast(pl.Int64, strict=False), low + 1)
    return [(low * unit).alias("bytes_low"), (high * unit).alias("bytes_high")]


def _unknown_as_null(text: pl.Expr) -> pl.Expr:
    """The Inspector prints ``unknown`` for a missing job id, host, comm name, algorithm or
    protocol."""
    return pl.when(text != "unknown").then(text)


def _reason() -> pl.Expr:
    """Why a bucket sample cannot be read (null when it can)."""
    return (
        pl.when(pl.col("_coll_sn").is_not_null())
        .then(pl.lit("per-op layout of the NCCL 2.28 Inspector (coll_sn label) is not read; "
                     "use its JSON Lines output"))
        .when(pl.col("_node").is_null() | pl.col("_gpu").is_null() | pl.col("_nranks").is_null()
              | pl.col("_op").is_null() | pl.col("_size").is_null())
        .then(pl.lit("sample without node, gpu, nranks, collective / p2p_operation or "
                     "message_size label"))
        .when(pl.col("cuda_dev").is_null())
        .then(pl.format("gpu label {} is not GPU<index>", pl.col("_gpu")))
        .when(pl.col("nranks").is_null())
        .then(pl.format("nranks label {} is not an integer", pl.col("_nranks")))
        .when(pl.col("bytes_low").is_null() | (pl.col("bytes_high") <= pl.col("bytes_low")))
        .then(pl.format("message_size {} is not <low>-<high><B|KB|MB|GB|TB>", pl.col("_size")))
    )


def _merge_pairs(partial: pl.DataFrame) -> pl.DataFrame:
    """One row per label set: the bandwidth and time samples side by side (a series repeated
    inside one snapshot keeps its last value)."""
    return partial.group_by(KEY, maintain_order=True).agg(
        pl.col("busbw_geomean_gbs", "exec_time_mean_us").drop_nulls().last(),
        pl.col("bytes_high").last(),
    )


def _rows(merged: pl.DataFrame, gpu_uuid: str | None) -> pl.DataFrame:
    """Canonical rows. The Inspector prints bandwidth 0 for a bucket none of whose ops had a
    positive bandwidth (its geometric mean skips them): that is no measurement, so null."""
    return schema.conform("collective_buckets", merged.rename({"snap_ts_ns": "ts_ns"}).with_columns(
        pl.lit(None, pl.String).alias("job"),
        pl.lit(gpu_uuid, pl.String).alias("gpu_uuid"),
        pl.when(pl.col("busbw_geomean_gbs") > 0).then("busbw_geomean_gbs")
        .alias("busbw_geomean_gbs"),
    ))


def _flush_pending(state: _State, gpu_uuid: str | None) -> dict[str, pl.DataFrame]:
    """Buckets still missing a sample at the end of the file, written with that value null."""
    if state.pending is None or state.pending.height == 0:
        return {}
    return {"collective_buckets": _rows(state.pending, gpu_uuid)}


def _notes(state: _State) -> list[str]:
    notes = []
    if state.pending is not None and state.pending.height:
        notes.append(f"{state.pending.height} buckets have only one of bandwidth and execution "
                     "time (file cut while the Inspector rewrote it?); the other is null")
    if state.other_metrics:
        notes.append("skipped other NCCL metrics: " + ", ".join(sorted(state.other_metrics)))
    if state.untimed:
        notes.append("the file has no time (no '# ts=' marker, none in its name): ts_ns is "
                      "null; pass --option ts=<dump time> to place it")
    return notes


READERS = [NcclInspectorPromReader()]

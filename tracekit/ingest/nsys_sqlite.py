"""Nsight Systems traces exported as SQLite (``nsys export --type sqlite``).

An export is one database per report (one per rank with ``-o report_%q{RANK}``, or one for every
process a node's ``nsys profile`` launched). Its tables are created lazily and their columns
accreted over versions, so only what the analysis needs is asked for, and a table or column
that is absent leaves its canonical column null:

* ``CUPTI_ACTIVITY_KIND_KERNEL`` (``start``, ``end``, ``deviceId``, ``streamId``,
  ``correlationId``, ``globalPid``, ``shortName`` -> ``StringIds``): NCCL kernels become
  ``collectives`` timed on the GPU (``exec_start_ns`` / ``exec_end_ns``), every other kernel,
  with ``CUPTI_ACTIVITY_KIND_MEMCPY`` / ``_MEMSET``, a row of ``op_traces``;
* ``CUPTI_ACTIVITY_KIND_RUNTIME`` (``start``, ``correlationId``, ``globalTid``): the host call
  that launched each activity (``t_launch_ns``; a collective's issue time ``t_start_ns``);
* ``NVTX_EVENTS`` ranges (``text`` or ``textId``, ``eventType`` 59 / 60): ``ProfilerStep#N``
  (``torch.autograd.profiler.emit_nvtx``) or ``iteration N`` markers become ``iterations``;
* ``TARGET_INFO_GPU`` / ``TARGET_INFO_CUDA_DEVICE``: the ``gpus``;
* ``TARGET_INFO_SESSION_START_TIME.utcEpochNs``: timestamps are nanoseconds from the session
  start, so this makes them Unix times comparable across ranks' files;
* ``TARGET_INFO_SYSTEM_ENV`` (``Hostname``): the host.

An NCCL kernel does not name its communicator: the calls of one CUDA stream are taken as one
communicator (``comm`` ``stream:<id>``; ProcessGroupNCCL gives each process group its own
stream, created in the same order on every rank), numbered in order (``seq``). Kernels are read
in batches ordered by start, so a large export streams with bounded memory; an activity
without timestamps (CUPTI writes 0 for both when it could not collect them) or ending before
it starts is quarantined with its table and rowid.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import polars as pl

from tracekit.core import schema
from tracekit.core.errors import InputError
from tracekit.ingest.base import Chunk, Reader, Source

SQLITE_MAGIC = b"SQLite format 3\x00"
NSYS_TABLES = (b"CUPTI_ACTIVITY_KIND_", b"NVTX_EVENTS", b"TARGET_INFO_SESSION_START_TIME")
"""Any of these in the schema page marks an Nsight Systems export."""

ROWS_PER_BATCH = 500_000
"""Kernels fetched and parsed at a time: a batch's frames take ~100 MB."""

NVTX_RANGES = (59, 60)
"""``NVTX_EVENTS.eventType`` of push/pop and start/end ranges (``ENUM_NSYS_EVENT_TYPE``)."""

GLOBAL_ID = 0x1000000
"""``globalTid`` / ``globalPid`` pack the process id as ``id / 0x1000000 % 0x1000000`` (the
export documentation's 'Serialized process and thread identifiers')."""

ITERATION_RANGE = r"^(?:ProfilerStep#|(?i:iteration|iter|step)[ _#:=]*)(\d+)$"
"""NVTX range names taken as iterations, the number in the group; ``--option
iteration_range=REGEX`` replaces it."""

NCCL_OPS = {"AllReduce": "allreduce", "AllGather": "allgather",
            "ReduceScatter": "reducescatter", "Broadcast": "broadcast", "Reduce": "reduce",
            "SendRecv": "sendrecv", "Send": "send", "Recv": "recv", "AllToAll": "alltoall",
            "AlltoAll": "alltoall", "Gather": "gather", "Scatter": "scatter"}
"""Operation in an NCCL kernel name -> tracekit op (``sendrecv``: one kernel serves both)."""

_NCCL_OP_NAMES = "|".join(sorted(NCCL_OPS, key=len, reverse=True))
NCCL_KERNEL = re.compile(rf"^nccl(?:Dev)?Kernel_([A-Za-z]+)|^nccl({_NCCL_OP_NAMES})\w*Kernel")
"""NCCL kernel names: ``ncclDevKernel_AllReduce_Sum_f32_RING_LL`` (2.12+),
``ncclKernel_AllReduce_RING_LL_Sum_float`` (2.7-2.11), ``ncclAllReduceRingLLKernel_sum_f32``
(older); a group is the operation."""

NCCL_DTYPES = (("bf16", "bfloat16"), ("__nv_bfloat16", "bfloat16"), ("f16", "float16"),
               ("half", "float16"), ("f32", "float32"), ("float", "float32"),
               ("f64", "float64"), ("double", "float64"), ("f8e4m3", "float8e4m3"),
               ("f8e5m2", "float8e5m2"), ("i8", "int8"), ("int8_t", "int8"),
               ("u8", "uint8"), ("uint8_t", "uint8"), ("i32", "int32"), ("int32_t", "int32"),
               ("u32", "uint32"), ("uint32_t", "uint32"), ("i64", "int64"),
               ("int64_t", "int64"), ("u64", "uint64"), ("uint64_t", "uint64"))
"""Element type as a name token (``_f32_``, ``_float``) -> tracekit dtype."""

COPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
              8: "DtoD", 9: "HtoH", 10: "PtoP"}
"""``CUpti_ActivityMemcpyKind`` -> the suffix Kineto names copies with (``Memcpy HtoD``)."""

RANK_IN_NAME = re.compile(r"(\d+)(?:\.\w+)*$")

_KERNEL_SCHEMA = {"rowid": pl.Int64, "start": pl.Int64, "end": pl.Int64, "device": pl.Int64,
                  "stream": pl.Int64, "pid": pl.Int64, "name": pl.String,
                  "launch": pl.Int64, "category": pl.String}


class NsysSqliteReader(Reader):
    format = "nsys-sqlite"
    version = "1"
    tables = ("collectives", "op_traces", "iterations", "gpus")
    priority = 20
    description = "Nsight Systems export (nsys export --type sqlite): kernels, NVTX, GPUs"
    options = ("rank", "iteration_range")

    def sniff(self, source: Source) -> bool:
        head = source.head
        return head.startswith(SQLITE_MAGIC) and any(name in head for name in NSYS_TABLES)

    def read(self, source: Source, options: dict[str, str]) -> Iterator[Chunk]:
        pattern = _iteration_pattern(options.get("iteration_range", ITERATION_RANGE), source)
        with _database(source) as db:
            tables = _columns(db)
            if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables and "NVTX_EVENTS" not in tables:
                raise InputError("an Nsight Systems export without kernels or NVTX ranges "
                                 "(profile with --trace=cuda,nvtx)", source.name)
            epoch = _session_start(db, tables)
            processes = _processes(db, tables)
            ranks = _ranks(processes, source, options)
            host = _host(db, tables)
            nvtx, nvtx_rows, bad_nvtx = _iterations(db, tables, pattern, epoch, ranks)
            notes = [] if epoch else ["no TARGET_INFO_SESSION_START_TIME: times are from the "
                                      "session start, not Unix times"]
            if processes.height > 1 and "rank" not in options:
                notes.append(f"{processes.height} processes in one export: ranks numbered "
                             "by CUDA device from 0 (give the first with --option rank=N)")
            yield Chunk(tables={"iterations": nvtx, "gpus": _gpus(db, tables, ranks, host)},
                        quarantine=_quarantine(source, "NVTX_EVENTS", bad_nvtx),
                        lines=nvtx_rows, skipped=nvtx_rows - nvtx.height - bad_nvtx.height,
                        derived=0, bytes_read=source.size, notes=notes)
            yield from _activities(db, tables, source, epoch, ranks, host, nvtx)


@contextmanager
def _database(source: Source) -> Iterator[sqlite3.Connection]:
    """The export opened read-only: the file itself, or a temporary copy of an archive
    member (SQLite reads files, not streams)."""
    path, copy = Path(source.name), None
    if "!" in source.name or not path.is_file():
        copy = tempfile.NamedTemporaryFile(suffix=".sqlite", delete=False)  # noqa: SIM115
        with source.open() as stream, copy:
            shutil.copyfileobj(stream, copy)
        path = Path(copy.name)
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
        try:
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            yield db
        except sqlite3.DatabaseError as error:
            raise InputError(f"not a readable SQLite database: {error}", source.name) from None
        finally:
            db.close()
    finally:
        if copy is not None:
            Path(copy.name).unlink(missing_ok=True)


def _iteration_pattern(text: str, source: Source) -> re.Pattern:
    try:
        pattern = re.compile(text)
    except re.error as error:
        raise InputError(f"--option iteration_range={text!r} is not a regular expression "
                         f"({error})", source.name) from None
    if pattern.groups != 1:
        raise InputError(f"--option iteration_range={text!r} needs one group (the iteration "
                         "number)", source.name)
    return pattern


def _columns(db: sqlite3.Connection) -> dict[str, set[str]]:
    """Every table of the export with its column names."""
    names = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    return {name: {row[1] for row in db.execute(f'PRAGMA table_info("{name}")')}
            for name in names}


def _query(db: sqlite3.Connection, sql: str, schema_: dict[str, pl.DataType]) -> pl.DataFrame:
    rows = db.execute(sql).fetchall()
    return pl.DataFrame(rows, schema=schema_, orient="row")


def _session_start(db: sqlite3.Connection, tables: dict[str, set[str]]) -> int:
    if "utcEpochNs" not in tables.get("TARGET_INFO_SESSION_START_TIME", set()):
        return 0
    row = db.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def _host(db: sqlite3.Connection, tables: dict[str, set[str]]) -> str | None:
    if not {"name", "value"} <= tables.get("TARGET_INFO_SYSTEM_ENV", set()):
        return None
    row = db.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname'"
                     ).fetchone()
    return str(row[0]).split(".")[0] if row and row[0] else None


def _pid(column: str) -> str:
    return f"({column} / {GLOBAL_ID}) % {GLOBAL_ID}"


def _processes(db: sqlite3.Connection, tables: dict[str, set[str]]) -> pl.DataFrame:
    """pid and GPU id (``deviceId``) of each process that ran kernels, in device order."""
    columns = tables.get("CUPTI_ACTIVITY_KIND_KERNEL", set())
    if not {"globalPid", "deviceId"} <= columns:
        return pl.DataFrame({"pid": [0], "device": [None]},
                            schema={"pid": pl.Int64, "device": pl.Int64})
    return _query(db, f"SELECT {_pid('globalPid')} AS pid, min(deviceId) AS device FROM "
                      "CUPTI_ACTIVITY_KIND_KERNEL GROUP BY pid ORDER BY device, pid",
                  {"pid": pl.Int64, "device": pl.Int64})


def _ranks(processes: pl.DataFrame, source: Source, options: dict[str, str]) -> pl.DataFrame:
    """pid -> rank: the ``rank`` option (the first rank of a multi-process export), else the
    number ending a one-process file's name (``report_3.sqlite``), else 0-based in device
    order."""
    if "rank" in options:
        try:
            first = int(options["rank"])
        except ValueError:
            raise InputError(f"--option rank={options['rank']!r} is not a whole number",
                             source.name) from None
    else:
        found = RANK_IN_NAME.search(source.file_name.split(".")[0])
        first = int(found.group(1)) if found and processes.height == 1 else 0
    return processes.with_row_index("rank", offset=first).with_columns(
        pl.col("rank").cast(pl.Int32))


def _iterations(db: sqlite3.Connection, tables: dict[str, set[str]], pattern: re.Pattern,
                epoch: int, ranks: pl.DataFrame) -> tuple[pl.DataFrame, int, pl.DataFrame]:
    """Iteration ranges per rank, the NVTX rows read, and the iteration ranges refused
    (rowid, reason, raw) for having no end."""
    columns = tables.get("NVTX_EVENTS", set())
    empty = pl.DataFrame(schema={"rowid": pl.Int64, "reason": pl.String, "raw": pl.String})
    if not {"start", "end", "eventType"} <= columns:
        return schema.ITERATIONS.empty(), 0, empty
    text = "n.text" if "text" in columns else "NULL"
    if "textId" in columns and "StringIds" in tables:
        text = f"coalesce({text}, s.value)"
        join = "LEFT JOIN StringIds s ON s.id = n.textId"
    else:
        join = ""
    pid = _pid("n.globalTid") if "globalTid" in columns else "0"
    ranges = ", ".join(map(str, NVTX_RANGES))
    events = _query(db, f"SELECT n.rowid, n.start, n.end, {pid}, {text} FROM NVTX_EVENTS n "
                        f"{join} WHERE n.eventType IN ({ranges})",
                    {"rowid": pl.Int64, "start": pl.Int64, "end": pl.Int64, "pid": pl.Int64,
                     "text": pl.String})
    counted = db.execute("SELECT count(*) FROM NVTX_EVENTS").fetchone()[0]
    steps = events.with_columns(
        pl.col("text").str.extract(pattern.pattern, 1).cast(pl.Int64, strict=False)
        .alias("iteration")).filter(pl.col("iteration").is_not_null())
    unended = (pl.col("end").is_null() | (pl.col("end") < pl.col("start")))
    bad = steps.filter(unended).select(
        "rowid", pl.lit("iteration range without an end (the capture stopped inside it?)")
        .alias("reason"), pl.format("{} start={} end={}", "text", "start", "end").alias("raw"))
    steps = steps.filter(~unended)
    if ranks.height == 1:  # one process: its ranges wherever the NVTX thread ids point
        steps = steps.with_columns(pl.lit(ranks["rank"][0]).alias("rank"))
    else:
        steps = steps.join(ranks.select("pid", "rank"), on="pid", how="inner")
    frame = steps.sort("rank", "iteration", "start").unique(
        ["rank", "iteration"], keep="first", maintain_order=True).select(
        pl.lit(None, dtype=pl.String).alias("job"), pl.col("rank").cast(pl.Int32), "iteration",
        (pl.col("start") + epoch).alias("t_start_ns"), (pl.col("end") + epoch).alias("t_end_ns"),
        ((pl.col("end") - pl.col("start")) / 1e9).alias("duration_s"),
        pl.lit("framework").alias("source"), pl.lit("ok").alias("quality"))
    return schema.conform("iterations", frame), counted, bad


def _gpus(db: sqlite3.Connection, tables: dict[str, set[str]], ranks: pl.DataFrame,
          host: str | None) -> pl.DataFrame:
    """Each rank's GPUs from TARGET_INFO_GPU, ``used`` for the one its kernels ran on. The
    CUDA index and UUID are the process's own where TARGET_INFO_CUDA_DEVICE maps them, else
    the GPU id."""
    columns = tables.get("TARGET_INFO_GPU", set())
    if "id" not in columns:
        return schema.GPUS.empty()
    wanted = {"name": ("name", pl.String), "totalMemory": ("memory_bytes", pl.Int64),
              "smCount": ("sm_count", pl.Int32), "uuid": ("gpu_uuid", pl.String),
              "busLocation": ("bus_id", pl.String)}
    present = {c: v for c, v in wanted.items() if c in columns}
    gpus = _query(db, "SELECT id" + "".join(f", {c}" for c in present) + " FROM TARGET_INFO_GPU",
                  {"device": pl.Int64, **dict(present.values())})
    gpus = gpus.unique("device", keep="first", maintain_order=True).with_columns(
        pl.col(c).str.to_lowercase() for c in ("bus_id",) if c in gpus.columns)
    per_rank = ranks.select("rank", "pid", pl.col("device").alias("used_device")).join(
        gpus, how="cross")
    cuda = tables.get("TARGET_INFO_CUDA_DEVICE", set())
    if {"gpuId", "cudaId", "pid"} <= cuda:
        uuid = "uuid" if "uuid" in cuda else "NULL"
        mapping = _query(db, f"SELECT gpuId, cudaId, pid, {uuid} FROM TARGET_INFO_CUDA_DEVICE",
                         {"device": pl.Int64, "cuda_dev": pl.Int64, "pid": pl.Int64,
                          "cuda_uuid": pl.String})
        per_rank = per_rank.join(mapping.unique(["device", "pid"]), on=["device", "pid"],
                                 how="left")
    else:
        per_rank = per_rank.with_columns(pl.lit(None, dtype=pl.Int64).alias("cuda_dev"),
                                         pl.lit(None, dtype=pl.String).alias("cuda_uuid"))
    if "gpu_uuid" not in per_rank.columns:
        per_rank = per_rank.with_columns(pl.lit(None, dtype=pl.String).alias("gpu_uuid"))
    frame = per_rank.with_columns(
        pl.lit(None, dtype=pl.String).alias("job"), pl.lit(host, dtype=pl.String).alias("host"),
        pl.col("cuda_dev").fill_null(pl.col("device")).cast(pl.Int32),
        pl.coalesce(pl.col("gpu_uuid").replace("", None), pl.col("cuda_uuid").replace("", None))
        .alias("gpu_uuid"),
        (pl.col("device") == pl.col("used_device")).fill_null(False).alias("used"),
    ).drop("pid", "device", "used_device", "cuda_uuid")
    return schema.conform("gpus", frame.sort("rank", "cuda_dev"))


def _activities(db: sqlite3.Connection, tables: dict[str, set[str]], source: Source,
                epoch: int, ranks: pl.DataFrame, host: str | None,
                iterations: pl.DataFrame) -> Iterator[Chunk]:
    """Kernels, copies and sets in batches ordered by start: NCCL kernels as collectives,
    the rest as op traces of the iteration their launch falls in; call numbers carry on from
    batch to batch."""
    steps = iterations.select("rank", pl.col("iteration").alias("step"),
                              pl.col("t_start_ns").alias("step_start_ns"),
                              pl.col("t_end_ns").alias("step_end_ns")).sort("step_start_ns")
    counts = {"comm": pl.DataFrame(schema={"pid": pl.Int64, "stream": pl.Int64,
                                           "offset": pl.UInt32}),
              "op": pl.DataFrame(schema={"rank": pl.Int32, "step": pl.Int64, "name": pl.String,
                                         "offset": pl.UInt32})}
    for table, sql in _activity_queries(tables):
        cursor = db.execute(sql)
        while batch := cursor.fetchmany(ROWS_PER_BATCH):
            frame = pl.DataFrame(batch, schema=_KERNEL_SCHEMA, orient="row")
            untimed = (pl.col("start").fill_null(0) <= 0) | pl.col("end").is_null() \
                | (pl.col("end") < pl.col("start"))
            bad = frame.filter(untimed).select(
                "rowid", pl.when(pl.col("start").fill_null(0) <= 0)
                .then(pl.lit("activity without timestamps (CUPTI could not collect them)"))
                .otherwise(pl.lit("activity ends before it starts")).alias("reason"),
                pl.format("{} start={} end={} device={} stream={}", "name", "start", "end",
                          "device", "stream").alias("raw"))
            good = frame.filter(~untimed)
            # one process: all its rows, even those whose ids do not say so
            good = (good.with_columns(pl.lit(ranks["rank"][0]).alias("rank"))
                    if ranks.height == 1 else good.join(ranks.select("pid", "rank"), on="pid",
                                                        how="left"))
            good = good.with_columns(
                (pl.col("start") + epoch).alias("t_start_ns"),
                (pl.col("end") + epoch).alias("t_end_ns"),
                (pl.col("launch") + epoch).alias("t_launch_ns"))
            nccl = good.filter(pl.col("name").str.contains(NCCL_KERNEL.pattern))
            calls, counts["comm"] = _collectives(nccl, host, counts["comm"])
            ops, counts["op"] = _op_traces(good.filter(~pl.col("name").str.contains(
                NCCL_KERNEL.pattern)), steps, counts["op"])
            yield Chunk(tables={"collectives": calls, "op_traces": ops},
                        quarantine=_quarantine(source, table, bad), lines=frame.height)


def _activity_queries(tables: dict[str, set[str]]) -> Iterator[tuple[str, str]]:
    """One query per activity table present: rowid, start, end, device, stream, pid, name,
    launch (the runtime call of the same process and correlation id) and category."""
    runtime = tables.get("CUPTI_ACTIVITY_KIND_RUNTIME", set())
    strings = "StringIds" in tables
    for table, category in (("CUPTI_ACTIVITY_KIND_KERNEL", "kernel"),
                            ("CUPTI_ACTIVITY_KIND_MEMCPY", "memcpy"),
                            ("CUPTI_ACTIVITY_KIND_MEMSET", "memset")):
        columns = tables.get(table, set())
        if not {"start", "end"} <= columns:
            continue
        pid = _pid("a.globalPid") if "globalPid" in columns else "0"
        if category == "kernel":
            name_id = "shortName" if "shortName" in columns else "demangledName"
            name = (f"(SELECT value FROM StringIds WHERE id = a.{name_id})"
                    if strings and name_id in columns else "'kernel'")
        elif category == "memcpy" and "copyKind" in columns:
            name = "'Memcpy ' || CASE a.copyKind " + " ".join(
                f"WHEN {k} THEN '{v}'" for k, v in COPY_KINDS.items()) + " ELSE 'other' END"
        else:
            name = f"'{category.capitalize()}'"
        launch, join = "NULL", ""
        if {"correlationId", "globalTid", "start"} <= runtime and "correlationId" in columns:
            # SQLite indexes the runtime calls for this join by itself (automatic index)
            launch, join = "r.start", (
                "LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = a.correlationId "
                f"AND {_pid('r.globalTid')} = {pid}")
        device = "a.deviceId" if "deviceId" in columns else "NULL"
        stream = "a.streamId" if "streamId" in columns else "NULL"
        yield table, (f"SELECT a.rowid, a.start, a.end, {device}, {stream}, {pid}, {name}, "
                      f"{launch}, '{category}' FROM {table} a {join} ORDER BY a.start")


def _collectives(nccl: pl.DataFrame, host: str | None,
                 counts: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """NCCL kernels as calls, numbered per process and stream after the calls of earlier
    batches (``counts``); the counts with this batch's added."""
    op = pl.coalesce(pl.col("name").str.extract(NCCL_KERNEL.pattern, group)
                     for group in (1, 2)).replace_strict(NCCL_OPS, default=None)
    dtype = pl.lit(None, dtype=pl.String)
    for token, name in NCCL_DTYPES:
        dtype = pl.when(pl.col("name").str.contains(rf"_{re.escape(token)}(?:_|$)")).then(
            pl.lit(name)).otherwise(dtype)
    numbered = nccl.join(counts, on=["pid", "stream"], how="left").with_columns(
        (pl.col("offset").fill_null(0).cast(pl.Int64)
         + pl.int_range(pl.len()).over("pid", "stream")).alias("seq"))
    calls = numbered.select(
        pl.lit(None, dtype=pl.String).alias("job"), pl.col("rank").cast(pl.Int32),
        pl.lit(host, dtype=pl.String).alias("host"), "pid",
        pl.col("device").cast(pl.Int32).alias("cuda_dev"),
        pl.format("stream:{}", "stream").alias("comm"), op.alias("op"), "seq",
        dtype.alias("dtype"),
        pl.coalesce("t_launch_ns", "t_start_ns").alias("t_start_ns"), "t_end_ns",
        pl.col("t_start_ns").alias("exec_start_ns"), pl.col("t_end_ns").alias("exec_end_ns"),
        pl.lit("gpu").alias("exec_on"))
    added = nccl.group_by("pid", "stream").agg(pl.len().cast(pl.UInt32).alias("n"))
    counts = (pl.concat([counts, added.rename({"n": "offset"})])
              .group_by("pid", "stream").agg(pl.col("offset").sum()))
    return schema.conform("collectives", calls), counts


def _op_traces(activities: pl.DataFrame, steps: pl.DataFrame,
               counts: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Activities as op traces of the iteration whose range holds their launch (their start
    without one); those outside every iteration have a null step."""
    timed = activities.with_columns(
        pl.coalesce("t_launch_ns", "t_start_ns").alias("_at")).sort("_at")
    if steps.height:
        timed = timed.join_asof(steps, left_on="_at", right_on="step_start_ns", by="rank",
                                strategy="backward", check_sortedness=False).with_columns(
            pl.when(pl.col("_at") < pl.col("step_end_ns")).then("step"),
            pl.when(pl.col("_at") < pl.col("step_end_ns")).then("step_start_ns"))
    else:
        timed = timed.with_columns(pl.lit(None, dtype=pl.Int64).alias("step"),
                                   pl.lit(None, dtype=pl.Int64).alias("step_start_ns"))
    keys = ["rank", "step", "name"]
    numbered = timed.join(counts, on=keys, how="left", nulls_equal=True).with_columns(
        (pl.col("offset").fill_null(0).cast(pl.Int64)
         + pl.int_range(pl.len()).over(keys)).alias("seq"))
    ops = numbered.select(
        pl.lit(None, dtype=pl.String).alias("job"), pl.col("rank").cast(pl.Int32), "step",
        pl.col("name").alias("op"), "seq",
        ((pl.col("t_start_ns") - pl.col("step_start_ns")) / 1e9).alias("start_s"),
        ((pl.col("t_end_ns") - pl.col("t_start_ns")) / 1e9).alias("duration_s"),
        "t_start_ns", "category", "t_end_ns", pl.col("device").cast(pl.Int32).alias("cuda_dev"),
        "stream", "t_launch_ns")
    added = timed.group_by(keys).agg(pl.len().cast(pl.UInt32).alias("offset"))
    counts = pl.concat([counts, added]).group_by(keys).agg(pl.col("offset").sum())
    return schema.conform("op_traces", ops), counts


def _quarantine(source: Source, table: str, bad: pl.DataFrame) -> pl.DataFrame:
    """Refused rows, placed by their table and rowid (the export has no lines)."""
    return bad.select(pl.lit(f"{source.name}#{table}").alias("source"),
                      pl.col("rowid").cast(pl.Int64).alias("line_no"), "reason",
                      pl.col("raw").str.slice(0, schema.RAW_LINE_LIMIT))


READERS = [NsysSqliteReader()]

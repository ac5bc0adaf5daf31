"""The ingest loop shared by every format: walk inputs, sniff, read, write parts, record.

Each source writes its rows as parts named after its content hash (``<sha16>-<n>.<token>``, one
per :data:`PART_ROWS` rows) and its manifest record lists them, so ingesting the same bytes again
lists its new parts in place of its old ones instead of adding rows, and a new file adds only its
own parts; none is visible before the manifest that lists it is saved. Unchanged sources (same
hash, format, parser version and limits) are skipped without reading them. A file is read once:
its hash is computed while it is parsed (parts are written under hidden names and renamed once
it is known), and hashed beforehand only when an earlier ingest of this path had the same size.

One input file (a log, or an archive read member by member) is one partition: it is read and
written by :func:`_ingest_file`, on this machine or on a Dask worker (``tracekit.core.parallel``),
and only the manifest is written here. Large tables are written partitioned by rank (hive
layout, ``collectives/rank=3/<part>.parquet``, the ``rank`` column kept inside the files), so
workers write in parallel and readers skip other ranks' files.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from tracekit.core import schema
from tracekit.core.dataset import MANIFEST, Dataset, dataset_writer, source_record_key
from tracekit.core.errors import InputError, TracekitError
from tracekit.core.identity import canonical_host_column
from tracekit.core.parallel import Executor, LocalExecutor, Outcome, Report
from tracekit.ingest import jobs, registry
from tracekit.ingest.base import (
    Chunk,
    Reader,
    Source,
    cores,
    cores_shared,
    quarantine_overlong,
)
from tracekit.ingest.hosts import agree_hosts
from tracekit.ingest.limits import Limits, refuse_compressed
from tracekit.ingest.sources import gunzipped, input_files, is_archive, is_gzip, iter_sources

ProgressCallback = Callable[[str, int, int], None]
"""Called as ``progress(source_name, bytes_done_delta, rows_delta)`` while reading."""

HIVE_BY_RANK = ("collectives",)
"""Tables written one folder per rank (``rank=<N>``): the ~10^9-row tables of large jobs.
Their parts carry no Parquet min/max (:data:`~tracekit.core.dataset.NULL_COUNTS_ONLY`): the
folder names a part's rank and its footer's statistics (``tracekit.stats``: rows, time span,
ranks, hosts) its time span, which is what tracekit prunes by; polars' min/max of every
column cost 6-10 % of the CPU of ingesting a NCCL log."""

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
"""Folder value for rows without a rank, as Hive, Spark and pyarrow name it."""

FILES_AT_ONCE = 2
"""Input files the local loop ingests at the same time on two or more cores, each reading,
parsing and writing in its own thread (:func:`~tracekit.ingest.base.cores_shared`), as two
one-core workers would. One file at a time kept both cores busy only while it parsed: its last
batch of parts is encoded in one thread, and a file of one block (one per process) is read,
parsed and written in one thread, so a folder of per-rank files kept about one core busy. Two
files each with its own parse and writer threads cost a fifth more CPU and twice the memory
on two cores; one thread each cost what one file at a time did. A single input file keeps all
the threads. More than two would add memory on a 2-core machine for no core to run on."""

MANIFEST_SAVE_INTERVAL_S = 60.0
"""While partitions complete, the manifest is saved at most this often (and once at the end),
so an interrupted ingest of a large dump resumes without re-reading finished sources."""


@dataclass
class SourceSummary:
    """What one source contributed (or why it could not)."""

    path: str
    format: str | None = None
    rows: dict[str, int] = field(default_factory=dict)
    lines: int = 0
    skipped: int = 0
    quarantined: int = 0
    ranks: int = 0
    t_min_ns: int | None = None
    t_max_ns: int | None = None
    status: str = "ingested"
    """ingested, unchanged (already in the dataset), failed, or other job (a source of
    another job of the dump than the one ``--job`` picked: not kept)."""
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    step_axis: str | None = None
    """:attr:`~tracekit.ingest.base.Chunk.step_axis`"""
    host_aliases: dict[str, str] = field(default_factory=dict)
    record_key: str | None = None
    """Its manifest record's key, when it has one."""
    job_keys: list[str] = field(default_factory=list)
    """The commIds it names (:class:`~tracekit.ingest.jobs.CommEvidence`): what ties it to
    the other sources of its job."""

    @property
    def total_rows(self) -> int:
        return sum(self.rows.values())


@dataclass
class IngestSummary:
    dataset: Path
    sources: list[SourceSummary]

    @property
    def failed(self) -> list[SourceSummary]:
        return [s for s in self.sources if s.status == "failed"]


def ingest(
    paths: list[Path],
    output: Path,
    job: str | None = None,
    format: str | None = None,
    options: dict[str, str] | None = None,
    progress: ProgressCallback | None = None,
    executor: Executor | None = None,
) -> IngestSummary:
    """Ingest every file under ``paths`` into the dataset at ``output``.

    A missing path raises before anything is written. A source that cannot be read is reported
    as failed in the summary while the others complete; nothing of it is written. ``executor``
    (default: a local loop) runs the files; the dataset is the same whichever runs them.
    Options named like a field of :class:`~tracekit.ingest.limits.Limits` raise that limit.
    One ingest writes a dataset at a time (:func:`~tracekit.core.dataset.dataset_writer`).
    A dump of several jobs (:func:`~tracekit.ingest.jobs.find_jobs`) is refused, naming them,
    unless ``job`` names one: then only its sources (and those of no job in particular) are
    kept, and ``job`` is the dataset's job id as always.
    """
    options = dict(options or {})
    limits = Limits.from_options(options)
    if format:
        registry.reader_for_format(format)
    files = input_files(paths)
    with dataset_writer(output, job) as dataset:
        summaries = _ingest_files(dataset, files, format, options, limits, progress,
                                  executor or LocalExecutor())
        _keep_one_job(dataset, summaries, job, paths)
        host_notes = agree_hosts(dataset, options.get("host"))
    for summary in summaries:
        summary.notes.extend(host_notes.get(summary.path, ()))
    return IngestSummary(output, summaries)


def _keep_one_job(dataset: Dataset, summaries: list[SourceSummary], job: str | None,
                  paths: list[Path]) -> None:
    """Leave only one job's sources in the dataset: the one ``job`` names when the dump holds
    several, all of them when it holds one. Several jobs and no pick drop the records of every
    source that belongs to one of them, earlier ingests' included, and raise."""
    read = [s for s in summaries if s.status != "failed"]
    found, _ = jobs.find_jobs([s.path for s in read], {s.path: s.job_keys for s in read})
    if len(found) < 2:
        return
    picked = next((j for j in found if j.name == job), None)
    others = {path: j.name for j in found if j is not picked for path in j.sources}
    for summary in read:
        if summary.path in others:  # it contributes nothing
            summary.status, summary.rows, summary.skipped, summary.quarantined = (
                "other job", {}, 0, 0)
            summary.t_min_ns = summary.t_max_ns = None
            if picked is not None:
                summary.notes = [f"left out: a source of job {others[summary.path]}, not {job}"]
    kept = {s.record_key for s in read if s.path not in others}
    dataset.drop_sources({s.record_key for s in read if s.path in others} - kept - {None})
    dataset.save_manifest()
    if picked is None and not dataset.manifest["sources"]:
        # nothing is kept: no dataset either, so that ``--job`` may name it next time (its
        # unlisted files are invisible, and removed by the next writer of the folder)
        (dataset.path / MANIFEST).unlink()
    if picked is None:
        where = ", ".join(str(p) for p in paths)
        which = f"--job {job} is none of them; " if job else ""
        raise InputError(f"{len(found)} jobs in one dump: {jobs.describe(found)}; {which}ingest "
                         "one with --job NAME (or each into its own dataset)", where)


def _ingest_files(dataset: Dataset, files: list[Path], format: str | None,
                  options: dict[str, str], limits: Limits, progress: ProgressCallback | None,
                  executor: Executor) -> list[SourceSummary]:
    """Run the files on ``executor``, recording each source in the manifest (held by the
    caller's writer lock) as its file completes."""
    known = _records_by_file(dataset)
    at_once = min(FILES_AT_ONCE, cores(), len(files)) if executor.in_process else 1
    tasks = [_FileTask(str(file), str(dataset.path), dataset.job, format, options, limits,
                       known.get(str(file), {}), at_once) for file in files]
    last_save = time.monotonic()

    def record(outcome: Outcome) -> None:
        nonlocal last_save
        for _, source_record in outcome.value if outcome.ok else []:
            if source_record is not None:
                dataset.record_source(source_record)
        if time.monotonic() - last_save >= MANIFEST_SAVE_INTERVAL_S:
            dataset.save_manifest()
            last_save = time.monotonic()

    outcomes = executor.map_partitions(
        _ingest_file, tasks, key=lambda task: task.path, on_done=record,
        progress=None if progress is None else lambda _, info: progress(
            info["source"], info["bytes"], info["rows"]),
        at_once=at_once)
    summaries = _merge(dataset, outcomes)
    dataset.record_build("ingest", {
        **executor.description, "partitions": len(tasks),
        "failed_partitions": sum(not o.ok for o in outcomes)},
        changed=any(s.status == "ingested" for s in summaries))
    dataset.save_manifest()
    return summaries


def _records_by_file(dataset: Dataset) -> dict[str, dict[str, dict[str, Any]]]:
    """Manifest records of earlier ingests by input file (an archive's members under the
    archive), each by source key: a worker gets only what it needs to skip unchanged sources.
    One pass over the manifest, not one per file (a folder of 100,000 files into a dataset of
    as many sources compared 10^10 paths)."""
    by_file: dict[str, dict[str, dict[str, Any]]] = {}
    for record in dataset.manifest["sources"]:
        archive = record["path"].split("!", 1)[0]
        file = archive if archive != record["path"] and is_archive(archive) else record["path"]
        by_file.setdefault(file, {})[source_record_key(record)] = record
    return by_file


@dataclass(frozen=True)
class _FileTask:
    """Everything a worker needs to ingest one input file; plain values, so it ships to Dask."""

    path: str
    dataset: str
    job: str
    format: str | None
    options: dict[str, str]
    limits: Limits
    known: dict[str, dict[str, Any]]
    beside: int = 1
    """Files ingested at the same time as this one, itself included, that share its cores."""


def _ingest_file(task: _FileTask, report: Report | None = None) -> list[
        tuple[SourceSummary, dict[str, Any] | None]]:
    """Read one input file (every member of an archive) into parts; return each source's
    summary and the manifest record to add (None when nothing new was written)."""
    # a write-only view of the dataset: parts and the job id; the manifest stays with the caller
    dataset = Dataset(Path(task.dataset), {"job": task.job})
    forced = registry.reader_for_format(task.format) if task.format else None
    limits = asdict(task.limits)  # one dict for every source's record (an archive has 10^5)
    results = []

    def refused(error: TracekitError) -> None:
        """A failed source under the path its error names (an archive's member, not the
        archive: the message then starts with its own path once)."""
        path = getattr(error, "path", None) or task.path
        results.append((SourceSummary(path, status="failed", error=str(error)), None))

    try:
        with cores_shared(task.beside):
            for source in iter_sources([Path(task.path)], task.limits, refused):
                source.limits = task.limits
                results.append(_ingest_source(dataset, source, forced, task.options, limits,
                                              task.known, report))
    except TracekitError as error:  # the archive itself, or a limit of the whole archive
        refused(error)
    return results


def _merge(dataset: Dataset, outcomes: list[Outcome]) -> list[SourceSummary]:
    """Summaries in input order; manifest records added in that order, so the manifest does
    not depend on which worker finished first. A source whose bytes an earlier file of this
    ingest already had adds nothing (its parts are the same files) and is marked unchanged."""
    summaries, recorded = [], {}
    for outcome in outcomes:
        if not outcome.ok:
            summaries.append(SourceSummary(outcome.key, status="failed", error=outcome.failure))
            continue
        for summary, source_record in outcome.value:
            if source_record is not None:
                key = source_record_key(source_record)
                if key in recorded:
                    summary.status = "unchanged"
                    summary.notes.append(f"same content as {recorded[key]}")
                else:
                    recorded[key] = summary.path
                    dataset.record_source(source_record)
            summaries.append(summary)
    return summaries


def _ingest_source(
    dataset: Dataset,
    source: Source,
    forced: Reader | None,
    options: dict[str, str],
    limits: dict[str, int],
    known_records: dict[str, dict[str, Any]],
    report: Report | None,
) -> tuple[SourceSummary, dict[str, Any] | None]:
    summary = SourceSummary(source.name)
    try:
        reader = _reader_of_gzip(source, forced)
        if reader is None and is_gzip(source):
            source = gunzipped(source)
        if reader is None:
            refuse_compressed(source.head, source.name)
            reader = forced or registry.sniff(source)
        summary.format = reader.format
        known = _earlier_record(source, reader, known_records)
        if known and (known["format"], known["parser_version"], known.get("limits")) == (
                reader.format, reader.version, limits):
            summary.status = "unchanged"
            summary.rows = dict(known["rows"])
            summary.skipped, summary.quarantined = known["skipped"], known["quarantined"]
            summary.record_key = source_record_key(known)
            summary.job_keys = list(known.get("job_keys", ()))
            if report:
                report(source=source.name, bytes=source.size, rows=0)
            return summary, None
        source.hash_while_reading = True
        parts = _read_into(dataset, source, reader, options, summary, report)
        summary.record_key = reader.source_key(source)
    except TracekitError as error:
        summary.status, summary.error = "failed", str(error)
        return summary, None
    except (OSError, ValueError, pl.exceptions.PolarsError) as error:
        summary.status = "failed"
        summary.error = str(InputError(f"{type(error).__name__}: {error}", source.name))
        return summary, None
    return summary, {
        "path": source.name,
        "size": source.size,
        "sha256": source.sha256,
        "key": reader.source_key(source),
        "format": reader.format,
        "parser_version": reader.version,
        "limits": limits,
        "rows": summary.rows,
        "lines": summary.lines,
        "skipped": summary.skipped,
        "quarantined": summary.quarantined,
        "notes": summary.notes,
        **({"step_axis": summary.step_axis} if summary.step_axis else {}),
        **({"host_aliases": summary.host_aliases} if summary.host_aliases else {}),
        "job_keys": summary.job_keys,
        "parts": parts,
    }


def _reader_of_gzip(source: Source, forced: Reader | None) -> Reader | None:
    """The reader of a gzip file, where one reads gzip itself (:attr:`Reader.decompresses`)."""
    if not source.head.startswith(b"\x1f\x8b"):
        return None
    if forced is not None:
        return forced if forced.decompresses else None
    return next((r for r in registry.readers() if r.decompresses and r.sniff(source)), None)


def _earlier_record(source: Source, reader: Reader,
                    known_records: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The manifest record of an earlier ingest of these very bytes, if any. Only a record of the
    same size can match, so a new or resized file is not hashed before it is read."""
    if not any(record["size"] == source.size for record in known_records.values()):
        return None
    return known_records.get(reader.source_key(source))


def _read_into(
    dataset: Dataset,
    source: Source,
    reader: Reader,
    options: dict[str, str],
    summary: SourceSummary,
    report: Report | None,
) -> dict[str, dict[str, dict[str, Any]]]:
    """Read all chunks, writing them as parts; the parts (table -> file -> statistics) for the
    source's record, which lists them in place of its earlier ones."""
    source.names = (pl.Categorical(pl.Categories.random()) if source.size >= CODED_MIN_BYTES
                    else pl.String())
    writer = _PartWriter(dataset, source.names)
    evidence = jobs.CommEvidence()
    try:
        for chunk in quarantine_overlong(reader.read(source, options), source):
            rows = 0
            for name, frame in _chunk_tables(dataset, chunk).items():
                if frame.height == 0:
                    continue
                if name == "comms":
                    evidence.add(frame)
                writer.add(name, frame)
                summary.rows[name] = summary.rows.get(name, 0) + frame.height
                rows += frame.height
            summary.lines += chunk.lines
            summary.skipped += chunk.skipped
            summary.notes.extend(n for n in chunk.notes if n not in summary.notes)
            summary.step_axis = summary.step_axis or chunk.step_axis
            summary.host_aliases.update(chunk.host_aliases)
            if report:
                report(source=source.name, bytes=chunk.bytes_read, rows=rows)
        writer.close()
    except BaseException:
        writer.discard()
        raise
    summary.quarantined = summary.rows.pop("quarantine", 0)
    summary.job_keys = evidence.keys()
    parts = writer.publish(reader.source_key(source)[:16])
    _set_span(summary, parts)
    return parts


PART_ROWS = 1_000_000
"""A source's rows are written once this many are buffered (and at its end), not per reader
chunk: with the hive layout by rank, per-chunk writes made one small file per rank per 16 MiB."""

CODED_COLUMNS = ("job", "host", "comm", "op", "dtype")
"""String columns of few distinct values (the job, host names, communicator handles, operation
and element type names) that a source's rows hold as Categorical codes from the reader to the
parts, which store them as String (:meth:`~tracekit.core.dataset.Dataset.write_file`): each
value is hashed once, by the cast, where the Parquet writer hashed a String column twice (its
distinct-count estimate and its dictionary), and the rank split gathers codes instead of
strings."""

CODED_MIN_BYTES = 1 << 20
"""A source must have this many bytes for its names to be coded: the codes cost a source's
writer 0.2 ms more (the cast's and the categories' fixed costs) and save 20-60 ns a row (NCCL,
hook CSV rows), so a source of fewer than 3,000-10,000 rows loses; a MiB holds 5,000-8,000 of
them. A smaller source (one per process, an archive's member) keeps its names as String."""

PART_NAME = "{prefix}-{n:05d}.{token}"
"""File name (less ``.parquet``) of a source's part ``n``: ``prefix`` is 16 hex digits of its
content hash, or a hidden ``.staged`` until the hash is known; ``token`` is this ingest's, so
no listed file is ever overwritten."""


class _PartWriter:
    """Buffers a source's rows (split by rank folder as they come) and writes them every
    :data:`PART_ROWS` rows as staged parts, in a background thread: Parquet encoding of one
    batch overlaps parsing the next, so ingest keeps both cores busy (on one core,
    :func:`~tracekit.ingest.base.cores`, in the caller's thread). The last batch (all of a
    small source) is written in the caller's thread, which has nothing else left to do, while
    the writer thread may still write the batch before.
    :meth:`publish` gives the parts their final names ``<prefix>-<n>`` once all are on disk."""

    def __init__(self, dataset: Dataset, names: pl.DataType):
        self.dataset = dataset
        self.names = names
        """The dtype of the source's :data:`CODED_COLUMNS` (:attr:`Source.names`): Categorical
        with the source's own categories, freed with it (the global ones would keep every
        communicator handle of every source of the process), or String."""
        self.token = uuid.uuid4().hex[:12]
        self.pending: dict[tuple[str, str], list[pl.DataFrame]] = {}
        """Frames not yet written, by (table, folder inside the table: ``rank=3/`` or empty)."""
        self.buffered_rows = 0
        self.batches = 0
        self.staged: list[list[tuple[str, str, dict[str, Any]]]] = []
        """(table, file, statistics) of every part written under its staged name, a list per
        batch in batch order (two batches may be written at once), so the record lists the
        parts in the same order whichever thread finished first."""
        self.background: ThreadPoolExecutor | None = None
        self.writing: Future[None] | None = None

    def add(self, name: str, frame: pl.DataFrame) -> None:
        columns = frame.schema  # a new Schema object at each call
        if coded := [column for column in CODED_COLUMNS
                     if column in columns and columns[column] != self.names]:
            frame = frame.with_columns(pl.col(coded).cast(self.names))
        for folder, piece in _layout(name, frame):
            self.pending.setdefault((name, folder), []).append(piece)
        self.buffered_rows += frame.height
        if self.buffered_rows >= PART_ROWS:
            if cores() <= 1:  # nothing to overlap with
                self._write(*self._take())
                return
            self._wait()  # the batch before is on disk: at most two batches in memory
            self.background = self.background or ThreadPoolExecutor(
                1, thread_name_prefix="tracekit-part-writer")
            self.writing = self.background.submit(self._write, *self._take())

    def _take(self) -> tuple[dict[tuple[str, str], list[pl.DataFrame]], int,
                             list[tuple[str, str, dict[str, Any]]]]:
        """The buffered frames, their part number and the list their staged parts go to,
        leaving the buffer empty."""
        batch, n, staged = self.pending, self.batches, []
        self.pending, self.buffered_rows, self.batches = {}, 0, n + 1
        self.staged.append(staged)
        return batch, n, staged

    def _write(self, batch: dict[tuple[str, str], list[pl.DataFrame]], n: int,
               staged: list[tuple[str, str, dict[str, Any]]]) -> None:
        for (name, folder), frames in batch.items():
            stem = folder + PART_NAME.format(prefix=".staged", n=n, token=self.token)
            staged.append((name, *self.dataset.write_file(
                name, pl.concat(frames), stem, min_max=name not in HIVE_BY_RANK)))

    def _wait(self) -> None:
        if self.writing is not None:
            writing, self.writing = self.writing, None
            writing.result()

    def close(self) -> None:
        """Write what is buffered and wait until every staged part is on disk. The last batch
        is written while the writer thread finishes the one before, not after it: once the
        reader is done, that keeps a second core busy for the end of the source."""
        try:
            if self.pending:
                self._write(*self._take())
            self._wait()
        finally:
            self._stop()

    def discard(self) -> None:
        """Remove every staged part (the source failed: nothing of it is kept)."""
        self._stop()
        for name, file, _ in itertools.chain.from_iterable(self.staged):
            (self.dataset.path / name / file).unlink(missing_ok=True)

    def _stop(self) -> None:
        if self.background is not None:
            self.background.shutdown(cancel_futures=True)

    def publish(self, prefix: str) -> dict[str, dict[str, dict[str, Any]]]:
        """Rename the staged parts to ``<prefix>-<n>.<token>``; their files and statistics by
        table."""
        written: dict[str, dict[str, dict[str, Any]]] = {}
        for name, file, stats in itertools.chain.from_iterable(self.staged):
            final = file.replace(".staged-", f"{prefix}-", 1)
            (self.dataset.path / name / file).replace(self.dataset.path / name / final)
            written.setdefault(name, {})[final] = stats
        return written


def _layout(name: str, frame: pl.DataFrame) -> list[tuple[str, pl.DataFrame]]:
    """Which folder of table ``name`` a chunk's rows go to: the table's own, or one per rank.
    A chunk of interleaved ranks is put in rank order (:func:`_rank_order`) and cut into
    slices: on chunks of 16 ranks with coded names, 0.75-0.85x the CPU of polars' stable sort
    and about that of ``partition_by`` (0.8-1.0x). Splitting each chunk as it comes costs the
    same as splitting the buffered rows at once, and a chunk already in rank order (one
    per-process file) is not copied."""
    if name not in HIVE_BY_RANK:
        return [("", frame)]
    if not frame["rank"].is_sorted():
        frame = frame.gather(_rank_order(frame["rank"]))
    pieces, start = [], 0
    for length, rank in frame["rank"].rle().struct.unnest().iter_rows():
        pieces.append((f"rank={HIVE_NULL if rank is None else rank}/",
                       frame.slice(start, length)))
        start += length
    return pieces


def _rank_order(rank: pl.Series) -> np.ndarray:
    """The positions that put ``rank`` in order, stable, rows without a rank first. A chunk's
    ranks span far fewer than 2^16 values, and numpy's stable sort of 16-bit keys is a radix
    sort: 0.2x the CPU of polars' arg sort of the Int32 column (its stable sort merge-sorts
    (position, rank) pairs)."""
    below = (rank.min() or 0) - 1
    keys = (rank.fill_null(below) - below).to_numpy()
    if keys.max() < 2**16:
        keys = keys.astype(np.uint16)
    return np.argsort(keys, kind="stable")


def _chunk_tables(dataset: Dataset, chunk: Chunk) -> dict[str, pl.DataFrame]:
    """The chunk's frames with the dataset's job id in every ``job`` column: a dataset holds one
    job, so rows from a source that names its job differently (a synthesized job's labels, a
    renamed dump) still join the rest of the dataset; and hosts spelled one way in every table
    (:func:`~tracekit.core.identity.canonical_host_column`)."""
    frames = dict(chunk.tables)
    if chunk.quarantine is not None:
        frames["quarantine"] = chunk.quarantine
    for name, frame in frames.items():
        if "job" in schema.table(name).schema and "job" in frame.columns:
            frame = frame.with_columns(pl.lit(dataset.job, pl.String).alias("job"))
        frames[name] = frame if name == "quarantine" else canonical_host_column(frame)
    return frames


def _set_span(summary: SourceSummary, parts: dict[str, dict[str, dict[str, Any]]]) -> None:
    """The source's time span and rank count, from its parts' statistics (computed for their
    footers anyway): counting them again per chunk cost 0.5-0.7 ms per 16 MiB block."""
    stats = [part for name, files in parts.items() if name != "quarantine"
             for part in files.values()]
    ranks = {rank for part in stats for rank in part.get("ranks", ())}
    lows = [part["t_min_ns"] for part in stats if part.get("t_min_ns") is not None]
    highs = [part["t_max_ns"] for part in stats if part.get("t_max_ns") is not None]
    summary.ranks = len(ranks)
    summary.t_min_ns, summary.t_max_ns = min(lows, default=None), max(highs, default=None)

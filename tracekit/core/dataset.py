"""A dataset: one folder per job holding its canonical tables as Parquet and a manifest.

Layout::

    DATASET/
      manifest.json            job id, sources, the parts of each table, tracekit version
      collectives/             one folder per table
        <part>.<token>.parquet one or more parts (one per ingested source, or one per rank)

A table is the union of the parts the manifest lists (``parts``: table -> file -> owner, the
source key or ``<table>/<part>`` that wrote it). Every file is written under a new name, so no
listed file ever changes; writing a source or a part again lists its new files in place of its
old ones. The manifest is replaced by one rename, so a source (or a stage's tables) becomes
visible with its record in one step, or not at all: files it does not list are invisible, and
the next writer removes them (:func:`writer_lock`) once no reader of the manifest before can
need them. Parts let independent workers write in parallel.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import io
import json
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.core import schema
from tracekit.core.errors import InputError

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
SAMPLE_SECONDS = "sample-seconds"
"""A source record's ``step_axis`` where its iteration numbers are the seconds each step time
was sampled at (a step table with a row per worker every few seconds), not iterations."""
LOCK_WAIT_S = 10.0
"""How long a second writer waits for the first before refusing: long enough for a short
ingest or a manifest save to finish, short enough that a user is not left guessing."""
TEMPORARY_PREFIX = ".tmp-"
"""Hidden names of :func:`atomic_path`'s temporaries: under the writer lock, any left are a
dead run's and are removed."""
PARQUET_ZSTD_LEVEL = 1
"""Parts are zstd-compressed at level 1: as small as the default level on collective rows, for
less CPU; lz4 and snappy save a little CPU for much larger files (most of the write is
encoding, not compression; docs/ingest-performance.md)."""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@contextmanager
def atomic_path(final: Path) -> Iterator[Path]:
    """Yield a hidden temporary path beside ``final``; rename it onto ``final`` on success and
    remove it on failure, so readers only ever see complete files."""
    final.parent.mkdir(parents=True, exist_ok=True)
    temporary = final.with_name(f".tmp-{uuid.uuid4().hex}-{final.name}")
    try:
        yield temporary
        os.replace(temporary, final)
    finally:
        if temporary.exists():
            temporary.unlink()


@contextmanager
def writing_to(path: Path) -> Iterator[None]:
    """Turn a failed write under ``path`` (read-only target, full disk) into one line naming
    it: a partial write is a hidden temporary (:func:`atomic_path`), so the dataset as it was
    stays readable."""
    try:
        yield
    except OSError as error:
        reason = "the disk is full" if error.errno == errno.ENOSPC else (
            error.strerror or str(error))
        raise InputError(f"cannot write the dataset: {reason}", error.filename
                         or str(path)) from None


@contextmanager
def writer_lock(path: Path, wait_s: float | None = None) -> Iterator[None]:
    """Hold the dataset's writer lock (``flock`` on the dataset folder itself, whose inode
    never changes, unlike the manifest's, and which leaves no file behind): one writer at a
    time, so two ingests cannot each save a manifest without the other's sources. The kernel
    drops the lock when its process dies (``kill -9``), so a dead run never blocks the next.
    Once the lock is held, files the manifest does not list (a dead run's, or those the last
    writer replaced) are removed (:func:`_remove_unlisted`)."""
    with writing_to(path):
        folder = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    wait_s = LOCK_WAIT_S if wait_s is None else wait_s
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(folder, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise InputError(f"another tracekit run has been writing this dataset for "
                                     f"over {wait_s:g} s; wait for it to finish and run this "
                                     "again", str(path)) from None
                time.sleep(0.1)
        _remove_unlisted(path)
        yield
    finally:
        os.close(folder)  # releases the lock


def _remove_unlisted(path: Path) -> None:
    """Remove the temporaries in ``path`` and the files in its tables that its manifest does not
    list: parts of dead runs and the files a writer replaced, which the last writer kept for
    readers that had opened the manifest before it. One listing of the dataset per writer, not
    per source. A dataset without a parts list (older versions) loses only temporaries. Other
    folders (a stage's scratch, ``.attribute-*``, in use by a run that holds no lock yet) are
    left alone."""
    try:
        listed = json.loads((path / MANIFEST).read_text()).get("parts")
    except (OSError, json.JSONDecodeError):
        listed = None
    for folder, subfolders, files in os.walk(path):
        relative = os.path.relpath(folder, path).split(os.sep)
        table = relative[0] if relative[0] in schema.TABLES else None
        if folder == str(path):  # a stage's hidden scratch folder is its own
            subfolders[:] = [name for name in subfolders if name in schema.TABLES]
        for file in files:
            inside = "/".join([*relative[1:], file])
            if file.startswith(TEMPORARY_PREFIX) or (
                    table is not None and listed is not None
                    and inside not in listed.get(table, {})):
                os.unlink(os.path.join(folder, file))


NULL_COUNTS_ONLY = {"min": False, "max": False, "distinct_count": False, "null_count": True}
"""Parquet statistics of a part written without min/max (``write_parquet(min_max=False)``):
null counts, which cost nothing. Polars computes min/max for every column or none, and they
were a quarter to a third of the CPU of writing NCCL rows (48 parts of 62 k rows, one
thread: 0.34-0.41 against 0.48-0.59 CPU-s)."""


def write_parquet(frame: pl.DataFrame, final: Path, metadata: dict[str, str] | None = None,
                  min_max: bool = True) -> None:
    """``frame`` as the Parquet file ``final``, complete or absent (:func:`atomic_path`), with
    the settings of every part (:data:`PARQUET_ZSTD_LEVEL`, null counts, and min/max for
    pruning unless ``min_max`` is off: :data:`NULL_COUNTS_ONLY`)."""
    with atomic_path(final) as temporary:
        frame.write_parquet(temporary, compression="zstd", compression_level=PARQUET_ZSTD_LEVEL,
                            statistics=True if min_max else NULL_COUNTS_ONLY, metadata=metadata)


def _tracekit_version() -> str:
    from tracekit.core import __version__

    return __version__


def source_record_key(record: dict[str, Any]) -> str:
    """What identifies a manifest source record: its ``key`` (content hash, plus the file name
    where the name is part of the data), or the content hash of records written before keys."""
    return record.get("key", record["sha256"])


@dataclass
class Dataset:
    """An opened dataset folder. Tables are read lazily; the manifest is kept in memory and
    saved with :meth:`save_manifest`, which makes what was written since visible."""

    path: Path
    manifest: dict[str, Any]
    _positions: dict[str, int] = field(default_factory=dict, repr=False, compare=False)
    """Where each source key's record is in ``manifest["sources"]`` (:meth:`record_source`)."""
    _by_path: dict[str, str] = field(default_factory=dict, repr=False, compare=False)
    """The source key recorded for each path."""
    _replaced: set[str] = field(default_factory=set, repr=False, compare=False)
    """Keys of records replaced by new bytes at their path: their files go at the next save."""
    _owned: dict[str, list[tuple[str, str]]] | None = field(default=None, repr=False,
                                                            compare=False)
    """The listed files of each owner, as (table, file): built once from the manifest."""
    _stats: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict, repr=False,
                                                          compare=False)
    """Statistics of the files whose footers were read or which were written here, by (table,
    file): a file never changes under its name, so they hold for the process' life."""

    @property
    def job(self) -> str:
        return self.manifest["job"]

    # -- reading -----------------------------------------------------------------------------

    def parts(self, name: str) -> list[Path]:
        """The Parquet files the manifest lists for table ``name``, in a stable order."""
        schema.table(name)
        return [self.path / name / file for file in sorted(self._listed().get(name, ()))]

    def ranks(self, name: str) -> list[int]:
        """The distinct ranks in table ``name``, from its parts' footers (a part without
        statistics there is scanned): listing them from the rows read the rank of every call
        on the machine that runs the command, 0.25 CPU-s on 35 M calls, twice per analysis."""
        return sorted(set().union(*(self._file_stats(name, file)["ranks"]
                                    for file in self._listed().get(name, ()))))

    def has_table(self, name: str) -> bool:
        return bool(self._listed().get(name))

    def part_stats(self, name: str, file: str) -> dict[str, Any]:
        """The statistics of part ``file`` of table ``name`` (rows, time span, ranks, hosts)
        from its footer, without reading its rows."""
        return self._file_stats(name, file)

    def table(self, name: str) -> pl.LazyFrame:
        """Table ``name`` as a LazyFrame with the canonical schema (empty when absent)."""
        return _scan(name, self.parts(name))

    __getitem__ = table

    def __iter__(self) -> Iterator[str]:
        """The names of the tables that have rows, as a mapping of name to table would."""
        return (name for name in schema.TABLES if self.has_table(name))

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, name: object) -> bool:
        return name in schema.TABLES and self.has_table(name)

    def __repr__(self) -> str:
        """One line (the manifest would print kilobytes)."""
        return f"Dataset({str(self.path)!r}, job={self.job!r}, tables={list(self)})"

    @property
    def tables(self) -> dict[str, pl.LazyFrame]:
        """Every table that has at least one part, by name."""
        return {name: self.table(name) for name in schema.TABLES if self.has_table(name)}

    # -- writing -----------------------------------------------------------------------------

    def write_file(self, name: str, frame: pl.DataFrame, stem: str,
                   min_max: bool = True) -> tuple[str, dict[str, Any]]:
        """Write ``frame`` as the file ``<stem>.parquet`` of table ``name``, not listed (so
        invisible) until :meth:`list_files`; its name in the table and its statistics
        (Parquet min/max unless ``min_max`` is off, :func:`write_parquet`). A Categorical
        column in place of a String one is stored as that String
        (:func:`_canonical_arrow_schema`). Raises SchemaError (naming table and column) on a
        mismatched frame."""
        canonical = schema.table(name).schema
        strings = [column for column, dtype in frame.schema.items()
                   if isinstance(dtype, pl.Categorical) and canonical.get(column) == pl.String]
        schema.validate(name, frame.lazy().with_columns(pl.col(strings).cast(pl.String))
                        if strings else frame)
        file = f"{stem}.parquet"
        stats = _stats_from_rows(name, frame)
        write_parquet(frame, self.path / name / file, {
            PART_STATS_KEY: json.dumps(stats), ARROW_SCHEMA_KEY: _canonical_arrow_schema(name)},
            min_max)
        self._stats[name, file] = stats
        return file, stats

    def write_part(self, name: str, frame: pl.DataFrame, part: str) -> Path:
        """Write ``frame`` as part ``part`` of table ``name`` (a new file,
        ``<part>.<token>.parquet``) in place of the file written as that part before, from the
        next save on."""
        file, stats = self.write_file(name, frame, f"{part}.{uuid.uuid4().hex[:12]}")
        self.list_files(f"{name}/{part}", {name: {file: stats}})
        return self.path / name / file

    def write_table(self, name: str, frame: pl.DataFrame) -> Path:
        """Replace table ``name`` by ``frame`` (one part) from the next save on; the table as it
        was stays listed should the write fail."""
        others = {*self._listed().get(name, {}).values()} - {f"{name}/data"}
        final = self.write_part(name, frame, "data")
        for owner in others:
            self._unlist(owner, name)
        return final

    def list_files(self, owner: str, files: dict[str, dict[str, dict[str, Any]]]) -> None:
        """List ``files`` (table -> file -> statistics) as those of ``owner`` (a source key,
        or ``<table>/<part>``) in place of the files it had: visible from the next save."""
        self._unlist(owner)
        listed = self._listed()
        for name, stats in files.items():
            for file, file_stats in stats.items():
                listed.setdefault(name, {})[file] = owner
                self._stats[name, file] = file_stats
        self._owners()[owner] = [(name, file) for name, stats in files.items() for file in stats]

    def _listed(self) -> dict[str, dict[str, str]]:
        return self.manifest.setdefault("parts", {})

    def _owners(self) -> dict[str, list[tuple[str, str]]]:
        if self._owned is None:
            self._owned = {}
            for name, files in self._listed().items():
                for file, owner in files.items():
                    self._owned.setdefault(owner, []).append((name, file))
        return self._owned

    def _unlist(self, owner: str, table: str | None = None) -> None:
        """Drop ``owner``'s files (in ``table`` only, when given) from the list; the next
        writer removes them from disk."""
        listed, owners = self._listed(), self._owners()
        files = owners.pop(owner, [])
        if table is not None and (others := [(n, f) for n, f in files if n != table]):
            owners[owner] = others
        for name, file in files:
            if table in (None, name):
                del listed[name][file]
                if not listed[name]:
                    del listed[name]

    # -- manifest ----------------------------------------------------------------------------

    def source(self, sha256: str) -> dict[str, Any] | None:
        """The manifest record of an ingested source with this content hash, if any."""
        return next((s for s in self.manifest["sources"] if s["sha256"] == sha256), None)

    def step_axis(self) -> str | None:
        """What the ``iteration`` numbers of the iterations count where a source that wrote
        them says they are not iterations (its record's ``step_axis``: :data:`SAMPLE_SECONDS`);
        None: iterations."""
        return next((s["step_axis"] for s in self.manifest["sources"]
                     if s is not None and s.get("step_axis")
                     and s.get("rows", {}).get("iterations")), None)

    def record_source(self, record: dict[str, Any]) -> None:
        """Add or replace (by :func:`source_record_key`) a source record in the manifest, with
        the files its ``parts`` entry names (table -> file -> statistics; taken out of the
        record) in place of those it had. A record of other bytes at the same path (a log that
        grew) is dropped, and its files are unlisted at the next :meth:`save_manifest`, so its
        old rows do not stay beside the new. Constant time per record (an archive of 100,000
        members records 100,000 of them)."""
        sources = self.manifest["sources"]
        if len(self._positions) != len(sources):
            self._index()
        key = source_record_key(record)
        files = record.pop("parts", None)
        earlier = self._by_path.get(record["path"])
        replaces = (earlier not in (None, key)
                    and sources[self._positions[earlier]]["path"] == record["path"])
        if replaces:
            self._replaced.add(earlier)
            sources[self._positions.pop(earlier)] = None
        if key in self._positions:
            sources[self._positions[key]] = record
        else:
            self._positions[key] = len(sources)
            sources.append(record)
        self._by_path[record["path"]] = key
        if files is not None:
            self.list_files(key, files)
        if replaces:
            self._compact()

    def drop_sources(self, keys: set[str]) -> None:
        """Remove the records of these source keys and unlist their files (the next writer
        removes them from disk): the sources of a dump's other jobs (``ingest --job``)."""
        self.manifest["sources"] = [s for s in self.manifest["sources"]
                                    if s is not None and source_record_key(s) not in keys]
        for key in keys:
            self._unlist(key)
        self._index()

    def _index(self) -> None:
        self._positions = {source_record_key(s): i for i, s in enumerate(self.manifest["sources"])}
        self._by_path = {s["path"]: source_record_key(s) for s in self.manifest["sources"]}

    def _compact(self) -> None:
        """Drop replaced records' places and sort by path (at a replacement and at a save)."""
        self.manifest["sources"] = sorted((s for s in self.manifest["sources"] if s is not None),
                                          key=lambda s: s["path"])
        self._index()

    def _unlist_replaced(self) -> None:
        """Unlist the files of replaced records whose bytes no record still has."""
        for key in self._replaced - self._positions.keys():
            self._unlist(key)
        self._replaced.clear()

    def _file_stats(self, name: str, file: str) -> dict[str, Any]:
        if (name, file) not in self._stats:
            self._stats[name, file] = _part_stats(name, self.path / name / file)
        return self._stats[name, file]

    def refresh_table_stats(self) -> None:
        """Recompute rows, time span, ranks and hosts of every table whose parts changed.

        Each part carries its own statistics in its footer (:data:`PART_STATS_KEY`), computed
        by whoever wrote it (and handed over with the source's record, so an ingest reads no
        footer of its own), so the machine that saves the manifest reads footers instead of
        rows: rescanning the collectives of a 64-rank job of 10,000 iterations (35 M rows)
        cost that machine 1.3 CPU-s at every stage, the largest serial step of a stage on a
        cluster. Parts without it (written by older versions) are scanned. A table's totals
        are kept with the fingerprint of its parts (:func:`_fingerprint`) and not even the
        footers are read again while that holds."""
        known = self.manifest.get("tables", {})
        stats: dict[str, Any] = {}
        listed = self._listed()
        for name in schema.TABLES:
            files = sorted(listed.get(name, ()))
            if not files:
                continue
            fingerprint = _fingerprint(files)
            if known.get(name, {}).get("fingerprint") == fingerprint:
                stats[name] = known[name]
                continue
            per_part = [self._file_stats(name, file) for file in files]
            stats[name] = {**_table_stats(name, per_part), "parts": len(files),
                           "fingerprint": fingerprint}
        self.manifest["tables"] = stats

    @contextmanager
    def updating(self) -> Iterator[Dataset]:
        """Hold the writer lock (:func:`writer_lock`) while a stage writes its tables: the
        manifest is read again once the lock is held, so what another writer recorded since
        this one opened it (an ingest's sources) is kept, and saved at the end."""
        with writer_lock(self.path):
            self.manifest = open_dataset(self.path).manifest
            self._positions, self._by_path, self._replaced, self._owned = {}, {}, set(), None
            yield self
            self.save_manifest()

    def record_build(self, stage: str, entry: dict[str, Any], changed: bool = True) -> None:
        """Note in the manifest's ``build`` section what ran ``stage`` (saved with the
        manifest), and, when it ``changed`` what the later stages read (an ingest that found
        every source unchanged did not), mark every later stage that ran before it as stale:
        its results were computed from what this run replaced (:func:`stale_stages`)."""
        build = self.manifest.setdefault("build", {})
        build[stage] = entry
        if changed and stage in BUILD_STAGES:
            why = ("new or changed sources were ingested after it" if stage == "ingest"
                   else f"{stage} ran again after it")
            for later in BUILD_STAGES[BUILD_STAGES.index(stage) + 1:]:
                if later in build:
                    build[later].setdefault("stale", why)

    def save_manifest(self) -> None:
        """Unlist replaced sources' files, refresh table statistics and replace the manifest
        by one rename: what was written since the last save becomes visible at once."""
        self._compact()
        self._unlist_replaced()
        self.refresh_table_stats()
        self.manifest["updated"] = _now()
        self.manifest["tracekit_version"] = _tracekit_version()
        with (writing_to(self.path), atomic_path(self.path / MANIFEST) as temporary,
              temporary.open("w") as out):
            # streamed: json.dumps held every piece of the text at once, 4.3 KB per source
            json.dump(self.manifest, out, indent=2, sort_keys=True)
            out.write("\n")


ANALYSIS_STAGES = ("iterations", "detect", "attribute")
"""The stages that derive a dataset's tables, in order: each reads what the one before wrote
(``detect`` rewrites ``episodes`` without the culprits and causes ``attribute`` added)."""

BUILD_STAGES = ("ingest", *ANALYSIS_STAGES)
"""Every stage that writes a dataset, in order: the analysis stages read what ingest wrote."""


def stale_stages(dataset: Dataset) -> dict[str, str]:
    """Each stage whose results are out of date (an earlier stage ran again after it), with
    why and the command that brings it up to date; empty when every result is current."""
    build = dataset.manifest.get("build", {})
    return {stage: f"{build[stage]['stale']}; bring it up to date with `tracekit {stage} "
                   f"{dataset.path}` or a new `tracekit analyze`"
            for stage in ANALYSIS_STAGES if "stale" in build.get(stage, {})}


PART_STATS_KEY = "tracekit.stats"
"""Parquet footer key of a part's statistics (JSON): rows, first and last time, and its
distinct ranks and hosts (those columns the table has)."""


ARROW_SCHEMA_KEY = "ARROW:schema"
"""Parquet footer key of the Arrow schema that readers (polars, pyarrow) give a file's columns."""


@cache
def _canonical_arrow_schema(name: str) -> str:
    """The Arrow schema polars stores in a part of table ``name`` written with its canonical
    dtypes. Given as a part's own footer entry, it stores a Categorical column as the String it
    stands for: its pages are the dictionary pages a String column gets, written from the
    codes as they are instead of hashing every value again, and every reader (polars with or
    without the canonical schema, pyarrow) gets String back; without it polars stores a
    dictionary type, which ``scan_parquet`` with the canonical schema refuses."""
    buffer = io.BytesIO()
    schema.table(name).empty().write_parquet(buffer)
    return pl.read_parquet_metadata(buffer.getvalue())[ARROW_SCHEMA_KEY]


def _stats_from_rows(name: str, frame: pl.DataFrame | pl.LazyFrame) -> dict[str, Any]:
    """The statistics of one part of table ``name`` (:data:`PART_STATS_KEY`). A part being
    written is in memory and counted there (the streaming engine's start cost as much again on
    a part of 60 k rows); a scan of a part on disk streams, keeping only the distinct ranks and
    hosts in memory."""
    spec = schema.table(name)
    columns = {"rows": pl.len().cast(pl.Int64)}
    if spec.time_column:
        columns.update(t_min_ns=pl.col(spec.time_column).min(),
                       t_max_ns=pl.col(spec.time_column).max())
    columns.update({plural: pl.col(key).drop_nulls().unique().sort().implode()
                    for key, plural in _DISTINCT.items() if key in spec.schema})
    selected = frame.select(**columns)
    if isinstance(selected, pl.LazyFrame):
        selected = selected.collect(engine="streaming")
    # keyed by these names, not polars' column names: a new string for each key of each part
    # (270 B a part, kept for every part an ingest writes)
    return dict(zip(columns, selected.row(0), strict=True))


_DISTINCT = {"rank": "ranks", "host": "hosts"}
"""Columns whose distinct values the statistics count, and the statistics' names for them."""


def _stats_from_footer(part: Path) -> dict[str, Any] | None:
    """The statistics in a part's footer, or None when it has none."""
    stored = pl.read_parquet_metadata(part).get(PART_STATS_KEY)
    return None if stored is None else json.loads(stored)


def _part_stats(name: str, part: Path) -> dict[str, Any]:
    """A part's statistics: from its footer, else from its rows. A damaged part (truncated,
    overwritten) is one line naming it."""
    try:
        return _stats_from_footer(part) or _stats_from_rows(name, _scan(name, [part]))
    except (OSError, pl.exceptions.PolarsError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise InputError(f"damaged Parquet part ({reason}); remove it and ingest its source "
                         "again", str(part)) from None


def _table_stats(name: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
    """A table's statistics from its parts': rows, time span, number of ranks and hosts."""
    spec = schema.table(name)
    totals: dict[str, Any] = {"rows": sum(p["rows"] for p in parts)}
    if spec.time_column:
        starts = [p["t_min_ns"] for p in parts if p["t_min_ns"] is not None]
        ends = [p["t_max_ns"] for p in parts if p["t_max_ns"] is not None]
        totals.update(t_min_ns=min(starts, default=None), t_max_ns=max(ends, default=None))
    for key, plural in _DISTINCT.items():
        if key in spec.schema:
            totals[plural] = len(set().union(*(p[plural] for p in parts)))
    return totals


def _scan(name: str, parts: list[Path]) -> pl.LazyFrame:
    """The parts of table ``name`` as one LazyFrame with the canonical schema."""
    if not parts:
        return schema.table(name).empty().lazy()
    # a dataset written before an additive column reads it as nulls
    return pl.scan_parquet(parts, schema=schema.table(name).schema, hive_partitioning=False,
                           missing_columns="insert")


def _fingerprint(files: list[str]) -> str:
    """What identifies the contents of a table's ``files``: their names, since a file is never
    rewritten under its name."""
    return hashlib.sha256("\n".join(files).encode()).hexdigest()[:16]


def create_dataset(path: str | Path, job: str | None = None) -> Dataset:
    """Open the dataset at ``path``, creating the folder and its manifest when missing.

    ``job`` defaults to the folder name. Opening an existing dataset with a different job id is
    an error, so two jobs never mix in one dataset.
    """
    path = Path(path)
    if (path / MANIFEST).exists():
        dataset = open_dataset(path)
        if job is not None and job != dataset.job:
            raise InputError(f"dataset belongs to job {dataset.job!r}, not {job!r}", str(path))
        return dataset
    if path.exists() and not path.is_dir():
        raise InputError("exists and is not a folder", str(path))
    with writing_to(path):
        path.mkdir(parents=True, exist_ok=True)
    dataset = Dataset(
        path,
        {
            "manifest_version": MANIFEST_VERSION,
            "job": job or path.resolve().name,
            "created": _now(),
            "sources": [],
            "tables": {},
            "build": {},
        },
    )
    dataset.save_manifest()
    return dataset


@contextmanager
def dataset_writer(path: str | Path, job: str | None = None) -> Iterator[Dataset]:
    """The dataset at ``path`` (created when missing, :func:`create_dataset`), opened under its
    writer lock (:func:`writer_lock`): the manifest is read once the lock is held, so what an
    earlier writer recorded is kept."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise InputError("exists and is not a folder", str(path))
    with writing_to(path):
        path.mkdir(parents=True, exist_ok=True)
    with writer_lock(path):
        yield create_dataset(path, job)


def open_dataset(path: str | Path) -> Dataset:
    """Open an existing dataset folder; a clear error when it is not one."""
    path = Path(path)
    manifest_path = path / MANIFEST
    if not path.exists():
        raise InputError("no such dataset folder", str(path))
    if not manifest_path.is_file():
        raise InputError(f"not a tracekit dataset (no {MANIFEST}); create one with "
                         "`tracekit ingest SOURCES -o DATASET`", str(path))
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise InputError(f"unreadable manifest: {error}", str(manifest_path)) from None
    if "parts" not in manifest:
        manifest["parts"] = _files_on_disk(path, manifest)
    return Dataset(path, manifest)


def _files_on_disk(path: Path, manifest: dict[str, Any]) -> dict[str, dict[str, str]]:
    """The parts list of a dataset written before manifests listed parts: every visible file
    in its tables, owned by the source whose key its name starts with (``<sha16>-<n>``),
    else by its name as a part."""
    sources = {source_record_key(s)[:16]: source_record_key(s) for s in manifest["sources"]}
    listed: dict[str, dict[str, str]] = {}
    for name in schema.TABLES:
        for part in sorted((path / name).rglob("*.parquet")):
            if not part.name.startswith("."):
                file = part.relative_to(path / name).as_posix()
                stem = file.partition(".")[0]
                owner = sources.get(part.name.partition("-")[0], f"{name}/{stem}")
                listed.setdefault(name, {})[file] = owner
    return listed

"""The ingest loop shared by every format: walk inputs, sniff, read, write parts, record.

Each source writes its rows as parts named after its content hash (``<sha16>-<chunk>``), so
ingesting the same bytes again replaces its own parts instead of adding rows, and a new file
adds only its own parts. Unchanged sources (same hash, format and parser version) are skipped
without reading them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from tracekit import schema
from tracekit.dataset import Dataset, create_dataset
from tracekit.errors import InputError, TracekitError
from tracekit.ingest import registry
from tracekit.ingest.base import Chunk, Reader, Source
from tracekit.ingest.sources import MAX_ARCHIVE_BYTES, iter_sources

ProgressCallback = Callable[[str, int, int], None]
"""Called as ``progress(source_name, bytes_done_delta, rows_delta)`` while reading."""


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
    """ingested, unchanged (already in the dataset) or failed."""
    error: str | None = None
    notes: list[str] = field(default_factory=list)

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
    max_archive_bytes: int = MAX_ARCHIVE_BYTES,
) -> IngestSummary:
    """Ingest every file under ``paths`` into the dataset at ``output``.

    A missing path raises before anything is written. A source that cannot be read is reported
    as failed in the summary while the others complete; nothing of it is written.
    """
    options = dict(options or {})
    forced = registry.reader_for_format(format) if format else None
    sources = list(iter_sources(paths, max_archive_bytes))
    dataset = create_dataset(output, job)
    summaries = []
    for source in sources:
        summaries.append(_ingest_source(dataset, source, forced, options, progress))
        dataset.save_manifest()
    return IngestSummary(output, summaries)


def _ingest_source(
    dataset: Dataset,
    source: Source,
    forced: Reader | None,
    options: dict[str, str],
    progress: ProgressCallback | None,
) -> SourceSummary:
    summary = SourceSummary(source.name)
    try:
        reader = forced or registry.sniff(source)
        summary.format = reader.format
        known = dataset.source(source.sha256)
        if known and known["format"] == reader.format and known["parser_version"] == reader.version:
            summary.status = "unchanged"
            summary.rows = dict(known["rows"])
            summary.skipped, summary.quarantined = known["skipped"], known["quarantined"]
            if progress:
                progress(source.name, source.size, 0)
            return summary
        _read_into(dataset, source, reader, options, summary, progress)
    except TracekitError as error:
        summary.status, summary.error = "failed", str(error)
        return summary
    except (OSError, ValueError, pl.exceptions.PolarsError) as error:
        summary.status = "failed"
        summary.error = str(InputError(f"{type(error).__name__}: {error}", source.name))
        return summary
    dataset.record_source({
        "path": source.name,
        "size": source.size,
        "sha256": source.sha256,
        "format": reader.format,
        "parser_version": reader.version,
        "rows": summary.rows,
        "lines": summary.lines,
        "skipped": summary.skipped,
        "quarantined": summary.quarantined,
        "notes": summary.notes,
    })
    return summary


def _read_into(
    dataset: Dataset,
    source: Source,
    reader: Reader,
    options: dict[str, str],
    summary: SourceSummary,
    progress: ProgressCallback | None,
) -> None:
    """Read all chunks, writing each as parts; replace the source's earlier parts only once
    every new part is on disk."""
    prefix = source.sha256[:16]
    written: dict[str, set[Path]] = {}
    ranks: set[int] = set()
    for index, chunk in enumerate(reader.read(source, options)):
        part = f"{prefix}-{index:05d}"
        rows = 0
        for name, frame in _chunk_tables(dataset, chunk).items():
            if frame.height == 0:
                continue
            written.setdefault(name, set()).add(dataset.write_part(name, frame, part))
            summary.rows[name] = summary.rows.get(name, 0) + frame.height
            rows += frame.height
            _extend_span(summary, name, frame, ranks)
        summary.lines += chunk.lines
        summary.skipped += chunk.skipped
        summary.notes.extend(n for n in chunk.notes if n not in summary.notes)
        if progress:
            progress(source.name, chunk.bytes_read, rows)
    summary.quarantined = summary.rows.pop("quarantine", 0)
    summary.ranks = len(ranks)
    for name in schema.TABLES:
        dataset.remove_parts(name, prefix, keep=written.get(name, set()))


def _chunk_tables(dataset: Dataset, chunk: Chunk) -> dict[str, pl.DataFrame]:
    """The chunk's frames with the dataset's job id filled in where the source named none."""
    frames = dict(chunk.tables)
    if chunk.quarantine is not None:
        frames["quarantine"] = chunk.quarantine
    for name, frame in frames.items():
        if "job" in schema.table(name).schema and "job" in frame.columns:
            frames[name] = frame.with_columns(pl.col("job").fill_null(dataset.job))
    return frames


def _extend_span(summary: SourceSummary, name: str, frame: pl.DataFrame, ranks: set[int]) -> None:
    spec = schema.table(name)
    if name == "quarantine":
        return
    if "rank" in frame.columns:
        ranks.update(frame["rank"].drop_nulls().unique().to_list())
    if spec.time_column:
        column = frame[spec.time_column].drop_nulls()
        if len(column):
            low, high = column.min(), column.max()
            summary.t_min_ns = low if summary.t_min_ns is None else min(summary.t_min_ns, low)
            summary.t_max_ns = high if summary.t_max_ns is None else max(summary.t_max_ns, high)

"""Helpers shared by the collective-format reader tests: run a reader over a file or bytes and
gather its chunks into whole tables."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl

from tracekit.core import schema
from tracekit.ingest.base import Chunk, Reader, Source


@dataclass
class ReadResult:
    tables: dict[str, pl.DataFrame]
    quarantine: pl.DataFrame
    lines: int
    skipped: int
    notes: list[str]
    derived: int = 0

    def rows(self) -> int:
        return sum(frame.height for frame in self.tables.values())


def file_source(path: Path) -> Source:
    return Source(str(path), path.stat().st_size, lambda: path.open("rb"))


def read_all(reader: Reader, source: Source, options: dict[str, str] | None = None) -> ReadResult:
    chunks: list[Chunk] = list(reader.read(source, options or {}))
    tables = {}
    for name in reader.tables:
        frames = [c.tables[name] for c in chunks if name in c.tables]
        for frame in frames:
            schema.validate(name, frame)
        tables[name] = pl.concat(frames) if frames else schema.table(name).empty()
    bad = [c.quarantine for c in chunks if c.quarantine is not None]
    quarantine = pl.concat(bad) if bad else schema.table("quarantine").empty()
    notes = [n for c in chunks for n in c.notes]
    return ReadResult(tables, quarantine, sum(c.lines for c in chunks),
                      sum(c.skipped for c in chunks), notes, sum(c.derived for c in chunks))

"""Ground truth of a labeled (synthetic) job: ``labels.parquet`` into the ``labels`` table,
``truth.parquet`` into ``iterations`` with source ``truth``, and ``synth.json`` recognised.

Written by ``tracekit synth``; any tool that writes the labels table's columns to Parquet (for
example hand-labeled real jobs) is read the same way.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import polars as pl

from tracekit.core import schema
from tracekit.core.errors import InputError
from tracekit.core.identity import (
    LINK_SEPARATOR,
    canonical_host,
    link_hosts,
    link_name,
    link_target,
)
from tracekit.ingest.base import Chunk, Reader, Source, read_parquet
from tracekit.ingest.limits import check_json

TRUTH_COLUMNS = ("iteration", "t_start_ns", "t_end_ns", "duration_s", "healthy_s", "slow")
"""Columns that identify a ground-truth iteration file (tracekit/synth/labels.py)."""

LABEL_COLUMNS = ("episode", "fail_slow", "kind", "cause", "target", "t_start_ns", "t_end_ns")


def _parquet_columns(source: Source) -> set[str]:
    if not source.head.startswith(b"PAR1"):
        return set()
    try:
        with source.open() as stream:
            return set(pl.read_parquet_schema(stream))
    except (OSError, ValueError, pl.exceptions.PolarsError):
        return set()


def _cast(frame: pl.DataFrame, name: str, source: Source) -> pl.DataFrame:
    """The frame's canonical columns with canonical dtypes; a clear error when one will not
    convert."""
    spec = schema.table(name)
    try:
        return frame.select([pl.col(c).cast(spec.schema[c]) for c in frame.columns
                             if c in spec.schema])
    except pl.exceptions.PolarsError as error:
        raise InputError(f"a column does not fit the {name} table: {error}", source.name) from None


class LabelsReader(Reader):
    format = "labels"
    version = "1"
    tables = ("labels",)
    priority = 15
    description = "ground-truth episodes (labels.parquet with the labels table's columns)"

    def sniff(self, source: Source) -> bool:
        return set(LABEL_COLUMNS) <= _parquet_columns(source)

    def read(self, source: Source, options: dict[str, str]) -> Iterator[Chunk]:
        frame = read_parquet(source)
        labels, notes = current_link_targets(schema.conform("labels",
                                                            _cast(frame, "labels", source)))
        labels = canonical_target_hosts(labels)
        yield Chunk(tables={"labels": labels}, lines=frame.height, bytes_read=source.size,
                    notes=notes)


def current_link_targets(labels: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """Labels whose link targets were written ``link:A-B`` (before
    :data:`~tracekit.core.identity.LINK_SEPARATOR`) in today's spelling, ``link:A<->B``, where
    they split one way (:func:`~tracekit.core.identity.link_hosts`, with the labels' hosts as
    the known ones); the others kept as written, with a note: they then score right only
    against the same spelling."""
    known = set(labels["target_host"].drop_nulls())
    unsplit: set[str] = set()

    def current(link: str, spell) -> str:
        """``link`` (a target part or a target_link) in today's spelling, if it splits."""
        if LINK_SEPARATOR in link:
            return link
        hosts = link_hosts(link, known)
        if hosts is None:
            unsplit.add(link.removeprefix("link:"))
            return link
        return spell(*hosts)

    targets = [None if t is None else "+".join(
        current(part, link_target) if part.startswith("link:") else part
        for part in t.split("+")) for t in labels["target"]]
    links = [None if t is None else current(t, link_name) for t in labels["target_link"]]
    notes = [f"links {', '.join(sorted(unsplit))} cannot be split into their two hosts (host "
             "names hold '-'); write them as link:A<->B"] if unsplit else []
    return labels.with_columns(pl.Series("target", targets, pl.String),
                               pl.Series("target_link", links, pl.String)), notes


def canonical_target_hosts(labels: pl.DataFrame) -> pl.DataFrame:
    """Labels whose targets name hosts as the tables do (``host:``, ``gpu:HOST/G``, both ends
    of ``link:A<->B``, ``target_host``, ``target_link``:
    :func:`~tracekit.core.identity.canonical_host`)."""
    def part(text: str) -> str:
        kind, _, name = text.partition(":")
        if kind == "host":
            return f"host:{canonical_host(name)}"
        if kind == "gpu" and "/" in name:
            host, _, gpu = name.rpartition("/")
            return f"gpu:{canonical_host(host)}/{gpu}"
        if kind == "link" and LINK_SEPARATOR in name:
            return f"link:{link(name)}"
        return text

    def link(name: str) -> str:
        a, _, b = name.partition(LINK_SEPARATOR)
        return link_name(canonical_host(a), canonical_host(b))

    targets = [None if t is None else "+".join(part(p) for p in t.split("+"))
               for t in labels["target"]]
    links = [t if t is None or LINK_SEPARATOR not in t else link(t)
             for t in labels["target_link"]]
    hosts = [None if h is None else canonical_host(h) for h in labels["target_host"]]
    return labels.with_columns(pl.Series("target", targets, pl.String),
                               pl.Series("target_link", links, pl.String),
                               pl.Series("target_host", hosts, pl.String))


def truth_iterations(frame: pl.DataFrame) -> pl.DataFrame:
    """Ground-truth iteration times (iteration, t_start_ns, t_end_ns, duration_s, and the job
    when the file names one) as ``iterations`` rows of source ``truth``."""
    return schema.conform("iterations", frame.select(
        pl.col("job").cast(pl.String) if "job" in frame.columns
        else pl.lit(None, dtype=pl.String).alias("job"),
        pl.lit(None, dtype=pl.Int32).alias("rank"),
        pl.col("iteration").cast(pl.Int64),
        pl.col("t_start_ns").cast(pl.Int64),
        pl.col("t_end_ns").cast(pl.Int64),
        pl.col("duration_s").cast(pl.Float64),
        pl.lit("truth").alias("source"),
        pl.lit("ok").alias("quality"),
    ))


class TruthReader(Reader):
    format = "truth"
    version = "1"
    tables = ("iterations",)
    priority = 15
    description = "ground-truth iteration times (truth.parquet from tracekit synth)"

    def sniff(self, source: Source) -> bool:
        return set(TRUTH_COLUMNS) <= _parquet_columns(source)

    def read(self, source: Source, options: dict[str, str]) -> Iterator[Chunk]:
        frame = read_parquet(source)
        yield Chunk(tables={"iterations": truth_iterations(frame)}, lines=frame.height,
                    bytes_read=source.size)


class SynthManifestReader(Reader):
    format = "synth-manifest"
    version = "1"
    tables = ()
    priority = 15
    description = "tracekit synth job description (synth.json): recognised, not ingested"

    def sniff(self, source: Source) -> bool:
        head = source.head_text.lstrip()
        return head.startswith("{") and '"generator": "tracekit synth"' in head

    def read(self, source: Source, options: dict[str, str]) -> Iterator[Chunk]:
        try:
            spec = json.loads(source.head_text)
        except json.JSONDecodeError as error:
            raise InputError(f"not valid JSON: {error}", source.name, error.lineno) from None
        if not isinstance(spec, dict):
            raise InputError("not a synth job description: the JSON is not an object",
                             source.name)
        yield Chunk(lines=1, skipped=1, bytes_read=source.size, notes=[
            f"synthetic job {spec.get('job')} (layout {spec.get('layout')}, seed "
            f"{spec.get('seed')}): description only, nothing to ingest"])


TRUTH_CSV_HEADER = "iteration,t_start_ns,t_end_ns,duration_s"
"""How a labeled dump's ``iterations.csv`` starts (the truth format of ``../shared/devset``)."""


def _json_document(source: Source) -> object:
    try:
        with source.open() as stream:
            check_json(source, stream)
            return json.load(stream)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise InputError(f"not valid JSON: {error}", source.name,
                         getattr(error, "lineno", None)) from None


def label_row(entry: dict, source: Source, index: int) -> dict:
    """One ``labels`` row from one entry of a labeled dump's ``labels.json``: the target as
    ``rank:N`` (with its host and GPU), ``host:H`` or ``link:A<->B``, hosts spelled as the
    tables spell them (:func:`~tracekit.core.identity.canonical_host`: a generator's FQDN or
    upper-case names would otherwise never equal a verdict's); causes spelled as tracekit
    spells them (``gpu_thermal`` -> ``gpu-thermal``)."""
    try:
        target = entry.get("target") or {}
        link = [canonical_host(str(h)) for h in target["link"]] if "link" in target else None
        rank = target.get("rank")
        host = canonical_host(str(target["host"])) if target.get("host") else None
        text = (link_target(*link) if link else f"rank:{rank}" if rank is not None
                else f"host:{host}" if host else None)
        episode = "".join(ch for ch in str(entry["episode"]) if ch.isdigit())
        return {
            "episode": int(episode) if episode else index + 1,
            "fail_slow": bool(entry["counts_as_failslow"]),
            "kind": entry.get("kind"),
            "cause": str(entry["cause"]).replace("_", "-"),
            "target": text, "target_rank": rank, "target_host": host,
            "target_gpu": target.get("gpu"), "target_link": link_name(*link) if link else None,
            "t_start_ns": int(entry["t_start_ns"]), "t_end_ns": int(entry["t_end_ns"]),
            "start_iteration": entry.get("iter_start"), "end_iteration": entry.get("iter_end"),
            "severity": entry.get("severity"),
        }
    except (KeyError, TypeError, ValueError, IndexError) as error:
        raise InputError(f"label {index + 1} lacks or misspells {error}: each entry needs "
                         "episode, counts_as_failslow, cause, target, t_start_ns, t_end_ns",
                         source.name) from None


class LabelsJsonReader(Reader):
    format = "labels-json"
    version = "1"
    tables = ("labels",)
    priority = 15
    description = "ground truth of a labeled dump (labels.json: one entry per episode, with " \
                  "counts_as_failslow, cause and target)"

    def sniff(self, source: Source) -> bool:
        head = source.head_text.lstrip()
        healthy = source.file_name == "labels.json" and "".join(head.split()) == "[]"
        return healthy or (head.startswith("[") and '"counts_as_failslow"' in head)

    def read(self, source: Source, options: dict[str, str]) -> Iterator[Chunk]:
        entries = _json_document(source)
        if not isinstance(entries, list):
            raise InputError("labels.json must be a list of episodes", source.name)
        rows = [label_row(entry, source, i) for i, entry in enumerate(entries)]
        columns = {c: schema.LABELS.schema[c] for c in rows[0]} if rows else {}
        labels = schema.conform("labels", pl.DataFrame(rows, schema=columns).with_columns(
            pl.lit(None, pl.String).alias("job")))
        yield Chunk(tables={"labels": labels}, lines=len(entries), bytes_read=source.size)


class TruthCsvReader(Reader):
    format = "truth-csv"
    version = "1"
    tables = ("iterations",)
    priority = 15
    description = "ground-truth iteration times of a labeled dump (iterations.csv)"

    def sniff(self, source: Source) -> bool:
        return source.head_text.startswith(TRUTH_CSV_HEADER)

    def read(self, source: Source, options: dict[str, str]) -> Iterator[Chunk]:
        if not self.sniff(source):  # --format: polars would decompress a zlib or gzip start
            raise InputError(f"not a truth iteration CSV: the header is not {TRUTH_CSV_HEADER}",
                             source.name, 1)
        try:
            with source.open() as stream:
                frame = pl.read_csv(stream, columns=list(TRUTH_CSV_HEADER.split(",")),
                                    schema_overrides={"t_start_ns": pl.Int64,
                                                      "t_end_ns": pl.Int64})
        except pl.exceptions.PolarsError as error:
            raise InputError(f"not a truth iteration CSV: {error}", source.name) from None
        yield Chunk(tables={"iterations": truth_iterations(frame)},
                    lines=frame.height + 1, skipped=1, bytes_read=source.size)


class LabeledJobReader(Reader):
    format = "labeled-job"
    version = "1"
    tables = ()
    priority = 15
    description = "description of a labeled dump (job.json with layout and generator): " \
                  "recognised, not ingested"

    def sniff(self, source: Source) -> bool:
        head = source.head_text.lstrip()
        return head.startswith("{") and '"job_id"' in head and '"layout"' in head

    def read(self, source: Source, options: dict[str, str]) -> Iterator[Chunk]:
        yield Chunk(lines=1, skipped=1, bytes_read=source.size,
                    notes=["labeled job description: recognised, not ingested"])


READERS = [LabelsReader(), TruthReader(), SynthManifestReader(), LabelsJsonReader(),
           TruthCsvReader(), LabeledJobReader()]

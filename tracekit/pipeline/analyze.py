"""One command from a cluster dump to an explained verdict: ingest, iterations, detect,
attribute, report.

Each stage is the library function its own CLI verb calls, run on the same dataset in order.
A stage whose input is absent is *skipped* with the reason (a dump without collectives has no
ACF reconstruction; a dump without episodes has nothing to attribute), so the pipeline gives the
most a dump allows instead of stopping at the first gap.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.attribute import attribute_dataset
from tracekit.attribute.time_split import TimeVerdict, has_timeline
from tracekit.core.dataset import Dataset, create_dataset
from tracekit.core.errors import InputError
from tracekit.core.parallel import Executor, LocalExecutor
from tracekit.detect import detect_dataset
from tracekit.detect.verdict import shown_episodes
from tracekit.ingest.pipeline import IngestSummary, ingest
from tracekit.iterations import reconstruct_dataset
from tracekit.report.document import write_report
from tracekit.report.job import job_report

STAGES = ("ingest", "iterations", "detect", "attribute", "report")

STAGE_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "iterations": reconstruct_dataset,
    "detect": detect_dataset,
    "attribute": attribute_dataset,
}
"""The analysis stages in order, each ``function(dataset, executor=...)``: the functions behind
the ``tracekit iterations|detect|attribute`` verbs."""

StageProgress = Callable[[str, str, dict[str, Any]], None]
"""Called as ``progress(stage, event, info)`` with event ``start``, ``advance`` (ingest bytes:
``info = {"source", "bytes", "rows"}``) or ``end`` (``info = {"status", "detail"}``)."""


@dataclass
class StageResult:
    name: str
    status: str
    """done or skipped (with the reason in ``detail``)."""
    seconds: float
    detail: str = ""


@dataclass
class Analysis:
    """What ``tracekit analyze`` did and found."""

    dataset: Path
    stages: list[StageResult] = field(default_factory=list)
    episodes: pl.DataFrame | None = None
    """The verdict's episodes (or those of the detector asked for)."""
    detector: str | None = None
    report_html: Path | None = None
    report_markdown: Path | None = None
    failed_sources: list[str] = field(default_factory=list)
    ingest: IngestSummary | None = None
    """Ingest's summary: each source's notes and errors, for the caller to show."""
    time_split: TimeVerdict | None = None
    """The job verdict of a profiler trace's time split (:mod:`tracekit.attribute.time_split`)."""


class NothingIngested(InputError):
    """No source of the dump gave a row; ``summary`` holds each source's error and notes (a
    log without timestamps says which NCCL variable to set)."""

    def __init__(self, summary: IngestSummary, dump: Path):
        sources, failed = len(summary.sources), len(summary.failed)
        found = ", ".join(part for part in (f"{failed} unreadable" if failed else "",
                                            f"{sources - failed} without rows"
                                            if sources > failed else "") if part)
        found = f"{sources} source(s): {found}" if sources else "no files under it"
        super().__init__(f"nothing was ingested ({found}); `tracekit formats` lists the logs "
                         "tracekit reads, --format forces one", str(dump))
        self.summary = summary


def _rows(dataset: Dataset, name: str) -> int:
    return dataset.table(name).select(pl.len()).collect().item()


def _skip_reason(stage: str, dataset: Dataset) -> str | None:
    """Why ``stage`` cannot run on ``dataset`` (None when it can)."""
    if stage == "iterations" and not _rows(dataset, "collectives"):
        if _rows(dataset, "iterations"):
            return "no collectives; using the framework's own iteration times"
        return "no collectives and no framework log: nothing to time iterations with"
    if stage == "detect" and not _rows(dataset, "iterations"):
        return "no iterations to detect on"
    if stage == "attribute" and not _rows(dataset, "episodes") and not has_timeline(
            dataset.table("collectives"), dataset.table("op_traces")):
        return "no episodes to attribute"
    return None


def _describe(stage: str, value: Any, dataset: Dataset, detector: str | None) -> str:
    if stage == "iterations":
        return f"{_rows(dataset, 'iterations'):,} iteration rows"
    # count the verdict's episodes, those the command shows (the table holds every detector's)
    name, verdict = shown_episodes(dataset.table("episodes").collect(), detector)
    if stage == "detect":
        return f"{verdict.height} episode(s) of {name}"
    if stage == "attribute":
        attributed = verdict.filter(pl.col("cause").is_not_null()).height
        return f"{attributed} of {verdict.height} episode(s) attributed"
    return ""


def analyze(
    dump: list[Path],
    output: Path,
    job: str | None = None,
    report_dir: Path | None = None,
    detector: str | None = None,
    progress: StageProgress | None = None,
    write_job_report: bool = True,
    skip: Collection[str] = (),
    executor: Executor | None = None,
    format: str | None = None,
    options: dict[str, str] | None = None,
) -> Analysis:
    """Run every stage on ``dump`` into the dataset ``output``; the report goes to
    ``report_dir`` (default ``output/report``) unless ``write_job_report`` is false (corpus
    evaluation). Analysis stages named in ``skip`` are skipped ("not asked for").
    ``executor`` runs every stage's partitions (default: a local loop); ``format`` and
    ``options`` go to ingest. Re-running is idempotent like ingest."""
    def notify(stage: str, event: str, **info: Any) -> None:
        if progress is not None:
            progress(stage, event, info)

    result = Analysis(Path(output))
    for path in dump:
        if not Path(path).exists():
            raise InputError("no such file or folder", str(path))

    started = time.perf_counter()
    notify("ingest", "start")
    executor = executor or LocalExecutor()
    summary = ingest(list(dump), Path(output), job=job, format=format, options=options,
                     executor=executor,
                     progress=lambda name, done, rows: notify(
                         "ingest", "advance", source=name, bytes=done, rows=rows))
    result.failed_sources = [s.error or s.path for s in summary.failed]
    result.ingest = summary
    dataset = create_dataset(output)
    if not dataset.tables:
        raise NothingIngested(summary, dump[0])
    ingested = sum(s.total_rows for s in summary.sources)
    _finish(result, notify, "ingest", started, "done",
            f"{len(summary.sources)} source(s), {ingested:,} rows, "
            f"{len(summary.failed)} failed")

    for stage, function in STAGE_FUNCTIONS.items():
        started = time.perf_counter()
        notify(stage, "start")
        reason = "not asked for" if stage in skip else _skip_reason(stage, dataset)
        if reason:
            _finish(result, notify, stage, started, "skipped", reason)
        else:
            value = function(dataset, executor=executor)
            if stage == "attribute":
                result.time_split = getattr(value, "time_split", None)  # fakes return None
            dataset = create_dataset(output)
            _finish(result, notify, stage, started, "done",
                    _describe(stage, value, dataset, detector))

    started = time.perf_counter()
    notify("report", "start")
    result.detector, episodes = shown_episodes(dataset.table("episodes").collect(), detector)
    result.episodes = episodes.sort("start_iteration")
    if not write_job_report:
        _finish(result, notify, "report", started, "skipped", "not asked for")
        return result
    written = write_report(job_report(dataset, result.detector),
                           report_dir or Path(output) / "report")
    result.report_html, result.report_markdown = written.html, written.markdown
    _finish(result, notify, "report", started, "done", str(written.html))
    return result


def _finish(result: Analysis, notify: Callable[..., None], stage: str, started: float,
            status: str, detail: str) -> None:
    result.stages.append(StageResult(stage, status, time.perf_counter() - started, detail))
    notify(stage, "end", status=status, detail=detail)

"""One command from a cluster dump to an explained verdict: ingest, iterations, detect,
attribute, report.

Each stage is the library function its own CLI verb calls, run on the same dataset in order.
A stage whose input is absent is *skipped* with the reason (a dump without collectives has no
ACF reconstruction; a tracekit build without attribution leaves episodes "not attributed"), so
the pipeline gives the most a dump allows instead of stopping at the first gap.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.core.dataset import Dataset, create_dataset
from tracekit.core.errors import InputError
from tracekit.core.parallel import Executor, LocalExecutor

STAGES = ("ingest", "iterations", "detect", "attribute", "report")

STAGE_FUNCTIONS = {
    "iterations": ("tracekit.iterations", "reconstruct_dataset"),
    "detect": ("tracekit.detect", "detect_dataset"),
    "attribute": ("tracekit.attribute", "attribute_dataset"),
}
"""Where each analysis stage lives: ``module, function(dataset, executor=...)``, the functions
behind the ``tracekit iterations|detect|attribute`` verbs."""

StageProgress = Callable[[str, str, dict[str, Any]], None]
"""Called as ``progress(stage, event, info)`` with event ``start``, ``advance`` (ingest bytes:
``info = {"source", "bytes", "rows"}``) or ``end`` (``info = {"status", "detail"}``)."""


@dataclass
class StageResult:
    name: str
    status: str
    """done, skipped or unavailable (this build lacks the stage)."""
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


def _stage_function(stage: str) -> Callable[..., Any] | None:
    module_name, function_name = STAGE_FUNCTIONS[stage]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name and module_name.startswith(error.name):
            return None
        raise
    return getattr(module, function_name, None)


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
    if stage == "attribute" and not _rows(dataset, "episodes"):
        return "no episodes to attribute"
    return None


def _describe(stage: str, value: Any, dataset: Dataset) -> str:
    if stage == "iterations":
        return f"{_rows(dataset, 'iterations'):,} iteration rows"
    if stage == "detect":
        return f"{_rows(dataset, 'episodes')} episode(s)"
    if stage == "attribute":
        attributed = dataset.table("episodes").filter(pl.col("cause").is_not_null()).select(
            pl.len()).collect().item()
        return f"{attributed} episode(s) attributed"
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
) -> Analysis:
    """Run every stage on ``dump`` into the dataset ``output``; the report goes to
    ``report_dir`` (default ``output/report``) unless ``write_job_report`` is false (corpus
    evaluation). Analysis stages named in ``skip`` are skipped ("not asked for").
    ``executor`` runs every stage's partitions (default: a local loop). Re-running is
    idempotent like ingest."""
    from tracekit.detect.verdict import shown_episodes
    from tracekit.ingest.pipeline import ingest
    from tracekit.report.document import write_report
    from tracekit.report.job import job_report

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
    summary = ingest(list(dump), Path(output), job=job, executor=executor,
                     progress=lambda name, done, rows: notify(
                         "ingest", "advance", source=name, bytes=done, rows=rows))
    result.failed_sources = [s.error or s.path for s in summary.failed]
    dataset = create_dataset(output)
    if not dataset.tables:
        raise InputError("nothing usable was ingested (see the errors above); check the dump "
                         "holds logs tracekit reads (`tracekit formats`)", str(dump[0]))
    ingested = sum(s.total_rows for s in summary.sources)
    _finish(result, notify, "ingest", started, "done",
            f"{len(summary.sources)} source(s), {ingested:,} rows, "
            f"{len(summary.failed)} failed")

    for stage in ("iterations", "detect", "attribute"):
        started = time.perf_counter()
        notify(stage, "start")
        function = _stage_function(stage)
        reason = "not asked for" if stage in skip else _skip_reason(stage, dataset)
        if function is None:
            _finish(result, notify, stage, started, "unavailable",
                    f"{'.'.join(STAGE_FUNCTIONS[stage])} is not in this build")
        elif reason:
            _finish(result, notify, stage, started, "skipped", reason)
        else:
            value = function(dataset, executor=executor)
            dataset = create_dataset(output)
            _finish(result, notify, stage, started, "done", _describe(stage, value, dataset))

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


def is_dataset(path: Path) -> bool:
    from tracekit.core.dataset import MANIFEST

    return (Path(path) / MANIFEST).is_file()


def corpus_jobs(corpus: Path) -> list[tuple[str, list[Path]]]:
    """The jobs of a corpus folder, each a name and what to ingest: one sub-folder per job (a
    dataset or a dump), or labeled dumps as a team keeps them, ``dumps/<job>.tar.xz`` (or a
    folder) beside ``truth/<job>/`` (``labels.json``, ``iterations.csv``)."""
    dumps, truth = corpus / "dumps", corpus / "truth"
    if dumps.is_dir() and truth.is_dir():
        jobs = []
        for dump in sorted(p for p in dumps.iterdir() if not p.name.startswith(".")):
            name = dump.name.split(".")[0]
            jobs.append((name, [dump] + ([truth / name] if (truth / name).is_dir() else [])))
        return jobs
    return [(p.name, [p]) for p in sorted(corpus.iterdir())
            if p.is_dir() and not p.name.startswith(".")]


def analyze_corpus(corpus: Path, work: Path,
                   progress: Callable[[str, int, int], None] | None = None,
                   skip: Collection[str] = ()) -> list[Path]:
    """Datasets of every job of ``corpus``: job folders that already are datasets are used as
    they are; raw job folders (dumps) are analysed into ``work/<job>`` (no per-job report,
    analysis stages in ``skip`` skipped). ``progress(job, done, total)`` after each job."""
    corpus = Path(corpus)
    if not corpus.is_dir():
        raise InputError("a corpus is a folder with one sub-folder per job", str(corpus))
    jobs = corpus_jobs(corpus)
    if not jobs:
        raise InputError("no job folders in this corpus", str(corpus))
    datasets = []
    for done, (name, sources) in enumerate(jobs, start=1):
        if len(sources) == 1 and is_dataset(sources[0]):
            datasets.append(sources[0])
        else:
            target = Path(work) / name
            analyze(sources, target, job=name, write_job_report=False, skip=skip)
            datasets.append(target)
        if progress is not None:
            progress(name, done, len(jobs))
    return datasets


def _finish(result: Analysis, notify: Callable[..., None], stage: str, started: float,
            status: str, detail: str) -> None:
    result.stages.append(StageResult(stage, status, time.perf_counter() - started, detail))
    notify(stage, "end", status=status, detail=detail)

"""A corpus of jobs through the pipeline: each job folder analysed into a dataset (or used as
it is when it already is one), then scored against its labels or reported.

This is where ``tracekit eval`` and ``tracekit report CORPUS`` run the stages; scoring
(:mod:`tracekit.evaluate.scoring`) and the reports (:mod:`tracekit.report`) only read the
datasets this module hands them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path

from tracekit.core.dataset import MANIFEST, open_dataset
from tracekit.core.errors import InputError
from tracekit.evaluate.scoring import Corpus, Evaluation, evaluate, load_corpus, score_corpus
from tracekit.pipeline.analyze import analyze
from tracekit.report.corpus import corpus_report
from tracekit.report.document import write_report
from tracekit.report.export import EXPORT_FOLDER, export_corpus, export_job
from tracekit.report.job import job_report


def is_dataset(path: Path) -> bool:
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
        raise InputError("no job folders in this corpus: a corpus holds one folder per job, "
                         "or dumps/ beside truth/ (docs/labels.md)", str(corpus))
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


def evaluate_corpus(corpus: Path, work: Path, include_detectors: list[str] | None = None,
                    progress=None, attribute: bool = True) -> tuple[Corpus, Evaluation]:
    """Analyse every job of a labeled corpus (raw jobs into ``work``) and evaluate every
    detector that reported an episode, plus ``include_detectors`` (those of a baseline: a
    detector gone silent then counts as missing every fail-slow instead of vanishing).

    Raw jobs run the whole pipeline, attribution included whenever the job has episodes, so
    localisation and cause accuracy are measured; ``attribute=False`` skips it (detection
    accuracy only). ``progress(job, done, total)`` after each job."""
    skip = () if attribute else ("attribute",)
    corpus_data = load_corpus(analyze_corpus(Path(corpus), Path(work), progress, skip=skip))
    return corpus_data, score_corpus(corpus_data, Path(corpus), include_detectors)


def build_report(source: Path, output: Path, detector: str | None = None,
                 work: Path | None = None, progress=None, export: bool = True):
    """Write the report of ``source``: a job report for a dataset folder, a corpus report for
    a folder of jobs (raw jobs are analysed into ``work`` first); with ``export``, the trace,
    tables and JSON summaries under ``output/export`` (:mod:`tracekit.report.export`).
    Returns the written report."""
    source = Path(source)
    if is_dataset(source):
        dataset = open_dataset(source)
        if export:
            export_job(dataset, Path(output) / EXPORT_FOLDER, detector)
        return write_report(job_report(dataset, detector), output)
    work = Path(work) if work else Path("build") / "corpus" / source.name
    corpus = load_corpus(analyze_corpus(source, work, progress))
    evaluation = evaluate(corpus.jobs, corpus.labels, corpus.episodes) \
        if corpus.labels.height else None
    if export:
        export_corpus(corpus, evaluation, Path(output) / EXPORT_FOLDER, detector)
    return write_report(corpus_report(corpus, f"tracekit corpus report: {source.name}",
                                      detector, evaluation), output)

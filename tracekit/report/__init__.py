"""Reports: one job (:func:`job_report`) or a corpus (:func:`corpus_report`), written as
Markdown with figures beside it and as one self-contained HTML page (:func:`write_report`)."""

from __future__ import annotations

from pathlib import Path


def build_report(source: Path, output: Path, detector: str | None = None,
                 work: Path | None = None, progress=None):
    """Write the report of ``source``: a job report for a dataset folder, a corpus report for
    a folder of jobs (raw jobs are analysed into ``work`` first). Returns the written files."""
    from tracekit.core.dataset import open_dataset
    from tracekit.evaluate.scoring import load_corpus
    from tracekit.pipeline.analyze import analyze_corpus, is_dataset
    from tracekit.report.corpus import corpus_report
    from tracekit.report.document import write_report
    from tracekit.report.job import job_report

    source = Path(source)
    if is_dataset(source):
        return write_report(job_report(open_dataset(source), detector), output)
    work = Path(work) if work else Path("build") / "corpus" / source.name
    corpus = load_corpus(analyze_corpus(source, work, progress))
    return write_report(corpus_report(corpus, f"tracekit corpus report: {source.name}",
                                      detector), output)

"""Reports: one job (:func:`~tracekit.report.job.job_report`) or a corpus
(:func:`~tracekit.report.corpus.corpus_report`), written as Markdown with figures beside it and
as one self-contained HTML page (:func:`~tracekit.report.document.write_report`). A report
renders the datasets it is given; :mod:`tracekit.pipeline.corpus` runs the stages first."""

"""Reports: one job (:func:`job_report`) or a corpus (:func:`corpus_report`), written as
Markdown with figures beside it and as one self-contained HTML page (:func:`write_report`)."""

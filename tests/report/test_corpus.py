from __future__ import annotations

from tracekit.evaluate.scoring import load_corpus
from tracekit.report.corpus import corpus_report
from tracekit.report.document import write_report


def test_corpus_report_tables_and_figures(corpus_datasets, tmp_path):
    corpus = load_corpus(corpus_datasets)
    assert corpus.jobs["category"].to_list() == ["compute", "compute", "communication"]
    report = corpus_report(corpus, "test corpus")
    assert [s.title for s in report.sections] == ["Corpus", "Characterisation",
                                                  "Detector accuracy"]
    causes = report.sections[1].tables[0].frame
    rows = {r["cause"]: (r["compute"], r["communication"]) for r in causes.iter_rows(named=True)}
    assert rows == {"no fail-slow": ("1", "1"), "gpu-thermal": ("1", "0"), "jobs": ("2", "1"),
                    "mean JCT slowdown": ("5.83 %", "0.00 %")}
    accuracy = report.sections[2].tables[0].frame.row(0, named=True)
    assert accuracy["detector"] == "bocd+b"
    assert accuracy["compute: accuracy"] == "100.0 (2/2)"
    assert accuracy["communication: FPR"] == "0.0 (0/1)"
    assert accuracy["all: FNR"] == "0.0 (0/1)"
    written = write_report(report, tmp_path / "corpus")
    assert sorted(p.name for p in written.figures) == [
        "duration_cdf.png", "duration_cdf.svg", "jct_slowdown_cdf.png", "jct_slowdown_cdf.svg"]
    page = written.html.read_text()
    for text in ("3 jobs: 1 communication, 2 compute.", "100.0 (2/2)", "Table 1",
                 "Fail-slow duration per category", "JCT slowdown per category"):
        assert text in page, text

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
    tables = report.sections[2].tables
    assert [t.caption.split(":")[0] for t in tables[:3]] == [
        "communication jobs", "compute jobs", "all jobs"]
    assert tables[1].frame.columns == ["detector", "accuracy", "FPR", "FNR", "culprit", "cause"]
    assert tables[1].frame.row(0) == ("bocd+b", "100.0 % (2/2)", "0.0 % (0/1)", "0.0 % (0/1)",
                                      "100.0 % (1/1)", "100.0 % (1/1)")
    assert tables[0].frame.row(0, named=True)["FPR"] == "0.0 % (0/1)"
    assert tables[2].frame.row(0, named=True)["FNR"] == "0.0 % (0/1)"
    by_cause = tables[-1].frame
    assert by_cause.rows() == [
        ("gpu-thermal", 1, "100.0 % (1/1)", "100.0 % (1/1)", "100.0 % (1/1)")]
    written = write_report(report, tmp_path / "corpus")
    assert sorted(p.name for p in written.figures) == [
        "duration_cdf.png", "duration_cdf.svg", "jct_slowdown_cdf.png", "jct_slowdown_cdf.svg"]
    page = written.html.read_text()
    for text in ("3 jobs: 1 communication, 2 compute.", "100.0 % (2/2)", "Table 1",
                 "Fail-slow duration per category", "JCT slowdown per category"):
        assert text in page, text


def test_one_category_is_not_shown_twice(corpus_datasets):
    from tracekit.evaluate.scoring import evaluate
    from tracekit.report.tables import accuracy_tables

    corpus = load_corpus(corpus_datasets[:2])
    evaluation = evaluate(corpus.jobs, corpus.labels, corpus.episodes)
    tables = accuracy_tables(evaluation.job_table, evaluation.episode_table)
    assert list(tables) == ["compute"]
    assert tables["compute"]["detector"].to_list() == ["bocd+b", "bocd+b+peers"]


def test_paper_references_for_the_categories_present():
    from tracekit.report.corpus import PAPER_MEAN_JCT_SLOWDOWN_PCT, paper_references

    assert paper_references(["compute", "large"], PAPER_MEAN_JCT_SLOWDOWN_PCT, " %",
                            point=True) == (
        ("compute", "paper: compute mean 11.79 %", 11.79, None),
        ("large", "paper: large mean 34.59 %", 34.59, None),
        ("large", "paper: 20 % of large jobs > 50 %", 50.0, 0.8))


def test_a_normalised_job_is_left_out_of_the_jct_slowdown(corpus_datasets, tmp_path):
    """A job whose step times are normalised has a share of its logged steps' time, not a JCT
    slowdown: the mean and the CDF leave it out, and say so."""
    import polars as pl

    from tracekit.core.dataset import open_dataset

    from .conftest import build_job

    normalised = build_job(tmp_path / "c3", "c3", "compute")
    with normalised.updating():
        normalised.write_table("iterations", normalised.table("iterations").collect()
                               .with_columns(pl.lit("normalised").alias("quality")))
    corpus = load_corpus([*corpus_datasets, normalised.path])
    assert open_dataset(normalised.path).table("episodes").collect()["jct_slowdown"].item() > 0
    report = corpus_report(corpus, "test corpus")
    character = report.sections[1]
    rows = {r["cause"]: r["compute"] for r in character.tables[0].frame.iter_rows(named=True)}
    assert (rows["jobs"], rows["mean JCT slowdown"]) == ("3", "5.83 %")  # c1 and c2 only
    assert character.paragraphs[1] == (
        "The JCT slowdown (its mean and CDF) leaves out 1 of 4 jobs (c3): their step times are "
        "normalised or a sample of the run, so their slowdown is a share of the logged steps' "
        "time, not of the job's completion time.")
    assert character.figures[1].caption.endswith(
        "; jobs without a completion time left out, see above.")

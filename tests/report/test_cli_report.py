"""`tracekit report` and `tracekit eval` on hand-built datasets (a job and a 3-job corpus)."""

from __future__ import annotations

import json
import shutil

import polars as pl
from typer.testing import CliRunner

from tracekit.cli import app
from tracekit.core.dataset import open_dataset


def test_report_on_a_dataset_and_on_a_corpus(job_dataset, corpus_datasets, tmp_path):
    runner = CliRunner()
    out = runner.invoke(app, ["report", str(job_dataset.path), "-o", str(tmp_path / "job")])
    assert out.exit_code == 0, out.output
    assert (tmp_path / "job" / "index.html").is_file()
    assert "(2 figure files)" in out.output
    corpus = corpus_datasets[0].parent
    out = runner.invoke(app, ["report", str(corpus), "-o", str(tmp_path / "corpus")])
    assert out.exit_code == 0, out.output
    assert "Jobs per fail-slow cause" in (tmp_path / "corpus" / "report.md").read_text()


def test_eval_baseline_update_and_regression(corpus_datasets, tmp_path):
    corpus = tmp_path / "corpus"
    shutil.copytree(corpus_datasets[0].parent, corpus)
    baseline = tmp_path / "accuracy.json"
    runner = CliRunner()
    out = runner.invoke(app, ["eval", str(corpus), "--update-baseline", str(baseline)])
    assert out.exit_code == 0, out.output
    assert "job level" in out.output and "episode level" in out.output
    stored = json.loads(baseline.read_text())
    assert stored["metrics"]["job"]["bocd+b"]["all"]["tp"] == 1
    assert stored["metrics"]["job"]["bocd+b"]["compute"]["accuracy"] == 100.0
    assert stored["metrics"]["episode"]["bocd+b"]["all"]["correct_targets"] == 1
    out = runner.invoke(app, ["eval", str(corpus), "--baseline", str(baseline)])
    assert out.exit_code == 0 and "no regression" in out.output
    # weaken the detector: it no longer reports c1's episode
    weakened = open_dataset(corpus / "c1")
    weakened.write_table("episodes", weakened.table("episodes").collect().clear())
    weakened.save_manifest()
    out = runner.invoke(app, ["eval", str(corpus), "--baseline", str(baseline)])
    assert out.exit_code == 1
    assert "regression: job bocd+b/compute accuracy: 50 vs baseline 100 (tolerance 2)" in out.output
    assert "episode bocd+b/compute recall" in out.output
    assert "measured on another version of the corpus" in out.output


def test_eval_refuses_an_unlabeled_corpus(corpus_datasets, tmp_path):
    corpus = tmp_path / "unlabeled"
    for path in corpus_datasets:
        shutil.copytree(path, corpus / path.name)
        dataset = open_dataset(corpus / path.name)
        dataset.write_table("labels", dataset.table("labels").collect().filter(pl.lit(False)))
        dataset.save_manifest()
    out = CliRunner().invoke(app, ["eval", str(corpus)])
    assert out.exit_code == 2 and "needs a labeled corpus" in out.output


def test_report_writes_exports_unless_told_not_to(job_dataset, tmp_path):
    runner = CliRunner()
    out = runner.invoke(app, ["report", str(job_dataset.path), "-o", str(tmp_path / "job")])
    assert out.exit_code == 0 and f"exports: {tmp_path / 'job' / 'export'}" in out.output
    assert json.loads((tmp_path / "job" / "export" / "summary.json").read_text())["job"] == "j1"
    out = runner.invoke(app, ["report", str(job_dataset.path), "-o", str(tmp_path / "bare"),
                              "--no-export"])
    assert out.exit_code == 0 and not (tmp_path / "bare" / "export").exists()

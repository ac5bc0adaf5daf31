"""The one-command pipeline on the shipped sample dump, with and without later stages."""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from tracekit.cli import app
from tracekit.core import schema
from tracekit.core.errors import InputError
from tracekit.detect.verdict import VERDICT_DETECTOR
from tracekit.pipeline import analyze as pipeline
from tracekit.pipeline.analyze import NothingIngested
from tracekit.pipeline.corpus import analyze_corpus

SAMPLE = Path(__file__).resolve().parents[2] / "datasets" / "sample"


@pytest.fixture(scope="module")
def ingested(tmp_path_factory) -> Path:
    """The sample ingested once: analyze re-ingests nothing it already holds (same source
    hashes), so each test starts from a copy and pays only for its later stages."""
    from tracekit.ingest.pipeline import ingest

    path = tmp_path_factory.mktemp("sample") / "ds"
    ingest([SAMPLE], path)
    return path


@pytest.fixture
def dataset_path(ingested, tmp_path) -> Path:
    shutil.copytree(ingested, tmp_path / "ds")
    return tmp_path / "ds"


def _fake_detect(dataset, detector="bocd+b", **_stage_options):
    """Stands in for a detector: one open episode at the first iteration."""
    first = dataset.table("collectives").select(pl.col("t_start_ns").min()).collect().item()
    dataset.write_table("episodes", schema.conform("episodes", pl.DataFrame({
        "job": [dataset.job], "episode": [0], "detector": [detector], "t_start_ns": [first],
        "duration_s": [30.0], "slowdown": [1.25], "jct_slowdown": [0.05],
        "cause": ["network-congestion"], "target": ["link:b01-b02"]},
        schema_overrides={"episode": pl.Int32})))
    dataset.save_manifest()


def _only_detect(monkeypatch, detect) -> None:
    """Detection replaced by ``detect``, the other analysis stages by nothing, none skipped."""
    for stage in pipeline.STAGE_FUNCTIONS:
        monkeypatch.setitem(pipeline.STAGE_FUNCTIONS, stage,
                            detect if stage == "detect" else lambda dataset, executor: None)
    monkeypatch.setattr(pipeline, "_skip_reason", lambda stage, dataset: None)


def test_analyze_sample_runs_every_stage_it_can(tmp_path):
    seen = []
    result = pipeline.analyze([SAMPLE], tmp_path / "ds", skip={"attribute"},
                              progress=lambda stage, event, info: seen.append((stage, event)))
    status = {s.name: s.status for s in result.stages}
    assert status["ingest"] == "done" and status["report"] == "done"
    assert status["attribute"] == "skipped"
    assert result.stages[3].detail == "not asked for"
    assert [s.name for s in result.stages] == list(pipeline.STAGES)
    assert ("ingest", "start") in seen and ("report", "end") in seen
    assert result.report_html.is_file() and result.report_markdown.is_file()
    assert result.stages[0].detail == "20 source(s), 439,683 rows, 0 failed"
    assert status["iterations"] == status["detect"] == "done"


def test_analyze_shows_detected_episodes(dataset_path, monkeypatch):
    _only_detect(monkeypatch, _fake_detect)
    result = pipeline.analyze([SAMPLE], dataset_path)
    assert result.detector == VERDICT_DETECTOR
    assert result.episodes["cause"].to_list() == ["network-congestion"]
    page = result.report_html.read_text()
    assert "network-congestion" in page and "link:b01-b02" in page and "x1.25" in page


def test_analyze_cli_prints_episodes_and_report(dataset_path, monkeypatch):
    _only_detect(monkeypatch, _fake_detect)
    out = CliRunner().invoke(app, ["analyze", str(SAMPLE), "-o", str(dataset_path)],
                             terminal_width=200)
    assert out.exit_code == 0, out.output
    assert f"fail-slow episodes ({VERDICT_DETECTOR})" in out.output
    assert "x1.25" in out.output and "5.00%" in out.output and "link:b01-b02" in out.output
    assert f"report:  {dataset_path / 'report' / 'index.html'}" in out.output


def test_verdict_is_none_when_only_other_detectors_found_episodes(dataset_path, monkeypatch):
    """No fallback: the window's episode stays in the table, the verdict says none."""
    _only_detect(monkeypatch, functools.partial(_fake_detect, detector="window"))
    out = CliRunner().invoke(app, ["analyze", str(SAMPLE), "-o", str(dataset_path)],
                             terminal_width=200)
    assert out.exit_code == 0, out.output
    assert f"verdict ({VERDICT_DETECTOR}): none" in out.output
    assert "no detector ran" not in out.output
    page = (dataset_path / "report" / "report.md").read_text()
    assert f"Verdict ({VERDICT_DETECTOR}): none" in page


def test_help_names_the_verdict_detector():
    for verb in ("analyze", "report"):
        out = CliRunner().invoke(app, [verb, "--help"], terminal_width=200)
        assert VERDICT_DETECTOR in out.output, verb


def test_missing_dump_is_a_clear_error(tmp_path):
    with pytest.raises(InputError, match="no such file or folder"):
        pipeline.analyze([tmp_path / "nope"], tmp_path / "ds")
    out = CliRunner().invoke(app, ["analyze", str(tmp_path / "nope"), "-o", str(tmp_path / "d")])
    assert out.exit_code == 2 and "no such file or folder" in out.output


def test_corpus_of_nothing_is_a_clear_error(tmp_path):
    with pytest.raises(InputError, match="no job folders"):
        analyze_corpus(tmp_path, tmp_path / "work")


def test_nothing_ingested_says_why_in_one_line(tmp_path):
    """The error counts what was found and carries each failed source's reason, which the CLI
    prints above it (it said "see the errors above" with none above)."""
    dump = tmp_path / "notes.txt"
    dump.write_text("nothing a reader knows\n")
    with pytest.raises(NothingIngested) as stopped:
        pipeline.analyze([dump], tmp_path / "ds")
    assert str(stopped.value) == (
        f"{dump}: nothing was ingested (1 source(s): 1 unreadable); `tracekit formats` lists "
        "the logs tracekit reads, --format forces one")
    [failed] = stopped.value.summary.failed
    assert failed.error.startswith(
        f"{dump}: cannot tell the format of this file; force one with --format (known: ")

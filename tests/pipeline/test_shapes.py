"""Every verb on every dataset shape: timed (tests/report's job), step-only per-worker tables,
normalised and sampled tables, one job-level series without a clock, op traces with a
straggler. Each gives a report, an export and a verdict in the series' own units, with no
traceback."""

from __future__ import annotations

import json
import re

import jsonschema
import polars as pl
import pytest
from typer.testing import CliRunner

from tracekit.attribute.verdict import CONFIDENCE_TIMING
from tracekit.cli import app
from tracekit.core.dataset import open_dataset
from tracekit.pipeline.analyze import analyze
from tracekit.report.document import write_report
from tracekit.report.export import export_job, job_summary
from tracekit.report.job import job_report

from ..report.test_export import TRACE_SCHEMA
from . import shapes

NOT_OBSERVABLE = ("cause not observable from step times alone: no collective calls, op traces "
                  "or monitoring on the steps' clock say whether its compute or its "
                  "communication grew")


@pytest.fixture(scope="module")
def analysed(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("shapes")
    dumps = {
        "steps": shapes.step_table(root / "steps.csv"),
        "normalised": shapes.normalised_table(root / "job_9_norm.csv"),
        "series": shapes.megatron_log(root / "train.log", 80, 40, 1.3, 70),
        "small": shapes.megatron_log(root / "small.log", 18, 8, 1.045, first=1000,
                                     seconds=105.0, jitter=0.003),
        "whatif": shapes.whatif_trace(root / "whatif"),
    }
    return {name: analyze([dump], root / f"ds-{name}", report_dir=root / f"report-{name}")
            for name, dump in dumps.items()}


def _verdict(analysis) -> list[str]:
    return job_summary(open_dataset(analysis.dataset))["verdict"]


def test_step_only_straggler_is_named_from_its_iteration(analysed):
    assert _verdict(analysed["steps"]) == [
        "The job ran 50 % slower for 30 iterations (45 s) from iteration 60 to 89 on rank 2 ("
        f"{NOT_OBSERVABLE}); it cost 14.9 s (12.3 % of the job)."]
    attributed = open_dataset(analysed["steps"].dataset).table("episodes").filter(
        pl.col("detector") == "peers").collect()
    assert attributed.select("target", "cause", "confidence", "inferred").row(0) == (
        "rank:2", "insufficient-evidence", CONFIDENCE_TIMING, False)


def test_normalised_sampled_series_says_ratios_steps_and_what_it_cannot(analysed):
    summary = job_summary(open_dataset(analysed["normalised"].dataset))
    assert summary["verdict"] == [
        "The job ran 40 % slower for 40 samples from second 1001 to 1391 on rank 3 "
        f"({NOT_OBSERVABLE}); it cost 7.9 % of the logged steps' time.",
        "The log holds 200 samples over the 1,991 seconds from 1 to 1991 (one every 10.0 seconds): "
        "slowdowns and the time they span are those sampled; what happened between the "
        "samples, and so the whole job's lost time, is not in the log.",
        "Step times are normalised (no unit): slowdowns are ratios and costs shares of the "
        "logged steps' time, never seconds or a share of the job's completion time."]
    assert summary["axis"] == {"clock": False, "unit": "normalised", "steps": "sample seconds",
                               "first_iteration": 1,
                               "last_iteration": 1991, "coverage": pytest.approx(200 / 1991)}
    assert (summary["lost_s"], summary["jct_slowdown"], summary["median_iteration_s"]) == (
        None, None, None)
    assert summary["logged_share"] == pytest.approx(0.079, abs=5e-4)
    markdown = analysed["normalised"].report_markdown.read_text()
    assert "JCT" not in markdown and "lost (s)" not in markdown and "duration (s)" not in markdown
    assert not re.search(r"\d s\b", markdown.split("## Timeline")[0])
    assert "median iteration time 700 on the normalised scale" in markdown
    assert "200 samples of seconds 1-1991 on 6 ranks" in markdown
    assert "| # | seconds | samples | slowdown |" in markdown and "iteration 1001" not in markdown


def test_job_level_series_without_a_clock(analysed):
    assert _verdict(analysed["series"]) == [
        "The job ran 30 % slower for 30 iterations (2.6 min) from iteration 41 to 70 (not "
        "attributed: no collective calls with timestamps: no timing per group or rank, so the "
        "cause is not observable from step times alone (ingest NCCL logs or the hook CSV)); it "
        "cost 36.0 s (11.3 % of the job)."]
    summary = analysed["series"].report_markdown.read_text().split("## Summary")[1]
    assert summary.startswith("\n\n80 iterations as one job-level series (no per-rank times); "
                              "median iteration time 4.0")


def test_small_persistent_slowdown_is_reported_below_the_threshold(analysed):
    """An 18-line log with a x1.045 step at its 9th line (a slow GPU of a large run)."""
    assert _verdict(analysed["small"]) == [
        "No fail-slow: the job ran at its own pace (median iteration 109.409 s).",
        "The job ran x1.05 from iteration 1008 (10 iterations, to the end of the log), below the "
        "fail-slow threshold x1.10: not a fail-slow, but it cost 48.7 s (2.5 % of the job)."]
    markdown = analysed["small"].report_markdown.read_text()
    assert "none; 0 change point(s) of bocd+b; 1 change(s) below the fail-slow threshold" \
        in markdown
    assert "figures/timeline.png" in markdown


def test_op_trace_straggler_one_answer(analysed):
    """detect, attribute and the stage verdict name the same rank; the cause is its compute."""
    dataset = open_dataset(analysed["whatif"].dataset)
    peers = dataset.table("episodes").filter(pl.col("detector") == "peers").collect()
    assert peers.select("target", "kind", "ranks").row(0) == ("rank:0", "compute", "0")
    verdict = _verdict(analysed["whatif"])
    assert verdict[0].startswith(
        "The job ran 94 % slower for 30 iterations (55 s) from iteration 10 to 39 on rank 0, in "
        "its own compute (cause not attributed: in the op traces, rank(s) 0 spent x2.00 their "
        "stage peers' time in compute (forward / backward ops) and x1.00 in their other ops")
    assert verdict[1] == (
        "Pipeline stages: no pipeline stage holds extra work: the slowest, stage 0 (ranks 1, 2) "
        "computes 0.902 s per step vs 0.901 s for the median stage (x1.00, over 50 steps), "
        "within the x1.10 threshold without the straggler rank(s) 0, whose slowdown is their "
        "own against the peers of their stage.")
    assert "balanced" not in " ".join(verdict)


@pytest.mark.parametrize("shape", ["steps", "normalised", "series", "small", "whatif"])
def test_every_verb_on_every_shape(analysed, shape, tmp_path):
    path = analysed[shape].dataset
    runner = CliRunner()
    for verb in (["detect", str(path), "--json"], ["attribute", str(path), "--json"],
                 ["report", str(path), "-o", str(tmp_path / "report")]):
        out = runner.invoke(app, verb)
        assert out.exit_code == 0, (verb, out.output)
    exported = export_job(open_dataset(path), tmp_path / "export")
    trace = json.loads((exported.folder / "trace.json").read_text())
    jsonschema.validate(trace, TRACE_SCHEMA)
    assert trace["otherData"]["clock"].startswith("steps laid end to end")
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == "iteration"]
    assert slices and all(e["ts"] >= 0 and e["dur"] >= 0 for e in slices)
    episodes = [e for e in trace["traceEvents"] if e.get("cat") == "fail-slow" and e["ph"] == "X"]
    assert len(episodes) == open_dataset(path).table("episodes").filter(
        pl.col("detector") == "peers").collect().height or shape in ("series", "small")
    report = job_report(open_dataset(path))
    assert [f.name for s in report.sections for f in s.figures] == ["timeline"]
    write_report(report, tmp_path / "again")


def test_analyze_json_on_a_step_only_dump(tmp_path):
    dump = shapes.step_table(tmp_path / "steps.csv")
    out = CliRunner().invoke(app, ["analyze", str(dump), "-o", str(tmp_path / "ds"), "--json"])
    assert out.exit_code == 0, out.output
    document = json.loads(out.stdout)
    assert [(e["detector"], e["target"]) for e in document["episodes"]] == [
        ("bocd+b+peers", "rank:2")]

from __future__ import annotations

import polars as pl

from tracekit import open_dataset
from tracekit.core import schema
from tracekit.core.dataset import create_dataset
from tracekit.report.document import write_report
from tracekit.report.job import episode_table, job_report

from .conftest import T0, S, build_job


def test_job_report_files_figures_and_numbers(job_dataset, tmp_path):
    report = job_report(job_dataset)
    written = write_report(report, tmp_path / "out")
    assert [p.name for p in written.figures] == ["timeline.png", "timeline.svg"]
    assert all(p.stat().st_size > 10_000 for p in written.figures)
    page = written.html.read_text()
    markdown = written.markdown.read_text()
    for text in ("120 iterations over 2.2 min on 4 ranks",
                 "Verdict (bocd+b+peers): 1 fail-slow episode(s); 2 change",
                 "Time lost to fail-slows: 14.0 s (JCT slowdown 11.67 %)", "gpu-thermal",
                 "rank:2", "x1.5", "SM clock of gpu h0/2"):
        assert text in page and text in markdown, text
    svg = (tmp_path / "out" / "figures" / "timeline.svg").read_text()
    # panel titles, axis units and the episode label are drawn (svg keeps text as glyph ids,
    # so check the page's embedded figure caption and the title comments instead)
    assert "<svg" in page and "http://" not in page.split("<svg", 1)[0]
    # iterations, SM clock, temperature: a compute episode's evidence has no CNP panel
    assert svg.count("<g id=\"axes_") == 3
    assert "![Iteration time per rank" in markdown


def test_ground_truth_section_matches_label(job_dataset):
    report = job_report(job_dataset)
    truth = next(s for s in report.sections if s.title == "Ground truth").tables[0].frame
    row = truth.row(0, named=True)
    # the verdict numbers its episodes from 1
    assert (row["detected as"], row["delay (s)"], row["delay (iterations)"]) == (1, 3.0, 2)
    assert row["culprit right"] is True and row["cause right"] is True


def test_unattributed_episode_says_so(job_dataset):
    episodes = job_dataset.table("episodes").collect().with_columns(
        pl.lit(None, pl.String).alias(c) for c in ("cause", "target"))
    table = episode_table(episodes)
    assert table["cause"].to_list() == ["not attributed"]
    assert table["culprit"].to_list() == ["-"]


def test_empty_dataset_report_explains(tmp_path):
    report = job_report(create_dataset(tmp_path / "empty"))
    assert "No iterations in this dataset" in report.sections[0].paragraphs[0]


def test_iterations_without_durations_are_reported(tmp_path):
    """A step table whose durations are all NaN (kept as null): the summary says so (it raised
    TypeError formatting a null median)."""
    from tracekit.ingest.pipeline import ingest

    steps = tmp_path / "steps.csv"
    steps.write_text("worker,step,duration_s\n" + "".join(f"{w},{s},nan\n" for w in range(2)
                                                          for s in range(3)))
    ingest([steps], tmp_path / "ds")
    summary = job_report(open_dataset(tmp_path / "ds")).sections[0].paragraphs[0]
    assert summary == "3 iterations on 2 ranks; no iteration has a duration."


def test_validation_verdicts_in_the_job_report(tmp_path):
    dataset = build_job(tmp_path / "validated")
    rows = [
        # check, target, host, gpu, src, dst, suspect, verdict, slowdown, rate, unit
        ("gemm", "gpu:h0/1", "h0", 1, None, None, False, "healthy", 1.01, 231.5, "TFLOP/s"),
        ("gemm", "gpu:h0/2", "h0", 2, None, None, True, "confirmed", 1.43, 162.0, "TFLOP/s"),
        ("p2p", "link:0->2", None, None, 0, 2, True, "refuted", 1.02, 180.2, "GB/s"),
    ]
    names = ["check", "target", "host", "gpu", "src_rank", "dst_rank", "suspect", "verdict",
             "slowdown", "rate", "rate_unit"]
    frame = pl.DataFrame(rows, schema=[(n, schema.VALIDATIONS.schema[n]) for n in names],
                         orient="row")
    dataset.write_table("validations", schema.conform("validations", frame.with_columns(
        job=pl.lit("j1"), episode=pl.lit(0, pl.Int32), threshold=pl.lit(0.1),
        device=pl.lit("NVIDIA H100 80GB HBM3"), ts_ns=pl.lit(T0 + 200 * S),
        evidence=pl.format("{} measured", "target"))))
    dataset.save_manifest()
    report = job_report(dataset)
    section = next(s for s in report.sections if s.title == "Hardware validation")
    assert section.paragraphs[0].startswith(
        "3 GEMM / P2P check result(s) (`tracekit validate`): 1 confirmed, 1 refuted, 1 healthy.")
    table = section.tables[0].frame
    assert table["target"].to_list() == ["gpu:h0/2", "link:0->2", "gpu:h0/1"]
    assert table.row(0, named=True) | {"evidence": None} == {
        "episode": "0", "check": "gemm", "target": "gpu:h0/2", "suspect": "yes",
        "verdict": "confirmed", "slowdown": "x1.43", "slow above": "x1.1",
        "rate": "162.0 TFLOP/s", "evidence": None, "device": "NVIDIA H100 80GB HBM3",
        "checked (UTC)": "2023-11-14 22:16:40"}
    markdown = write_report(report, tmp_path / "out").markdown.read_text()
    assert "## Hardware validation" in markdown and "| gpu:h0/2 | yes | confirmed |" in markdown


def test_no_validation_section_without_checks(job_dataset):
    assert "Hardware validation" not in [s.title for s in job_report(job_dataset).sections]


def test_detector_comparison_lists_every_detector(job_dataset):
    report = job_report(job_dataset)
    table = next(s for s in report.sections if s.title == "Detector comparison").tables[0].frame
    assert table["detector"].to_list() == ["bocd+b", "bocd+b+peers"]
    assert table["episodes"].to_list() == [1, 1]
    assert table["lost (s)"].to_list() == [14.0, 14.0]

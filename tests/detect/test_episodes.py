import json

import numpy as np
import polars as pl
from typer.testing import CliRunner

from tests.detect.conftest import iteration_times
from tracekit import create_dataset, open_dataset
from tracekit.cli import app
from tracekit.core import schema
from tracekit.detect import detect_dataset
from tracekit.detect.episodes import JOB_DETECTORS, detect_series, job_series
from tracekit.detect.registry import make_detector


def write_iterations(path, ranks: int = 4):
    """A job whose ranks all slow by 20 % on iterations [300, 600) and again from 900 on."""
    frames = []
    for rank in range(ranks):
        durations = iteration_times(seed=10 + rank)
        durations[300:600] *= 1.2
        durations[900:] *= 1.3
        ends = (np.cumsum(durations) * 1e9).astype(np.int64) + 1_700_000_000_000_000_000
        frames.append(pl.DataFrame({
            "job": "j1", "rank": rank, "iteration": np.arange(durations.size),
            "t_start_ns": ends - (durations * 1e9).astype(np.int64), "t_end_ns": ends,
            "duration_s": durations, "source": "acf", "quality": "ok"},
            schema_overrides={"rank": pl.Int32}))
    dataset = create_dataset(path, job="j1")
    dataset.write_table("iterations", schema.conform("iterations", pl.concat(frames)))
    dataset.save_manifest()
    return dataset


def test_episodes_from_a_job(tmp_path):
    write_iterations(tmp_path / "ds")
    found = detect_dataset(tmp_path / "ds", ["bocd+v"])
    episodes = found.episodes
    assert episodes["start_iteration"].to_list() == [300, 900]
    assert episodes["end_iteration"].to_list() == [599, 999]
    assert episodes["iterations"].to_list() == [300, 100]
    assert episodes["t_end_ns"].null_count() == 1  # the second is still open at the end
    assert episodes["slowdown"].round(1).to_list() == [1.2, 1.3]
    assert episodes["ranks"].to_list() == ["0,1,2,3", "0,1,2,3"]
    job_events = found.events.filter(pl.col("rank").is_null())
    assert job_events["iteration"].to_list() == [300, 600, 900]
    schema.validate("episodes", episodes)
    schema.validate("events", found.events)


def test_cli_detect_and_changepoints(tmp_path):
    write_iterations(tmp_path / "ds")
    result = CliRunner().invoke(app, ["detect", str(tmp_path / "ds"), "--detector", "bocd+b"])
    assert result.exit_code == 0, result.output
    assert "fail-slow episodes (bocd+b)" in result.output
    series = tmp_path / "series.json"
    series.write_text(json.dumps([0.0] * 50 + [5.0] * 50 + [None] + [0.0] * 49))
    result = CliRunner().invoke(app, ["changepoints", str(series), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == [50, 101]  # row numbers of the file, null skipped
    result = CliRunner().invoke(app, ["changepoints", str(tmp_path / "missing.csv")])
    assert result.exit_code == 2 and "no such file" in result.output


def test_job_series_fills_missing_iterations_and_takes_the_median_of_repeated_ones():
    """Rank 1 has two rows for iteration 0 (their median), rank 0 none for iteration 2 (the
    job's value); a row without a rank counts for the job only."""
    iterations = schema.conform("iterations", pl.DataFrame({
        "job": "j", "rank": [1, 0, 0, 1, 1, None], "iteration": [0, 0, 1, 0, 1, 2],
        "t_start_ns": [0, 0, 1, 0, 1, 2], "t_end_ns": [1, 1, 2, 1, 2, 3],
        "duration_s": [5.0, 1.0, 2.0, 3.0, 4.0, 9.0], "source": "acf", "quality": "ok"}))
    series = job_series(iterations)
    assert series.ranks == [0, 1]
    assert series.matrix.tolist() == [[1.0, 2.0, 9.0], [4.0, 4.0, 9.0]]
    assert series.job["duration_s"].to_list() == [3.0, 3.0, 9.0]


def test_no_episode_on_the_real_pai_job(real_dir, tmp_path):
    """The real Alibaba PAI step table: its workers stop at different times, the last alone
    for 10 samples at 710 (the job ran at ~830); the job series ends where most workers do, so
    no detector mistakes the lone worker for the job's healthy level."""
    from tracekit.ingest.pipeline import ingest

    ingest([real_dir / "alibaba-pai-minibatch" / "job_2_norm.csv"], tmp_path / "ds")
    found = detect_dataset(tmp_path / "ds")
    assert found.episodes.is_empty()
    series = job_series(open_dataset(tmp_path / "ds").table("iterations").collect())
    assert (series.job.height, series.job["iteration"].max()) == (238, 2371)


def test_gapped_iteration_numbers_are_noted():
    from tracekit.detect.episodes import gap_notes

    assert gap_notes(pl.Series([1, 2, 3, 4])) == []
    assert gap_notes(pl.Series([10, 20, 30, 40])) == [
        "iteration numbers have gaps: 27 of the 31 from 10 to 40 are missing (one every 10 "
        "logged); change-point detectors count logged points, episode lengths the iterations "
        "those points stand for"]
    assert gap_notes(pl.Series([1, 2, 4, 5]))[0].startswith(
        "iteration numbers have gaps: 1 of the 5 from 1 to 5 are missing;")


def test_detect_while_another_run_writes_the_dataset_waits_then_refuses_in_one_line(
        tmp_path, monkeypatch):
    """A stage writes its tables under the writer lock: while an ingest holds it, ``detect``
    refuses after the wait (here 0.2 s) with one line, exit 2, and records nothing."""
    from tracekit.core import dataset as dataset_module

    write_iterations(tmp_path / "ds")
    before = (tmp_path / "ds" / "manifest.json").read_text()
    monkeypatch.setattr(dataset_module, "LOCK_WAIT_S", 0.2)
    with dataset_module.dataset_writer(tmp_path / "ds"):
        result = CliRunner().invoke(app, ["detect", str(tmp_path / "ds"), "--detector",
                                          "bocd+b"])
    assert result.exit_code == 2
    assert result.output == (f"error: {tmp_path / 'ds'}: another tracekit run has been writing "
                             "this dataset for over 0.2 s; wait for it to finish and run this "
                             "again\n")
    assert (tmp_path / "ds" / "manifest.json").read_text() == before
    assert not open_dataset(tmp_path / "ds").has_table("episodes")


def test_equal_rank_series_are_detected_once_with_the_result_of_all_of_them():
    """A block with copies of a series gets, for every default detector, the change points of
    stepping every row together (BOCD's joint pruning keeps a run length by its largest
    probability over the rows, which a copy does not change)."""
    rng = np.random.default_rng(3)
    steps = [1.0 + 0.01 * rng.standard_normal(600) for _ in range(2)]
    for series, at in zip(steps, (200, 350), strict=True):
        series[at:] *= 1.3
    matrix = np.vstack([steps[0], steps[1], steps[0], steps[0]])
    for name in JOB_DETECTORS:
        detector = make_detector(name)
        found = detect_series(detector, matrix)
        every_row = (list(detector.detect_many(matrix)) if hasattr(detector, "detect_many")
                     else [detector.detect(row) for row in matrix])
        assert [f.tolist() for f in found] == [f.tolist() for f in every_row], name
        assert found[0].size and found[0].tolist() != found[1].tolist(), name

"""``tracekit changepoints`` on any numeric file: shapes read, several columns, one-line errors,
JSON that parses from a pipe, iteration-time detectors on series with values <= 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tracekit.cli import app
from tracekit.detect import make_detector
from tracekit.detect.series_file import read_series, series_changepoints

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]


def _two_columns(path: Path) -> Path:
    rng = np.random.default_rng(3)
    matrix = 0.5 * rng.standard_normal((120, 2))
    matrix[40:, 0] += 2.0
    matrix[80:, 1] -= 2.0
    rows = [f"{i},{a:.6f},{b:.6f}" for i, (a, b) in enumerate(matrix)]
    path.write_text("\n".join(["step,cpu,mem", *rows]) + "\n")
    return path


def test_every_numeric_column_by_default_and_one_with_column(tmp_path):
    csv = _two_columns(tmp_path / "two.csv")
    values, positions = read_series(csv, "cpu")
    assert values.shape == (120, 1) and positions.tolist() == list(range(120))
    both = runner.invoke(app, ["changepoints", str(csv), "--detector", "pelt", "--param",
                               "penalty=0", "--json", "--column", "mem"])
    assert json.loads(both.output) == [80]
    result = runner.invoke(app, ["changepoints", str(tmp_path / "two.csv"), "--json",
                                 "--detector", "pelt"])
    assert result.exit_code == 0
    # the step column is numeric too: a counter has no change in mean worth its penalty
    assert json.loads(result.output) == [40, 80]


def test_a_one_series_detector_asks_for_a_column(tmp_path):
    result = runner.invoke(app, ["changepoints", str(_two_columns(tmp_path / "two.csv")),
                                 "--detector", "bocd-map"])
    assert result.exit_code != 0
    assert "3 numeric columns" in result.output and "--column" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize("document", [
    {"series": [1.0, 2.0, 3.0]},
    {"series": [{"label": "a"}]},
    {"values": [1.0, 2.0]},
    [[1.0, 2.0], [3.0]],
])
def test_bad_json_shapes_are_one_line_errors(tmp_path, document):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(document))
    result = runner.invoke(app, ["changepoints", str(path)])
    assert result.exit_code != 0
    assert str(path) in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_tcpd_dataset_with_two_series_and_a_missing_value(tmp_path):
    raw = [0.0] * 30 + [5.0] * 30
    document = {"series": [{"label": "a", "raw": [*raw[:10], None, *raw[11:]]},
                           {"label": "b", "raw": raw[::-1]}]}
    path = tmp_path / "tcpd.json"
    path.write_text(json.dumps(document))
    values, positions = read_series(path)
    assert values.shape == (59, 2) and 10 not in positions.tolist()
    assert json.loads(runner.invoke(app, ["changepoints", str(path), "--json"]).output) == [30]
    single = runner.invoke(app, ["changepoints", str(path), "--column", "b", "--json",
                                 "--detector", "binseg"])
    assert json.loads(single.output) == [30]


def test_json_is_one_line_in_a_pipe(tmp_path):
    """Thirty-one change points print past 80 columns: still one line of JSON through a pipe
    (with a small penalty: R's scale() leaves too little variance to pay 31 MBIC penalties)."""
    series = np.repeat(np.tile([0.0, 10.0], 16), 20)
    series += np.random.default_rng(2).standard_normal(series.size)
    path = tmp_path / "steps.json"
    path.write_text(json.dumps(series.tolist()))
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "80"}
    done = subprocess.run([sys.executable, "-c", "from tracekit.cli import app; app()",
                           "changepoints", str(path), "--json", "--detector", "pelt",
                           "--param", "penalty=2"],
                          capture_output=True, text=True, env=env, check=True)
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1
    assert json.loads(lines[0]) == list(range(20, 640, 20))


@pytest.mark.parametrize("name", ["window", "bocd", "bocd+v", "bocd+b"])
def test_iteration_time_detectors_read_a_z_scored_series(name):
    """A series around 0 reaches them at level 1 with 1 % noise: a 20-sigma step is found."""
    rng = np.random.default_rng(5)
    series = rng.standard_normal(200)
    series[100:] += 20.0
    assert series_changepoints(series[:, None], make_detector(name)).tolist() == [100]


def test_a_positive_series_reaches_them_unchanged():
    series = 1.5 * (1.0 + 0.01 * np.random.default_rng(0).standard_normal(200))
    series[120:] *= 1.3
    detector = make_detector("bocd+v")
    assert series_changepoints(series[:, None], detector).tolist() == \
        make_detector("bocd+v").detect(series).tolist() == [120]


def test_a_csv_without_a_header_starts_at_its_first_line(tmp_path):
    """A first line of numbers is row 0, not column names (the change point stays at 40)."""
    csv = tmp_path / "bare.csv"
    csv.write_text("\n".join(["1.0"] * 40 + ["5.0"] * 40) + "\n")
    values, positions = read_series(csv)
    assert values.shape == (80, 1) and positions[0] == 0 and values[0, 0] == 1.0
    result = runner.invoke(app, ["changepoints", str(csv), "--detector", "pelt", "--json"])
    assert json.loads(result.output) == [40]

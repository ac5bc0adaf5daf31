"""The CLI through typer's runner: version, info, ingest and the error paths."""

from __future__ import annotations

from typer.testing import CliRunner

from tracekit import __version__
from tracekit.cli import app
from tracekit.ingest.hook_csv import HEADER

runner = CliRunner()


def write_dump(folder):
    folder.mkdir()
    rows = [f"{i},{1_700_000_000_000_000_000 + i},10,h,1,{i % 2},0,0xa,2,{i // 2},AllReduce,4,7,"
            f"0x1,0x1,-1" for i in range(6)]
    (folder / "calls.csv").write_text("\n".join([HEADER, *rows, "bad"]) + "\n")
    return folder


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"tracekit {__version__}"


def test_ingest_then_info_shows_tables_ranks_and_quarantine(tmp_path):
    dump = write_dump(tmp_path / "dump")
    result = runner.invoke(app, ["ingest", str(dump), "-o", str(tmp_path / "ds")])
    assert result.exit_code == 0, result.output
    assert "hook-csv" in result.output
    info = runner.invoke(app, ["info", str(tmp_path / "ds")], terminal_width=200)
    assert info.exit_code == 0
    assert "collectives" in info.output
    assert "1 quarantined lines" in info.output
    line = next(line for line in info.output.splitlines() if "collectives" in line)
    assert line.split("│")[2].strip() == "6"  # rows
    assert line.split("│")[4].strip() == "2"  # ranks


def test_missing_path_is_one_line_and_status_2(tmp_path):
    result = runner.invoke(app, ["ingest", str(tmp_path / "nope"), "-o", str(tmp_path / "ds")])
    assert result.exit_code == 2
    assert "nope: no such file or folder" in result.output
    assert "Traceback" not in result.output


def test_info_on_missing_dataset_is_status_2(tmp_path):
    result = runner.invoke(app, ["info", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert "no such dataset folder" in result.output


def test_debug_shows_the_traceback(tmp_path):
    result = runner.invoke(app, ["--debug", "info", str(tmp_path / "nope")])
    assert result.exit_code != 0
    assert result.exception is not None


def test_unrecognised_file_exits_1_after_ingesting_the_rest(tmp_path):
    dump = write_dump(tmp_path / "dump")
    (dump / "readme.txt").write_text("hello\n")
    result = runner.invoke(app, ["ingest", str(dump), "-o", str(tmp_path / "ds")])
    assert result.exit_code == 1
    assert "cannot tell the format" in result.output


def test_bad_option_syntax_is_refused(tmp_path):
    dump = write_dump(tmp_path / "dump")
    result = runner.invoke(app, ["ingest", str(dump), "-o", str(tmp_path / "ds"), "--option", "x"])
    assert result.exit_code == 2
    assert "not KEY=VALUE" in result.output

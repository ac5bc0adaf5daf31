"""The CLI through typer's runner: output that is never cut, ``--json``, and exit codes that say
whether the command did what was asked (each "failure that looks like success" of issue 23)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import REPO
from tracekit import __version__
from tracekit.cli import app
from tracekit.cli.support import grouped_messages
from tracekit.ingest.hook_csv import HEADER

runner = CliRunner()
T0_NS = 1_700_000_000_000_000_000


def write_dump(folder, calls: int = 6, t0_ns: int = T0_NS):
    """A hook CSV of two ranks, ``calls`` calls in all, and one bad line (line ``calls + 2``)."""
    folder.mkdir()
    rows = [f"{i},{t0_ns + i},10,h,1,{i % 2},0,0xa,2,{i // 2},AllReduce,4,7,0x1,0x1,-1"
            for i in range(calls)]
    (folder / "calls.csv").write_text("\n".join([HEADER, *rows, "bad"]) + "\n")
    return folder


@pytest.fixture
def dataset(tmp_path):
    result = runner.invoke(app, ["ingest", str(write_dump(tmp_path / "dump")), "-o",
                                 str(tmp_path / "ds")])
    assert result.exit_code == 0, result.output
    return tmp_path / "ds"


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"tracekit {__version__}"


def test_python_dash_m_tracekit():
    done = subprocess.run([sys.executable, "-m", "tracekit", "--version"], capture_output=True,
                          text=True, cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"tracekit {__version__}"


def test_ingest_summary_is_one_line_per_format_and_a_total(tmp_path):
    result = runner.invoke(app, ["ingest", str(write_dump(tmp_path / "dump")), "-o",
                                 str(tmp_path / "ds")])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"ingested into {tmp_path / 'ds'}"
    span = "2023-11-14 22:13:20 .. 2023-11-14 22:13:20 (0 s)"
    assert lines[1:] == [
        f"  hook-csv: sources 1, unchanged 0, failed 0, rows 6, skipped 1, quarantined 1, "
        f"time span {span}",
        f"  total: sources 1, unchanged 0, failed 0, rows 6, skipped 1, quarantined 1, "
        f"time span {span}"]


def test_info_shows_rows_ranks_and_quarantine_in_full(dataset):
    info = runner.invoke(app, ["info", str(dataset)])
    assert info.exit_code == 0
    line = next(line for line in info.output.splitlines() if "collectives" in line)
    assert line == ("  collectives: rows 6, time span 2023-11-14 22:13:20 .. 2023-11-14 "
                    "22:13:20 (0 s), ranks 2, hosts 1")
    assert "1 source, 1 quarantined line, 1 skipped line" in info.output
    assert "ranks 0" not in info.output


def test_quarantine_lists_file_and_line(dataset):
    result = runner.invoke(app, ["quarantine", str(dataset)])
    assert result.exit_code == 0
    first, total = result.stdout.splitlines()
    assert first.startswith(f"{dataset.parent / 'dump' / 'calls.csv'}:8: ")
    assert first.endswith(": bad")
    assert total == "1 quarantined line"
    listed = json.loads(runner.invoke(app, ["quarantine", str(dataset), "--json"]).stdout)
    assert [(row["line_no"], row["raw"]) for row in listed] == [(8, "bad")]


@pytest.mark.parametrize("verb", [["info"], ["quarantine"], ["formats"]])
def test_json_is_one_document(dataset, verb):
    result = runner.invoke(app, [*verb, *([str(dataset)] if verb != ["formats"] else []),
                                 "--json"])
    assert result.exit_code == 0, result.output
    json.loads(result.stdout)


def test_ingest_json_lists_every_source(tmp_path):
    result = runner.invoke(app, ["ingest", str(write_dump(tmp_path / "dump")), "-o",
                                 str(tmp_path / "ds"), "--json"])
    assert result.exit_code == 0
    sources = json.loads(result.stdout)["sources"]
    assert [(s["format"], s["rows"], s["quarantined"]) for s in sources] == [
        ("hook-csv", {"collectives": 6}, 1)]


def test_narrow_output_keeps_every_figure(dataset):
    """80 columns (a pipe, a CI log): the formats' descriptions are not cut to ``…``."""
    from tracekit.ingest.registry import readers

    result = runner.invoke(app, ["formats"], env={"COLUMNS": "80"})
    assert "…" not in result.stdout
    for reader in readers():  # a format that feeds no table says "-", not "tables , "
        assert f"  {reader.format}: tables {' + '.join(reader.tables) or '-'}, description " \
               f"{reader.description}" in result.stdout
    assert "tables , " not in result.stdout


def test_missing_path_is_one_line_and_status_2(tmp_path):
    result = runner.invoke(app, ["ingest", str(tmp_path / "nope"), "-o", str(tmp_path / "ds")])
    assert result.exit_code == 2
    assert "nope: no such file or folder" in result.output
    assert "Traceback" not in result.output


def test_info_on_missing_dataset_is_status_2(tmp_path):
    result = runner.invoke(app, ["info", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert "no such dataset folder" in result.output


def test_report_on_a_missing_folder_says_so(tmp_path):
    result = runner.invoke(app, ["report", str(tmp_path / "nope"), "-o", str(tmp_path / "r")])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: {tmp_path / 'nope'}: no such dataset or corpus folder"


def test_debug_shows_the_traceback(tmp_path):
    result = runner.invoke(app, ["--debug", "info", str(tmp_path / "nope")])
    assert result.exit_code != 0
    assert result.exception is not None


def test_empty_folder_ingests_nothing_and_exits_2(tmp_path):
    (tmp_path / "empty").mkdir()
    result = runner.invoke(app, ["ingest", str(tmp_path / "empty"), "-o", str(tmp_path / "ds")])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"error: {tmp_path / 'ds'}: nothing was ingested (no files under the given paths); "
        "check the dump holds files tracekit reads (`tracekit formats`)")


def test_wrong_forced_format_exits_2_with_a_hint(tmp_path):
    dump = write_dump(tmp_path / "dump")
    result = runner.invoke(app, ["ingest", str(dump), "-o", str(tmp_path / "ds"),
                                 "--format", "nccl-debug"])
    assert result.exit_code == 2
    assert (f"note: {dump / 'calls.csv'}: --format nccl-debug read no rows from it: is it a "
            "nccl-debug file? (leave --format out to sniff the format)") in result.stderr
    assert "nothing was ingested (none of its 1 source held rows)" in result.stderr


def test_unknown_option_key_is_refused(tmp_path):
    dump = write_dump(tmp_path / "dump")
    result = runner.invoke(app, ["ingest", str(dump), "-o", str(tmp_path / "ds"),
                                 "--option", "bogus=1"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --option bogus: no format uses it; accepted keys: ")
    assert not (tmp_path / "ds").exists()


def test_option_of_another_format_is_refused(tmp_path):
    dump = write_dump(tmp_path / "dump")
    result = runner.invoke(app, ["ingest", str(dump), "-o", str(tmp_path / "ds"),
                                 "--format", "hook-csv", "--option", "tz=UTC"])
    assert result.exit_code == 2
    assert result.stderr.strip() == ("error: --option tz: format hook-csv does not use it "
                                     "(used by nccl-debug); accepted keys: none, and the limits "
                                     "(docs/collective-formats.md)")


@pytest.mark.parametrize("forced", [[], ["--format", "hook-csv"]])
def test_a_limit_is_an_option_of_every_format(tmp_path, forced):
    """Each limit's message says to raise it with ``--option NAME=N``: the CLI takes it, with
    or without --format (it refused every limit as an option no format uses)."""
    dump = write_dump(tmp_path / "dump")
    result = runner.invoke(app, ["ingest", str(dump), "-o", str(tmp_path / "ds"), *forced,
                                 "--option", "max_line_bytes=1000", "--json"])
    assert result.exit_code == 0, result.output
    [source] = json.loads(result.stdout)["sources"]
    assert (source["rows"], source["lines"], source["quarantined"]) == ({"collectives": 6}, 8, 1)


def test_option_the_format_uses_is_accepted(tmp_path):
    dump = write_dump(tmp_path / "dump")
    result = runner.invoke(app, ["ingest", str(dump), "-o", str(tmp_path / "ds"),
                                 "--option", "tz=UTC"])
    assert result.exit_code == 0, result.output


def test_unrecognised_files_exit_1_with_one_grouped_error(tmp_path):
    dump = write_dump(tmp_path / "dump")
    for name in ("a.txt", "b.txt", "c.txt"):
        (dump / name).write_text("hello\n")
    result = runner.invoke(app, ["ingest", str(dump), "-o", str(tmp_path / "ds")])
    assert result.exit_code == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1
    assert "cannot tell the format" in errors[0]
    assert f"(3 sources, e.g. {dump / 'a.txt'}, {dump / 'b.txt'}, {dump / 'c.txt'})" in errors[0]


def two_jobs(tmp_path):
    """A folder holding the dumps of two jobs whose rank 0 calls overlap in time."""
    folder = tmp_path / "two"
    folder.mkdir()
    write_dump(folder / "job1", calls=6)
    write_dump(folder / "job2", calls=8)
    return folder


def test_two_jobs_in_one_folder_are_refused(tmp_path):
    folder = two_jobs(tmp_path)
    result = runner.invoke(app, ["ingest", str(folder), "-o", str(tmp_path / "ds")])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"error: {folder}: 2 jobs in one dump: job1 (1 source), job2 (1 source); ingest one with "
        "--job NAME (or each into its own dataset)")
    picked = runner.invoke(app, ["ingest", str(folder), "-o", str(tmp_path / "ds2"),
                                 "--job", "job2", "--json"])
    assert picked.exit_code == 0, picked.output
    assert [s["status"] for s in json.loads(picked.stdout)["sources"]] == ["other job",
                                                                           "ingested"]


def test_two_jobs_without_ids_in_their_names_are_refused(tmp_path):
    """Calls of one rank from two sources at the same time: the check after ingest."""
    folder = tmp_path / "two"
    folder.mkdir()
    write_dump(folder / "first", calls=6)
    write_dump(folder / "second", calls=8)
    result = runner.invoke(app, ["ingest", str(folder), "-o", str(tmp_path / "ds")])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"error: {tmp_path / 'ds'}: rank 0 has calls from {folder / 'first' / 'calls.csv'} and "
        f"{folder / 'second' / 'calls.csv'} at the same time: they look like two jobs; ingest "
        "each job into its own dataset (-o), after removing this one")


def test_a_restarted_job_is_not_two_jobs(tmp_path):
    folder = tmp_path / "restarted"
    folder.mkdir()
    write_dump(folder / "run1", calls=6)
    write_dump(folder / "run2", calls=6, t0_ns=T0_NS + 10**12)
    result = runner.invoke(app, ["ingest", str(folder), "-o", str(tmp_path / "ds")])
    assert result.exit_code == 0, result.output


def test_bad_option_syntax_is_refused(tmp_path):
    dump = write_dump(tmp_path / "dump")
    result = runner.invoke(app, ["ingest", str(dump), "-o", str(tmp_path / "ds"), "--option", "x"])
    assert result.exit_code == 2
    assert "not KEY=VALUE" in result.output


def test_repeated_messages_are_counted_once():
    groups = grouped_messages([("a", "a: no timestamps"), ("b", "b: no timestamps"),
                               ("c", "c: other")])
    assert groups == [("no timestamps", 2, ["a", "b"]), ("other", 1, ["c"])]


def test_analyze_of_two_jobs_exits_2_after_saying_so(tmp_path):
    folder = two_jobs(tmp_path)
    result = runner.invoke(app, ["analyze", str(folder), "-o", str(tmp_path / "ds")])
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1] == (
        f"error: {folder}: 2 jobs in one dump: job1 (1 source), job2 (1 source); ingest one with "
        "--job NAME (or each into its own dataset)")
    picked = runner.invoke(app, ["analyze", str(folder), "-o", str(tmp_path / "ds2"), "--job",
                                 "job1"])
    assert picked.exit_code == 0, picked.output


def test_a_kernel_built_once_is_announced(tmp_path, monkeypatch):
    """The first ingest pauses while a kernel is built: the CLI says so on stderr."""
    import logging

    from tracekit.cli.support import show_build_notices

    show_build_notices()
    messages = []
    monkeypatch.setattr("tracekit.cli.support.errors.print",
                        lambda text, **_: messages.append(text))
    logging.getLogger("tracekit.core.compiled").info("building the %s kernel once", "scan")
    assert messages == ["[dim]note: building the scan kernel once[/]"]


def test_a_truncated_part_met_by_an_analysis_is_one_line_naming_it(tmp_path):
    """Polars' error on a cut Parquet part (it names no file) was a traceback from detect and
    report; it is one line naming the part, exit 2."""
    steps = tmp_path / "steps.csv"
    steps.write_text("worker,step,duration_s\n" + "".join(f"{w},{s},1.5\n" for w in range(2)
                                                          for s in range(20)))
    assert runner.invoke(app, ["ingest", str(steps), "-o", str(tmp_path / "ds")]).exit_code == 0
    [part] = (tmp_path / "ds" / "iterations").rglob("*.parquet")
    part.write_bytes(part.read_bytes()[:-100])
    for command in (["detect"], ["report", "-o", str(tmp_path / "report")]):
        result = runner.invoke(app, [*command, str(tmp_path / "ds")])
        assert result.exit_code == 2, result.output
        [line] = result.stderr.splitlines()
        assert line.startswith(f"error: {part}: damaged Parquet part (parquet: ")
        assert line.endswith("); remove it and ingest its source again")


def test_a_target_that_cannot_be_written_is_one_line_naming_it(dataset, tmp_path):
    """report -o under a file (as a read-only folder or a full disk): one line, exit 2, where
    the report's mkdir was a traceback."""
    (tmp_path / "file").write_text("")
    result = runner.invoke(app, ["report", str(dataset), "-o", str(tmp_path / "file" / "rep")])
    assert result.exit_code == 2
    export = tmp_path / "file" / "rep" / "export"
    assert result.stderr.strip() == f"error: {export}: Not a directory"


@pytest.fixture
def detected(tmp_path):
    """A dataset of iterations slowed twice, after one ``tracekit detect``."""
    from tests.detect.test_episodes import write_iterations

    write_iterations(tmp_path / "ds")
    result = runner.invoke(app, ["detect", str(tmp_path / "ds")], terminal_width=200)
    assert result.exit_code == 0, result.output
    return tmp_path / "ds", result.stdout


def test_detect_shows_the_verdict_and_every_detector_on_request(detected):
    path, shown = detected
    titles = [line for line in shown.splitlines() if line.startswith("fail-slow episodes")]
    assert titles == ["fail-slow episodes (bocd+b+peers)"]
    assert shown.splitlines()[-1] == (
        f"written to {path}: 60 change events and 8 episodes of every detector "
        "(--all-detectors compares them)")
    result = runner.invoke(app, ["detect", str(path), "--all-detectors"], terminal_width=200)
    titles = [line for line in result.stdout.splitlines() if line.startswith("fail-slow")]
    assert titles == [f"fail-slow episodes ({name})" for name in
                      ("window", "bocd", "bocd+v", "bocd+b", "bocd+b+peers")]


def test_attribute_shows_the_verdict_and_every_detector_on_request(detected):
    path, _ = detected
    result = runner.invoke(app, ["attribute", str(path)], terminal_width=200)
    assert result.exit_code == 0, result.output
    heads = [line.split(":")[0] for line in result.stdout.splitlines() if "episode" in line]
    assert heads == ["bocd+b+peers episode 1", "bocd+b+peers episode 2"]
    result = runner.invoke(app, ["attribute", str(path), "--all-detectors"], terminal_width=200)
    heads = [line.split(" episode")[0] for line in result.stdout.splitlines()
             if " episode " in line]
    assert sorted(set(heads)) == ["bocd", "bocd+b", "bocd+b+peers", "bocd+v", "window"]


def test_a_detect_after_attribute_marks_it_stale_until_it_runs_again(detected):
    path, _ = detected
    assert runner.invoke(app, ["attribute", str(path)]).exit_code == 0
    again = runner.invoke(app, ["detect", str(path)], terminal_width=300)
    stale = (f"stale: attribute: detect ran again after it; bring it up to date with "
             f"`tracekit attribute {path}` or a new `tracekit analyze`")
    assert again.stderr.strip().splitlines()[-1] == stale
    assert stale in runner.invoke(app, ["info", str(path)], terminal_width=300).stdout
    assert json.loads(runner.invoke(app, ["info", str(path), "--json"]).stdout)["stale"] == {
        "attribute": stale.removeprefix("stale: attribute: ")}
    from tracekit import open_dataset
    from tracekit.report.job import job_report

    report = job_report(open_dataset(path))
    paragraphs = [text for section in report.sections for text in section.paragraphs]
    assert f"Out of date: attribute ({stale.removeprefix('stale: attribute: ')})." in paragraphs
    sentences = [text for text in paragraphs if text.startswith("The job ran")]
    assert len(sentences) == 2 and all(
        "(not attributed: the attribution is out of date, see the summary)" in text
        for text in sentences)
    runner.invoke(app, ["attribute", str(path)])
    assert "stale" not in runner.invoke(app, ["info", str(path)], terminal_width=300).stdout


def test_a_re_ingest_of_new_rows_marks_the_analysis_stale(tmp_path):
    """Ingesting a grown log into an analysed dataset leaves detect and attribute out of date;
    ingesting the same bytes again does not."""
    log = tmp_path / "steps.csv"
    log.write_text("worker,step,duration_s\n" + "".join(  # worker 2 slow from step 30
        f"{w},{s},{1.5 if w == 2 and s >= 30 else 1.0 + 0.01 * (s % 3)}\n"
        for s in range(60) for w in range(3)))
    path = tmp_path / "ds"
    assert runner.invoke(app, ["analyze", str(log), "-o", str(path)]).exit_code == 0
    same = runner.invoke(app, ["ingest", str(log), "-o", str(path)])
    assert same.exit_code == 0 and "stale" not in same.stderr
    with log.open("a") as out:
        out.write("".join(f"{w},{s},1.0\n" for s in range(60, 70) for w in range(3)))
    grown = runner.invoke(app, ["ingest", str(log), "-o", str(path)], terminal_width=300)
    assert grown.exit_code == 0, grown.output
    stale = [line for line in grown.stderr.splitlines() if line.startswith("stale:")]
    assert stale == [f"stale: {stage}: new or changed sources were ingested after it; bring it "
                     f"up to date with `tracekit {stage} {path}` or a new `tracekit analyze`"
                     for stage in ("detect", "attribute")]
    assert json.loads(runner.invoke(app, ["info", str(path), "--json"]).stdout)["stale"].keys() \
        == {"detect", "attribute"}
    from tracekit import open_dataset
    from tracekit.report.job import job_report

    paragraphs = [text for section in job_report(open_dataset(path)).sections
                  for text in section.paragraphs]
    assert sum(text.startswith("Out of date: ") for text in paragraphs) == 2


def test_a_stage_error_names_the_dataset_it_read(tmp_path):
    """detect finds the iterations table empty: the one line names the dataset folder."""
    from tracekit.core.dataset import create_dataset

    create_dataset(tmp_path / "ds").save_manifest()
    result = runner.invoke(app, ["detect", str(tmp_path / "ds")], terminal_width=300)
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"error: {tmp_path / 'ds'}: no iterations to detect on; ingest collectives or framework "
        "logs first (the iterations table is empty)")


def test_an_error_under_json_is_a_json_object(tmp_path):
    result = runner.invoke(app, ["info", str(tmp_path / "nope"), "--json"])
    assert result.exit_code == 2
    assert json.loads(result.stdout) == {"error": f"{tmp_path / 'nope'}: no such dataset folder",
                                         "exit_status": 2}


def test_a_table_inside_json_is_rows_not_its_printed_form(capsys):
    import polars as pl

    from tracekit.cli.support import print_json

    print_json({"per_stage": pl.DataFrame({"pp_stage": [0, 1], "ratio": [1.0, 1.5]}),
                "path": REPO})
    assert json.loads(capsys.readouterr().out) == {
        "per_stage": [{"pp_stage": 0, "ratio": 1.0}, {"pp_stage": 1, "ratio": 1.5}],
        "path": str(REPO)}


def test_analyze_of_nothing_readable_names_each_file_and_what_to_do(tmp_path):
    (tmp_path / "empty").mkdir()
    result = runner.invoke(app, ["analyze", str(tmp_path / "empty"), "-o", str(tmp_path / "o")],
                           terminal_width=400)
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: {tmp_path / 'empty'}: nothing was ingested (no files under it); "
        "`tracekit formats` lists the logs tracekit reads, --format forces one")
    (tmp_path / "notes.txt").write_text("hello\nworld\n")
    result = runner.invoke(app, ["analyze", str(tmp_path / "notes.txt"), "-o",
                                 str(tmp_path / "o2")], terminal_width=400)
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.exit_code == 2 and len(lines) == 2
    assert lines[0].startswith(f"error: {tmp_path / 'notes.txt'}: cannot tell the format of "
                               "this file; force one with --format")
    assert lines[1].endswith("nothing was ingested (1 source(s): 1 unreadable); `tracekit "
                             "formats` lists the logs tracekit reads, --format forces one")


def test_analyze_shows_ingest_notes_and_takes_format_and_options(tmp_path):
    """An NCCL log without timestamps: ingest's note (which variable to set) reaches the user,
    and the stage that could not run says where to look next."""
    (tmp_path / "nccl.log").write_text(
        "gpu01:1:1 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 count 4 "
        "datatype 7 op 0 root 0 comm 0xa [nranks=2] stream 0x1\n")
    result = runner.invoke(app, ["analyze", str(tmp_path / "nccl.log"), "-o", str(tmp_path / "o"),
                                 "--format", "nccl-debug"], terminal_width=400)
    assert result.exit_code == 0, result.output
    assert "enable NCCL_DEBUG_TIMESTAMP_LEVELS=INFO" in result.stderr
    assert (f"no verdict: detection did not run (no iterations to detect on); `tracekit info "
            f"{tmp_path / 'o'}` shows what was ingested") in result.stdout
    as_json = runner.invoke(app, ["analyze", str(tmp_path / "nccl.log"), "-o",
                                  str(tmp_path / "o2"), "--json"])
    notes = json.loads(as_json.stdout)["notes"]
    assert [n["source"] for n in notes] == [str(tmp_path / "nccl.log")] * len(notes)
    assert any("NCCL_DEBUG_TIMESTAMP_LEVELS" in n["note"] for n in notes)
    refused = runner.invoke(app, ["analyze", str(tmp_path / "nccl.log"), "-o",
                                  str(tmp_path / "o"), "--option", "nonsense=1"])
    assert refused.exit_code == 2 and "--option nonsense: no format uses it" in refused.output


def _verbs(group=None, path=()):
    """Every command path of the CLI, the groups included (``()``, ``("synth",)``, ...)."""
    import typer.main

    group = group or typer.main.get_command(app)
    yield path
    for name, verb in getattr(group, "commands", {}).items():
        yield from _verbs(verb, (*path, name))


@pytest.mark.parametrize("verb", list(_verbs()), ids=lambda v: " ".join(v) or "tracekit")
def test_every_help_fits_80_columns_with_every_word_whole(verb):
    import re

    import typer.main

    result = runner.invoke(app, [*verb, "--help"], terminal_width=80, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    page = result.stdout
    assert max(map(len, page.splitlines())) <= 80, page
    assert not re.search(r"<(str|int|float|path|bool|list\[)|\{\w+\}|…", page), page
    command = typer.main.get_command(app)
    for name in verb:
        command = command.commands[name]
    words = " ".join(page.split())
    for param in command.params:
        for word in (param.help or "").split():
            assert word in words, f"{' '.join(verb)}: {word!r} of {param.name} is cut"


def test_eval_with_nothing_detected_scores_the_verdict_as_missing_and_warns(tmp_path):
    """Two labeled datasets without episodes: the verdict's row says both fail-slows were
    missed (recall 0), and a warning says why the other detectors have no row."""
    import polars as pl

    from tracekit import create_dataset
    from tracekit.core import schema
    from tracekit.detect.verdict import VERDICT_DETECTOR

    for job in ("a", "b"):
        dataset = create_dataset(tmp_path / "corpus" / job, job=job)
        dataset.write_table("labels", schema.conform("labels", pl.DataFrame({
            "job": job, "episode": [1], "fail_slow": [True], "kind": ["compute"],
            "cause": ["gpu-thermal"], "target": ["rank:0"], "t_start_ns": [T0_NS],
            "t_end_ns": [T0_NS + 10**9]}, schema_overrides={"episode": pl.Int32})))
        dataset.save_manifest()
    result = runner.invoke(app, ["eval", str(tmp_path / "corpus"), "--work",
                                 str(tmp_path / "work"), "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    none = {"percent": None, "count": 0, "of": 0}
    assert document["job_level"] == [
        {"detector": VERDICT_DETECTOR, "category": category, "jobs": 2, "tp": 0, "fp": 0,
         "tn": 0, "fn": 2, "accuracy": {"percent": 0.0, "count": 0, "of": 2}, "fpr": none,
         "fnr": {"percent": 100.0, "count": 2, "of": 2}, "localisation": none,
         "cause_accuracy": none} for category in ("unknown", "all")]
    assert document["episode_level"][1] == {
        "detector": VERDICT_DETECTOR, "category": "all", "labels": 2, "detections": 0,
        "delay_s_median": None, "delay_s_max": None, "delay_iterations_median": None,
        "delay_iterations_max": None, "alarm_delay_s_median": None,
        "alarm_delay_iterations_median": None, "precision": none,
        "recall": {"percent": 0.0, "count": 0, "of": 2}, "localisation": none,
        "cause_accuracy": none}
    assert document["by_cause"] == [
        {"detector": VERDICT_DETECTOR, "cause": "gpu-thermal", "labels": 2,
         "recall": {"percent": 0.0, "count": 0, "of": 2},
         "culprit": {"percent": 0.0, "count": 0, "of": 2},
         "cause_right": {"percent": 0.0, "count": 0, "of": 2}}]
    assert "no detector found an episode in any of the 2 jobs of" in " ".join(
        result.stderr.split())


def test_a_healthy_job_is_labeled_with_an_empty_list(tmp_path):
    (tmp_path / "dump").mkdir()
    write_dump(tmp_path / "dump" / "ranks")
    (tmp_path / "dump" / "labels.json").write_text("[]\n")
    result = runner.invoke(app, ["ingest", str(tmp_path / "dump"), "-o", str(tmp_path / "ds"),
                                 "--json"])
    assert result.exit_code == 0, result.output
    formats = {Path(s["path"]).name: (s["format"], s["status"])
               for s in json.loads(result.stdout)["sources"]}
    assert formats["labels.json"] == ("labels-json", "ingested")



def test_attribute_prints_the_time_split_verdict_of_a_profiler_trace(tmp_path):
    """``attribute`` alone gives the job verdict of a profiler trace's time split, as analyze
    and the report do (the committed gloo job whose rank 1 sends 30 ms late)."""
    traces = REPO / "tests" / "data" / "torch_profiler" / "send_python_export"
    ingest = runner.invoke(app, ["ingest", str(traces), "-o", str(tmp_path / "ds")])
    assert ingest.exit_code == 0, ingest.output
    result = runner.invoke(app, ["attribute", str(tmp_path / "ds")], terminal_width=2000)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "time split: late-send, rank:1"
    assert lines[1].startswith("  rank 1 spent 44.0 ms per iteration on its own work")
    shown = json.loads(runner.invoke(app, ["attribute", str(tmp_path / "ds"), "--json"]).stdout)
    assert {k: shown["time_split"][k] for k in ("kind", "cause", "target", "confidence")} == {
        "kind": "communication", "cause": "late-send", "target": "rank:1", "confidence": 0.63}

"""The limits of one ingest: each hostile dump of issue 22, rebuilt small, ends in a one-line
error naming the file (or in parsed rows) within bounded memory, and each limit can be raised."""

from __future__ import annotations

import gzip
import hashlib
import io
import pickle
import re
import resource
import tracemalloc

import polars as pl
import pytest

from tracekit import open_dataset
from tracekit.core.errors import InputError
from tracekit.ingest import safe_pickle
from tracekit.ingest.base import LINE_BATCH_BYTES, Source
from tracekit.ingest.limits import Limits, check_nesting, json_nesting
from tracekit.ingest.pipeline import ingest

BOUND_BYTES = 256 * 1024**2
"""What a refused hostile input may cost the test process: far below what reading it would
(gigabytes), far above what refusing it takes."""


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def only_failure(summary) -> str:
    [source] = summary.sources
    assert source.status == "failed"
    assert "\n" not in source.error
    return source.error


def test_limits_come_from_options_and_leave_the_rest():
    options = {"max_line_bytes": "100", "tz": "UTC"}
    assert Limits.from_options(options) == Limits(max_line_bytes=100)
    assert options == {"tz": "UTC"}
    with pytest.raises(InputError, match=r"--option max_nesting='deep' is not a whole number"):
        Limits.from_options({"max_nesting": "deep"})


@pytest.mark.parametrize("forced", [None, "nccl-debug", "hook-csv", "prometheus-text"])
def test_gzip_of_zeros_is_refused_without_decompressing(tmp_path, forced):
    """2 MB of gzip that polars would decompress to 2 GB, with and without --format: it is
    gunzipped as an archive member is, and refused at the archive's expansion limit."""
    bomb = tmp_path / "zeros.log.gz"
    bomb.write_bytes(gzip.compress(bytes(2 * 1024**2), compresslevel=9) * 1000)
    assert bomb.stat().st_size < 2.1e6
    before = peak_rss_bytes()
    error = only_failure(ingest([bomb], tmp_path / "ds", format=forced))
    assert re.fullmatch(rf"{re.escape(str(bomb))}: the file expands \d{{3}},?\d*x its size "
                        r"\(limit 200x: a compression bomb\?\); if it is trusted, raise it "
                        r"with --option max_expansion=N", error), error
    assert peak_rss_bytes() - before < BOUND_BYTES


def test_zlib_data_forced_as_a_truth_csv_is_refused_without_decompressing(tmp_path):
    """A 1 MB zlib stream of 1 GiB of zeros with ``--format truth-csv``: the reader handed the
    file to polars, which decompressed it (1.2 GB peak); it is refused from its header."""
    import zlib

    bomb = tmp_path / "iterations.csv"
    bomb.write_bytes(zlib.compress(bytes(256 * 1024**2), 9))
    before = peak_rss_bytes()
    error = only_failure(ingest([bomb], tmp_path / "ds", format="truth-csv"))
    assert peak_rss_bytes() - before < BOUND_BYTES
    assert error == (f"{bomb}:1: not a truth iteration CSV: the header is not "
                     "iteration,t_start_ns,t_end_ns,duration_s")


def test_a_json_array_forced_as_a_synth_manifest_is_one_error(tmp_path):
    """It raised AttributeError from the reader, which the ingest does not catch."""
    spec = tmp_path / "synth.json"
    spec.write_text("[1, 2]")
    assert only_failure(ingest([spec], tmp_path / "ds", format="synth-manifest")) == (
        f"{spec}: not a synth job description: the JSON is not an object")


def test_block_that_starts_like_zlib_is_split_as_text(tmp_path):
    """``x^`` is zlib's magic to polars: a log starting so is text, read line by line."""
    log = tmp_path / "train.log"
    log.write_text("x^ not compressed\n" + "gpu-a17:1:1 [0] NCCL INFO cudaDriverVersion 1\n")
    [source] = ingest([log], tmp_path / "ds", format="nccl-debug").sources
    assert (source.status, source.lines, source.skipped) == ("ingested", 2, 2)


def test_a_long_line_past_a_batch_is_quarantined_and_the_rest_of_the_file_read(tmp_path):
    """A run of zeros without a line end is one line: it is skipped from the limit (16 MiB
    past the first batch) to its end without being held, quarantined with its number, and the
    lines after it are read; raising the limit reads it as a line."""
    log = tmp_path / "rank0.log"
    log.write_bytes(b"short\n" * 3 + bytes(2 * LINE_BATCH_BYTES + 1) + b"\nshort\n")
    before = peak_rss_bytes()
    [source] = ingest([log], tmp_path / "ds", format="nccl-debug").sources
    assert peak_rss_bytes() - before < BOUND_BYTES
    assert (source.status, source.lines, source.skipped, source.quarantined) == (
        "ingested", 5, 4, 1)
    [row] = open_dataset(tmp_path / "ds")["quarantine"].collect().rows(named=True)
    assert (row["source"], row["line_no"], row["raw"]) == (str(log), 4, "\x00" * 500)
    assert row["reason"] == ("line exceeds the limit of 16,777,216 bytes; if the input is "
                             "trusted, raise it with --option max_line_bytes=N (33,554,433 "
                             "bytes)")
    [record] = open_dataset(tmp_path / "ds").manifest["sources"]
    assert record["sha256"] == hashlib.sha256(log.read_bytes()).hexdigest()  # hashed again
    [raised] = ingest([log], tmp_path / "raised", format="nccl-debug",
                      options={"max_line_bytes": str(4 * LINE_BATCH_BYTES)}).sources
    assert (raised.status, raised.lines, raised.quarantined) == ("ingested", 5, 0)


def test_every_line_over_the_limit_is_quarantined_inside_a_batch_too(tmp_path):
    """Lines inside one batch are held to the limit as well (the splitter only looked where a
    line crossed a batch): each is one quarantined line, and the file's other lines parse."""
    from tests.ingest.test_pipeline import hook_log

    lines = hook_log(0, 6).splitlines(keepends=True)
    lines[2:2] = ["1" * 5000 + "\n"]
    lines[5:5] = ["2" * 3001 + "\n"]
    lines.append("3" * 4000)  # the last line, without a line end
    log = tmp_path / "rank0.csv"
    log.write_text("".join(lines))
    [source] = ingest([log], tmp_path / "ds", options={"max_line_bytes": "3000"}).sources
    assert (source.status, source.lines, source.rows, source.quarantined) == (
        "ingested", 10, {"collectives": 6}, 3)
    quarantine = open_dataset(tmp_path / "ds")["quarantine"].collect().sort("line_no")
    assert quarantine["line_no"].to_list() == [3, 6, 10]
    assert quarantine["raw"].to_list() == ["1" * 500, "2" * 500, "3" * 500]
    assert quarantine["reason"].str.ends_with(" (5,000 bytes)").to_list() == [True, False, False]


def test_a_source_is_read_again_when_its_limits_change(tmp_path):
    """A line quarantined under a low limit is read once the limit is raised on a later ingest
    into the same dataset: the source's record keeps the limits it was read under, so the same
    bytes under other limits are not "unchanged"."""
    from tests.ingest.test_pipeline import hook_log

    lines = hook_log(0, 4).splitlines(keepends=True)
    lines[2] = lines[2].rstrip("\n") + " " * 3000 + "\n"  # trailing blanks: still one call
    log = tmp_path / "rank0.csv"
    log.write_text("".join(lines))
    low = {"max_line_bytes": "3000"}
    [first] = ingest([log], tmp_path / "ds", options=dict(low)).sources
    [again] = ingest([log], tmp_path / "ds", options=dict(low)).sources
    [raised] = ingest([log], tmp_path / "ds").sources
    assert [(s.status, s.rows, s.quarantined) for s in (first, again, raised)] == [
        ("ingested", {"collectives": 3}, 1), ("unchanged", {"collectives": 3}, 1),
        ("ingested", {"collectives": 4}, 0)]
    [record] = open_dataset(tmp_path / "ds").manifest["sources"]
    assert record["limits"]["max_line_bytes"] == Limits().max_line_bytes
    assert open_dataset(tmp_path / "ds")["collectives"].collect().height == 4


def test_long_line_of_a_stream_that_cannot_seek(tmp_path):
    """Archive members larger than the in-memory spool are files; small ones and pipes are
    streams: both splitters skip a long line and keep its number and first bytes."""
    from tracekit.ingest.base import iter_line_blocks

    class Pipe(io.BytesIO):
        def seekable(self):
            return False

    data = b"a\nb\n" + b"x" * 10_000 + b"\nc\n" + b"y" * 5000
    for opener in (lambda: Pipe(data), lambda: io.BytesIO(data)):
        source = Source("pipe", len(data), opener, limits=Limits(max_line_bytes=3000))
        assert b"".join(iter_line_blocks(source, batch_bytes=1024)) == b"a\nb\n\nc\n\n"
        assert list(source.overlong) == [(3, b"x" * 500, 10_000), (5, b"y" * 500, 5000)]


@pytest.mark.parametrize("seekable", [True, False])
@pytest.mark.parametrize(("length", "batch"), [(10_000, 1024), (3500, 8192)])
def test_long_line_after_several_blocks_is_numbered_in_the_file(seekable, length, batch):
    """Good blocks are not counted as they pass (a seekable stream is read again to number
    the long line): the number is still the line's in the whole file, for a line skipped
    past its block (10,000 bytes) and one set aside inside its block (3,500: the third)."""
    from tracekit.ingest.base import iter_line_blocks

    class Stream(io.BytesIO):
        def seekable(self):
            return seekable

    data = b"ab\n" * 6000 + b"x" * length + b"\ncd\n"
    source = Source("log", len(data), lambda: Stream(data), limits=Limits(max_line_bytes=3000))
    assert b"".join(iter_line_blocks(source, batch_bytes=batch)) == b"ab\n" * 6000 + b"\ncd\n"
    assert list(source.overlong) == [(6001, b"x" * 500, length)]


def test_blocks_over_the_limit_without_a_long_line_are_not_read_again(monkeypatch):
    """With the default limit of one batch nearly every block is a line longer than the limit
    (it runs to the line end after the batch) and is looked at for long lines; numbering each
    read the file again up to it, quadratic in the file's size. Only a long line found is
    numbered."""
    from tracekit.ingest import base

    data = b"abcdefg\n" * 1000
    source = Source("log", len(data), lambda: io.BytesIO(data),
                    limits=Limits(max_line_bytes=1024))
    monkeypatch.setattr(base._LineNumbers, "at",
                        lambda *_: pytest.fail("a good block was numbered"))
    blocks = list(base.iter_line_blocks(source, batch_bytes=1024))
    assert (len(blocks), {len(block) > 1024 for block in blocks[:-1]}) == (8, {True})
    assert b"".join(blocks) == data and not source.overlong


def test_many_long_lines_read_the_file_again_once_in_all(monkeypatch):
    """Each long line is numbered from the one before, not from the file's start: 40 long
    lines cost one more pass over the file, not 40 passes up to each (a hostile file of long
    lines was quadratic in its size)."""
    from tracekit.ingest import base

    data = (b"ab\n" * 400 + b"x" * 1500 + b"\n") * 40
    numbered, at = [], base._LineNumbers.at

    def counting(numbers, start):
        numbered.append(start - numbers.offset)  # the bytes read again to number this line
        return at(numbers, start)

    monkeypatch.setattr(base._LineNumbers, "at", counting)
    source = Source("log", len(data), lambda: io.BytesIO(data), limits=Limits(max_line_bytes=1000))
    blocks = b"".join(base.iter_line_blocks(source, batch_bytes=2048))
    assert [line_no for line_no, _, _ in source.overlong] == [401 * k for k in range(1, 41)]
    assert blocks == (b"ab\n" * 400 + b"\n") * 40
    assert len(numbered) == 40 and sum(numbered) < len(data)


def test_shared_reference_pickle_is_refused_quickly():
    """40 levels of ``x = [x, x]``: a few hundred bytes, 2^40 nodes to any walk."""
    node: list = []
    for _ in range(40):
        node = [node, node]
    data = pickle.dumps({"version": "2.1", "entries": node}, protocol=2)
    assert len(data) < 400
    with pytest.raises(InputError, match=r"^fr0: shared references expand the \d+-byte document "
                       "beyond one node per byte"):
        safe_pickle.loads(data, "fr0")


def test_unshared_pickle_of_the_same_shape_loads():
    tree = {"entries": [[i, [i, str(i)]] for i in range(1000)]}
    assert safe_pickle.loads(pickle.dumps(tree), "fr0") == tree


@pytest.mark.parametrize("kind", ["pickle", "json"])
def test_deep_flight_recorder_entry_is_refused(tmp_path, kind):
    path = tmp_path / f"fr_trace_rank_0.{'pkl' if kind == 'pickle' else 'json'}"
    if kind == "pickle":  # written by hand: pickle.dumps itself recurses on it
        def text(value: str) -> bytes:
            return b"X" + len(value).to_bytes(4, "little") + value.encode()

        path.write_bytes(b"\x80\x02}(" + text("version") + text("2.1") + text("entries")
                         + b"]}" + text("input_sizes") + b"]" * 5000 + b"a" * 4999
                         + b"sau.")
    else:
        path.write_text('{"version": "2.1", "entries": [{"input_sizes": '
                        + "[" * 5000 + "]" * 5000 + "}]}")
    error = only_failure(ingest([path], tmp_path / "ds", format="flight-recorder"))
    assert error == (f"{path}: nested deeper than the limit of 64 levels; if the input is "
                     "trusted, raise it with --option max_nesting=N")


def test_malformed_flight_recorder_entries_are_quarantined_one_by_one(tmp_path):
    entries = [
        {"profiling_name": "nccl:all_reduce", "time_created_ns": 10, "duration_ms": 1.0,
         "input_sizes": [[2, 2]], "input_dtypes": ["Float"], "process_group": ["0", "x"]},
        {"profiling_name": "nccl:all_reduce", "time_created_ns": 20,
         "input_sizes": [[2.5, "a"]]},                                   # float / text sizes
        {"profiling_name": "nccl:all_reduce", "time_created_ns": 30, "duration_ms": float("inf")},
        {"profiling_name": "nccl:all_reduce", "time_created_ns": 2**70},  # beyond Int64
        {"profiling_name": "nccl:all_reduce", "time_created_ns": 40, "op_id": "seven",
         "input_dtypes": "Float", "process_group": 3},                   # scalars, not lists
    ]
    dump = {"version": "2.1", "pg_config": {"0": {"name": "0", "ranks": 5}}, "entries": entries}
    path = tmp_path / "fr_trace_rank_0.pkl"
    path.write_bytes(pickle.dumps(dump))
    [source] = ingest([path], tmp_path / "ds").sources
    assert source.status == "ingested"
    assert (source.lines, source.rows, source.quarantined) == (
        5, {"collectives": 1, "comms": 1}, 4)
    quarantine = pl.read_parquet(tmp_path / "ds" / "quarantine" / "*.parquet").sort("line_no")
    assert quarantine["line_no"].to_list() == [2, 3, 4, 5]
    assert quarantine["reason"].str.starts_with("malformed entry (").to_list() == [
        True, True, False, True]  # entry 4's creation time is beyond Int64: no usable time


def test_prometheus_json_with_a_deep_label_is_refused(tmp_path):
    """A 2.2 KB query result whose label is a 1,000-deep list (13.8 GB in polars' decoder)."""
    label = "[" * 1000 + "]" * 1000
    path = tmp_path / "query.json"
    path.write_text('{"status": "success", "data": {"resultType": "vector", "result": '
                    f'[{{"metric": {{"gpu": {label}}}, "value": [1, "2"]}}]}}}}')
    tracemalloc.start()
    error = only_failure(ingest([path], tmp_path / "ds"))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert error == (f"{path}: nested deeper than the limit of 64 levels; if the input is "
                     "trusted, raise it with --option max_nesting=N")
    assert peak < BOUND_BYTES


def test_json_nesting_ignores_brackets_in_strings_across_blocks(monkeypatch):
    from tracekit.ingest import limits

    monkeypatch.setattr(limits, "JSON_SCAN_BYTES", 3)
    text = rb'{"a": "[[[\"]]", "b": "\\", "c": [[1], {"d": []}]}'
    assert json_nesting(io.BytesIO(text)) == 4
    assert json_nesting(io.BytesIO(b"[" * 70 + b"]" * 70)) == 70


def test_check_nesting_is_iterative():
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(InputError, match="nested deeper than the limit of 64 levels"):
        check_nesting(deep, 10**9, Limits(), "x")
    check_nesting(deep, 10**9, Limits(max_nesting=200_000), "x")


def test_one_megabyte_line_of_glued_nccl_records_is_cut_into_records(tmp_path):
    """One line of many spliced COLL records (4.8 GB through the recursive cut) parses into
    one call per record within bounded memory."""
    record = ("gpu-a17:31171:31171 [1] NCCL INFO AllReduce: opCount {n:x} sendbuff 0x1 "
              "recvbuff 0x1 count 1 datatype 7 op 0 root 0 comm 0x5607be21c4d0 [nranks=16] "
              "stream 0x5607bd9a2c40")
    glued = "".join(record.format(n=n) for n in range(6000))
    assert len(glued) > 10**6
    log = tmp_path / "rank1.log"
    log.write_text("gpu-a17:31171:31171 [1] NCCL INFO comm 0x5607be21c4d0 rank 1 nranks 16 "
                   "cudaDev 1 nvmlDev 1 busId 2a000 commId 0x1 - Init COMPLETE\n" + glued + "\n")
    before = peak_rss_bytes()
    [source] = ingest([log], tmp_path / "ds", format="nccl-debug").sources
    assert peak_rss_bytes() - before < BOUND_BYTES
    assert source.status == "ingested"
    assert source.rows["collectives"] == 6000
    calls = pl.read_parquet(tmp_path / "ds" / "collectives" / "**" / "*.parquet")
    assert calls["op_count"].sort().to_list() == list(range(6000))


WHOLE_DOCUMENTS = {"flight-recorder", "prometheus-json", "torch-profiler"}
"""Formats read as one document, not line by line: a long line inside one is the document's
(bounded by ``max_whole_file_bytes``, or by ``max_line_bytes`` per event where the document is
streamed, as Kineto traces are)."""


def _line_samples() -> list:
    from tests.conftest import FORMATS

    return sorted(FORMATS.glob("*")) if FORMATS.is_dir() else []


@pytest.mark.parametrize("sample", _line_samples(), ids=lambda path: path.name)
def test_a_long_line_in_any_line_format_costs_one_quarantined_line(sample, tmp_path):
    """Each line-based sample, with a 10,000-byte line after its first, reads as it does
    without it plus one quarantined line 2: no row lost, no line unaccounted for."""
    options = {"max_line_bytes": "4096", "start": "2026-01-01T00:00:00Z", "interval": "1000"}

    def read(name: str, body: bytes, format: str | None = None):
        (tmp_path / name).mkdir()
        (tmp_path / name / sample.name).write_bytes(body)
        [summary] = ingest([tmp_path / name / sample.name], tmp_path / f"ds-{name}",
                           format=format, options=options).sources
        return summary

    data = sample.read_bytes()
    plain = read("plain", data)
    if "carry no timestamps" in (plain.error or ""):  # a snapshot: its time in a comment
        data = b"# ts=1700000000\n" + data
        plain = read("stamped", data)
    if plain.format in WHOLE_DOCUMENTS:
        pytest.skip(f"{plain.format} is read as one document")
    cut = data.find(b"\n") + 1
    long = read("long", data[:cut] + b"z" * 10_000 + b"\n" + data[cut:], plain.format)
    assert (plain.status, long.status) == ("ingested", "ingested"), long.error
    assert (long.lines, long.skipped, long.quarantined, long.rows) == (
        plain.lines + 1, plain.skipped, plain.quarantined + 1, plain.rows)
    assert 2 in open_dataset(tmp_path / "ds-long")["quarantine"].collect()["line_no"]


@pytest.mark.parametrize("sample", _line_samples(), ids=lambda path: path.name)
def test_cr_only_line_ends_read_as_the_same_lines_in_any_line_format(sample, tmp_path):
    """Each line-based sample with its line ends made ``\\r`` alone reads the rows, skipped
    and quarantined lines it reads with ``\\n`` (a CR-only file was one line: skipped -1)."""
    data = sample.read_bytes().replace(b"\r\n", b"\n")
    summaries = []
    for name, body in (("lf", data), ("cr", data.replace(b"\n", b"\r"))):
        (tmp_path / name).mkdir()
        (tmp_path / name / sample.name).write_bytes(body)
        [summary] = ingest([tmp_path / name / sample.name], tmp_path / f"ds-{name}",
                           format=summaries[0].format if summaries else None,
                           options={"start": "2026-01-01T00:00:00Z", "interval": "1000",
                                    "ts": "1700000000"}).sources
        summaries.append(summary)
    lf, cr = summaries
    if lf.format in WHOLE_DOCUMENTS:
        pytest.skip(f"{lf.format} is read as one document")
    assert lf.status == "ingested", lf.error
    assert (cr.status, cr.lines, cr.skipped, cr.quarantined, sum(cr.rows.values())) == (
        lf.status, lf.lines, lf.skipped, lf.quarantined, sum(lf.rows.values())), cr.error
    assert _cut_last_lines(tmp_path / "ds-cr") == _cut_last_lines(tmp_path / "ds-lf")


def _cut_last_lines(dataset) -> int:
    reasons = open_dataset(dataset)["quarantine"].collect()["reason"]
    return reasons.str.starts_with("truncated last line").sum()

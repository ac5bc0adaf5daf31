"""The compiled hook CSV scan: the values it reads from a well-formed block, every edge at
which it refuses a block (which then goes to the polars path), and that the reader's whole
output is the same with and without it (good rows mixed with damage, blocks cut anywhere)."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from tests.ingest.collective_helpers import read_all
from tests.ingest.test_hook_csv import ROW, field_edits
from tracekit.ingest import base, hook_csv, hook_csv_scan
from tracekit.ingest.base import Source
from tracekit.ingest.hook_csv import HEADER, HookCsvReader

pytestmark = pytest.mark.skipif(hook_csv_scan.compiled() is None,
                                reason="no C compiler: only the polars path runs")

INT64_MAX = 2**63 - 1


def scanned(*rows: str, end: str = "\n", terminated: bool = True) -> pl.DataFrame | None:
    """The scan's rows with the texts their ids index, or None when it refuses the block."""
    result = hook_csv_scan.scan((end.join(rows) + (end if terminated else "")).encode())
    if result is None:
        return None
    return result.rows.with_columns(
        pl.lit(result.strings).gather(pl.col("host_id")).alias("host"),
        pl.lit(result.strings).gather(pl.col("comm_id")).alias("comm"),
        pl.lit(result.op_names).gather(pl.col("op_id")).alias("op"),
    ).drop("host_id", "comm_id", "op_id")


def test_values_of_a_well_formed_block():
    send = ROW.replace("AllReduce", "Send").replace(",180500,", ",,").replace(",-1", ",5")
    rows = scanned(ROW, send, ROW.replace(",1024,9,", ",3,7,").replace(",-1", ","))
    assert rows.select("rank", "host", "pid", "cuda_dev", "comm", "nranks", "op", "seq",
                       "count", "datatype", "bytes", "peer", "t_start_ns", "t_end_ns").rows() == [
        (3, "gpu-b03", 88412, 0, "0x562f1f4d2e80", 8, "allreduce", 41, 1024, 9, 2048, -1,
         1760434267000000000, 1760434267000180500),
        (3, "gpu-b03", 88412, 0, "0x562f1f4d2e80", 8, "send", 41, 1024, 9, 2048, 5,
         1760434267000000000, -1),
        (3, "gpu-b03", 88412, 0, "0x562f1f4d2e80", 8, "allreduce", 41, 3, 7, 12, -1,
         1760434267000000000, 1760434267000180500),
    ]
    assert dict(rows.schema) == {
        **dict.fromkeys(hook_csv_scan.WIDE_FIELDS, pl.Int64),
        **dict.fromkeys(("rank", "cuda_dev", "nranks", "peer"), pl.Int32), "datatype": pl.UInt32,
        "host": pl.String, "comm": pl.String, "op": pl.String}


@pytest.mark.parametrize(("end", "terminated"), [("\n", True), ("\r\n", True), ("\n", False),
                                                 ("\r\n", False)])
def test_line_ends(end, terminated):
    rows = scanned(ROW, ROW.replace(",-1", ",7"), end=end, terminated=terminated)
    assert rows["peer"].to_list() == [-1, 7]


def test_each_distinct_text_is_stored_once():
    other = ROW.replace("0x562f1f4d2e80", "0x7f3a5c001200").replace("AllReduce", "Broadcast")
    result = hook_csv_scan.scan(f"{ROW}\n{other}\n{ROW}\n{other}".encode())
    assert result.strings.to_list() == ["gpu-b03", "0x562f1f4d2e80", "AllReduce",
                                         "0x7f3a5c001200", "Broadcast"]
    assert result.op_names.to_list() == [None, None, "allreduce", None, "broadcast"]
    assert result.rows.select("host_id", "comm_id", "op_id").rows() == [(0, 1, 2), (0, 3, 4)] * 2


def test_rows_much_shorter_than_the_first_are_scanned_again_with_more_room():
    first = ROW.replace("gpu-b03", "gpu-" + "b" * 400)
    rows = scanned(first, *[ROW] * 20)
    assert rows["host"].to_list() == ["gpu-" + "b" * 400] + ["gpu-b03"] * 20


def test_numbers_at_the_edges_of_their_range():
    rows = scanned(ROW.replace("1760434267000000000", str(INT64_MAX)).replace(",180500,", ",0,"),
                   ROW.replace(",3,0,", ",2147483647,2147483647,").replace(",-1", ",2147483647"),
                   ROW.replace(",-1", ",-2147483648").replace(",180500,", ",-5,"),
                   ROW.replace(",1024,9,", f",{INT64_MAX // 8},8,").replace("7,", "0,", 1))
    assert rows.select("t_end_ns", "rank", "cuda_dev", "peer", "bytes").rows() == [
        (INT64_MAX, 3, 0, -1, 2048), (1760434267000180500, 2147483647, 2147483647, 2147483647,
                                      2048),
        (-1, 3, 0, -1, 2048), (1760434267000180500, 3, 0, -1, INT64_MAX // 8 * 8)]


@pytest.mark.parametrize("row", [
    ROW.replace("1760434267000000000", str(INT64_MAX + 1)),          # int64 overflow
    ROW.replace("1760434267000000000", "17604342670000000000"),      # 20 digits
    ROW.replace("1760434267000000000", str(INT64_MAX)),              # its end overflows
    ROW.replace(",1024,9,", f",{INT64_MAX // 8 + 1},8,"),            # its bytes overflow
    ROW.replace(",41,", ",-41,"),                                    # a negative count
    ROW.replace(",180500,", ",-0,"),                                 # minus zero
    ROW.replace(",41,", ",041,"),                                    # a leading zero
    ROW.replace(",41,", ",+41,"),                                    # a plus sign
    ROW.replace(",41,", ",,"),                                       # a required field empty
    ROW.replace(",41,", ", 41,"),                                    # a space in a number
    ROW.replace("gpu-b03", "gpu b03"),                               # a space in a text
    ROW.replace("gpu-b03", 'gpu"b03'),                               # a quote
    ROW.replace("0x7f,0x7f", "0x7f,#"),                              # a comment character
    ROW.replace("gpu-b03", "gpu-\u00e903"),                          # beyond ASCII
    ROW.replace("gpu-b03", "gpu-b03\r"),                             # a lone carriage return
    ROW.rsplit(",", 1)[0],                                           # 15 fields
    ROW + ",1",                                                      # 17 fields
    ROW.replace(",3,0,", ",2147483648,0,"),                          # rank beyond int32
    ROW.replace(",-1", ",-2147483649"),                              # peer beyond int32
    ROW.replace(",9,", ",12,"),                                      # an unknown datatype
    ROW.replace("AllReduce", "allreduce"),                           # an unknown op
    ROW.replace("AllReduce", ""),                                    # no op
    HEADER,                                                          # a header line
    "",                                                              # a blank line
    "# " + ROW,                                                      # a comment line
    "\ufeff" + ROW,                                                  # a byte-order mark
])
def test_refused_rows(row):
    assert scanned(ROW, ROW) is not None
    assert scanned(ROW, row, ROW) is None
    assert scanned(row) is None


def test_last_line_ending_in_a_carriage_return_is_refused():
    assert scanned(ROW, end="\r", terminated=True) is None


def test_too_many_distinct_strings_refuse_the_block(monkeypatch):
    rows = [ROW.replace("0x562f1f4d2e80", f"0x{i}") for i in range(3)]
    assert hook_csv_scan.scan("\n".join(rows).encode()).strings.len() == 5
    monkeypatch.setattr(hook_csv_scan, "MAX_STRINGS", 4)
    assert scanned(*rows) is None
    assert scanned(*rows[:2]).height == 2


def read_both_ways(text: str, block_bytes: int):
    """The reader's output on ``text`` with the compiled scan and with the polars path alone,
    blocks cut every ``block_bytes`` and parsed on the parse threads."""
    results = []
    for compiled in (True, False):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(hook_csv, "COMPILED_SCAN", compiled)
            patch.setattr(base, "LINE_BATCH_BYTES", block_bytes)
            results.append(read_all(HookCsvReader(), Source.from_bytes("hook.csv",
                                                                      text.encode())))
    return results


def assert_same_output(fast, slow):
    assert_frame_equal(fast.tables["collectives"], slow.tables["collectives"])
    assert_frame_equal(fast.quarantine, slow.quarantine)
    assert (fast.lines, fast.skipped, fast.notes) == (slow.lines, slow.skipped, slow.notes)


scan_edits = st.one_of(st.just(lambda r: r), field_edits, st.sampled_from([
    lambda r: r.replace("0x562f1f4d2e80", "0x7f3a5c001200"), lambda r: r.replace("gpu-b03", ""),
    lambda r: r.replace("gpu-b03", "gpu-b03.cluster.example.org"),
    lambda r: r.replace(",41,", ",041,"), lambda r: r.replace(",41,", ",+41,"),
    lambda r: r.replace(",180500,", ",-0,"), lambda r: r.replace(",180500,", ",-7,"),
    lambda r: r.replace("1760434267000000000", str(INT64_MAX + 1)),
    lambda r: r.replace(",1024,9,", f",{INT64_MAX // 2},9,"),
    lambda r: r.replace("0x7f,0x7f", "0x7f,(nil)"), lambda r: r.replace("0x7f,0x7f", ","),
    lambda r: r.replace("gpu-b03", "gpu-b03\r"), lambda r: "\ufeff" + r, lambda r: HEADER,
    lambda r: r.replace("AllReduce", "Send").replace(",-1", ","),
]))


@settings(max_examples=150, deadline=None)
@given(st.lists(scan_edits, max_size=30), st.sampled_from(["\n", "\r\n"]), st.booleans(),
       st.booleans(), st.integers(100, 900))
def test_output_equals_the_polars_path(edits, end, header, terminated, block_bytes):
    """Whatever mix of good and bad rows, line ends and block cuts, the reader gives the same
    tables, quarantine and counts with the compiled scan as with polars' CSV reader."""
    lines = [HEADER] * header + [edit(ROW) for edit in edits]
    fast, slow = read_both_ways(end.join(lines) + (end if terminated else ""), block_bytes)
    assert_same_output(fast, slow)


NAME_COLUMNS = ["host", "comm", "op", "dtype"]


def test_well_formed_blocks_are_scanned():
    """The equivalence test above is not vacuous: a block of good rows takes the scan, and
    the chunk it makes is the polars path's."""
    text = "\n".join([HEADER, *(ROW.replace(",41,", f",{i},") for i in range(50))]) + "\n"
    data = text.encode()[len(HEADER) + 1:]
    assert hook_csv_scan.scan(data).rows.height == 50
    read = hook_csv._read_collectives(data)
    assert_frame_equal(hook_csv._scanned_collectives(data, pl.String()), read)
    names = pl.Categorical(pl.Categories.random())  # a source's codes (Source.names)
    coded = hook_csv._scanned_collectives(data, names)
    assert [c for c, dtype in coded.schema.items() if dtype == names] == NAME_COLUMNS
    assert_frame_equal(coded.with_columns(pl.col(NAME_COLUMNS).cast(pl.String)), read)
    assert_same_output(*read_both_ways(text, 1000))


def test_without_a_compiler_the_polars_path_reads_the_same(monkeypatch):
    text = "\n".join([HEADER, ROW, ROW.replace(",9,", ",99,"), ROW]) + "\n"
    source = Source.from_bytes("hook.csv", text.encode())
    fast = read_all(HookCsvReader(), source)
    monkeypatch.setattr(hook_csv_scan, "compiled", lambda: None)
    assert hook_csv_scan.scan(ROW.encode()) is None
    assert_same_output(fast, read_all(HookCsvReader(), source))

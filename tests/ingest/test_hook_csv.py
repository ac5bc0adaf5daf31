"""tracekit hook CSV reader: exact rows, nulls, bad rows quarantined, accounting, and the fast
path (with and without the compiled scan) agreeing with the line-by-line path."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.ingest.collective_helpers import read_all
from tracekit.ingest import base, hook_csv
from tracekit.ingest.base import LineBatch, Source
from tracekit.ingest.hook_csv import HEADER, HookCsvReader

ROW = ("7,1760434267000000000,180500,gpu-b03,88412,3,0,0x562f1f4d2e80,8,41,AllReduce,1024,9,"
       "0x7f,0x7f,-1")


@pytest.fixture(autouse=True, params=[True, False], ids=["compiled-scan", "polars-only"])
def parser(request, monkeypatch):
    """Every test runs with the compiled scan as the fast path's first tier and without it."""
    monkeypatch.setattr(hook_csv, "COMPILED_SCAN", request.param)


def read(text: str):
    return read_all(HookCsvReader(), Source.from_bytes("hook.csv", text.encode()))


def test_row_values_and_nulls():
    send = ROW.replace("AllReduce", "Send").replace(",-1", ",5").replace("180500", "")
    result = read(f"{HEADER}\n# comment\n{ROW}\n{send}\n")
    first, second = result.tables["collectives"].rows(named=True)
    assert (first["rank"], first["seq"], first["op"], first["dtype"], first["bytes"],
            first["t_end_ns"], first["peer"]) == (3, 41, "allreduce", "bfloat16", 2048,
                                                  1760434267000180500, None)
    assert (second["op"], second["peer"], second["t_end_ns"]) == ("send", 5, None)
    assert result.skipped == 2


def test_bad_rows_quarantined_with_line_numbers():
    result = read("\n".join([HEADER, ROW, ROW.replace("AllReduce", "Nope"),
                             ROW.replace(",9,", ",99,"), "1,2,3",
                             ROW.replace(",3,0,", ",99999999999,0,"),
                             ROW.replace(",-1", ",4294967296")]))
    assert result.quarantine.select("line_no", "reason").rows() == [
        (3, "unknown op"), (4, "unknown datatype"), (5, "expected 16 fields, found 3"),
        (6, "rank is out of range"), (7, "peer is out of range")]
    assert result.tables["collectives"].height == 1


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(max_size=90).map(lambda s: s.replace("\n", " ").replace("\r", " ")),
                max_size=20))
def test_garbage_accounted(lines):
    result = read("\n".join([HEADER, *lines]))
    assert result.rows() + result.skipped + result.quarantine.height == result.lines


# -- fast path (whole block through the CSV reader) against the line-by-line path -------------

SEND = ROW.replace("AllReduce", "Send").replace(",-1", ",5").replace("180500", "")


def line_path(text: str):
    """What the line-by-line path makes of the whole text (the reference)."""
    data = text.encode()
    return hook_csv._parse_lines(Source.from_bytes("hook.csv", data),
                                 LineBatch.from_block(data, 1).frame(), len(data))


def test_well_formed_block_takes_the_fast_path():
    text = f"{HEADER}\r\n{ROW}\r\n{SEND}\r\n"
    fast = hook_csv._parse_block(text.encode())
    assert fast is not None
    assert (fast.lines, fast.skipped, fast.bytes_read) == (3, 1, len(text))
    assert fast.tables["collectives"].equals(line_path(text).tables["collectives"])
    assert fast.tables["collectives"]["peer"].to_list() == [None, 5]


def test_empty_optional_fields_in_every_row_keep_the_fast_path():
    """A shim that never fills peer, duration or the buffers must not send every block down
    the line-by-line path (all-null columns pass the checks)."""
    bare = ROW.replace(",180500,", ",,").replace("0x7f,0x7f,-1", ",,")
    text = f"{bare}\n{bare}\n"
    fast = hook_csv._parse_block(text.encode())
    assert fast is not None
    assert fast.tables["collectives"].equals(line_path(text).tables["collectives"])
    assert fast.tables["collectives"].select("peer", "t_end_ns").rows() == [(None, None)] * 2


@pytest.mark.parametrize("text", [
    f"{HEADER}\n# comment\n{ROW}\n",               # comment line
    f"{HEADER}\n{ROW}\n\n{ROW}\n",                  # blank line
    f"{HEADER}\n{ROW}\n{ROW.rsplit(',', 1)[0]}\n",  # a row one field short
    f"{HEADER}\n{ROW},1\n",                         # one field too many
    f"{HEADER}\n{ROW.replace(',88412,', ',x,')}\n",  # pid not an integer
    f"{HEADER}\n{ROW}\n{HEADER}\n{ROW}\n",          # a repeated header
])
def test_blocks_with_other_lines_fall_back(text):
    assert hook_csv._parse_block(text.encode()) is None
    result = read(text)
    reference = line_path(text)
    assert result.tables["collectives"].equals(reference.tables["collectives"])
    assert result.quarantine.equals(reference.quarantine)
    assert (result.lines, result.skipped) == (reference.lines, reference.skipped)


def test_header_only_file():
    result = read(HEADER + "\n")
    assert (result.rows(), result.lines, result.skipped) == (0, 1, 1)


field_edits = st.sampled_from([
    lambda r: r, lambda r: r, lambda r: r.replace("AllReduce", "AllGather"),
    lambda r: r.replace(",180500,", ",,"), lambda r: r.replace(",-1", ",3"),
    lambda r: r.replace(",9,", ",42,"), lambda r: r.replace("AllReduce", "allreduce"),
    lambda r: r.replace(",3,", ", 3,"), lambda r: r.replace(",3,", ",3x,"),
    lambda r: r[:40], lambda r: r + ",", lambda r: "", lambda r: "# " + r,
    lambda r: r.replace("gpu-b03", "gpu-é03"), lambda r: r.replace(",41,", ",-41,"),
    lambda r: r.replace(",8,", ",2147483648,"), lambda r: r.replace(",-1", ",2147483647"),
])


@settings(max_examples=60, deadline=None)
@given(st.lists(field_edits, max_size=30), st.integers(120, 700))
def test_fast_path_agrees_with_line_path(edits, batch_bytes):
    """Whatever mix of good and bad rows, and wherever blocks are cut, the reader's output
    equals the line-by-line path's over the whole file, line numbers included."""
    text = "\n".join([HEADER, *(edit(ROW) for edit in edits)]) + "\n"
    source = Source.from_bytes("hook.csv", text.encode())
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(base, "LINE_BATCH_BYTES", batch_bytes)  # parsed on the parse threads
        result = read_all(HookCsvReader(), source)
    reference = line_path(text)
    assert result.tables["collectives"].equals(reference.tables["collectives"])
    assert result.quarantine.equals(reference.quarantine)
    assert (result.lines, result.skipped) == (reference.lines, reference.skipped)

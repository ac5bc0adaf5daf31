"""tracekit hook CSV reader: exact rows, nulls, bad rows quarantined, accounting."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.ingest.collective_helpers import read_all
from tracekit.ingest.base import Source
from tracekit.ingest.hook_csv import HEADER, HookCsvReader

ROW = ("7,1760434267000000000,180500,gpu-b03,88412,3,0,0x562f1f4d2e80,8,41,AllReduce,1024,9,"
       "0x7f,0x7f,-1")


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
                             ROW.replace(",9,", ",99,"), "1,2,3"]))
    assert result.quarantine.select("line_no", "reason").rows() == [
        (3, "unknown op"), (4, "unknown datatype"), (5, "expected 16 fields, found 3")]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(max_size=90).map(lambda s: s.replace("\n", " ").replace("\r", " ")),
                max_size=20))
def test_garbage_accounted(lines):
    result = read("\n".join([HEADER, *lines]))
    assert result.rows() + result.skipped + result.quarantine.height == result.lines

"""NCCL Inspector, NCCL profiler plugin and PyTorch Flight Recorder readers, and the restricted
unpickler: exact values on the samples, malformed input, and refusal of code in pickles."""

from __future__ import annotations

import os
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.ingest.collective_helpers import file_source, read_all
from tracekit.core.errors import InputError
from tracekit.ingest import registry, safe_pickle
from tracekit.ingest.base import Source
from tracekit.ingest.flight_recorder import FlightRecorderReader
from tracekit.ingest.nccl_inspector import NcclInspectorReader
from tracekit.ingest.nccl_profiler import NcclProfilerReader

INSPECTOR = "nccl_inspector_gpu-b03-pid88412.log"
PROFILER = "nccl_profiler_example_1493613951195738943_0.json"


def test_inspector_sample(formats_dir):
    result = read_all(NcclInspectorReader(), file_source(formats_dir / INSPECTOR))
    calls = result.tables["collectives"]
    assert calls.select("rank", "comm", "op", "seq", "op_count", "bytes", "peer").rows() == [
        (0, "0x7f8c496ae9f661", "allreduce", 0, 1407, 33554432, None),
        (0, "0xe62dedaa97644a", "reducescatter", 0, 5731, 335544320, None),
        (0, "0xe62dedaa97644a", "allgather", 1, 5732, 167772160, None),
        (0, "0x3b1c07e2d9a5f0", "send", 0, 212, 16777216, 1),
    ]
    # Verbose record: kernel start from the event trace; others end at the dump time.
    gather = calls.row(2, named=True)
    assert (gather["t_start_ns"], gather["t_end_ns"]) == (1760434267740181000, 1760434267743870000)
    assert calls.row(0, named=True)["t_end_ns"] == 1760434267748202000
    assert calls.row(0, named=True)["t_start_ns"] == 1760434267748202000 - 2874000
    comms = result.tables["comms"]
    assert comms.select("comm", "nranks", "comm_name").rows() == [
        ("0x7f8c496ae9f661", 16, None), ("0xe62dedaa97644a", 2, "DP Group 0"),
        ("0x3b1c07e2d9a5f0", 2, "PP Group 3")]


def test_inspector_bad_lines_quarantined():
    good = (b'{"header":{"id":"0x1","rank":1,"n_ranks":2,"nnodes":1},"metadata":{'
            b'"inspector_output_format_version":"v4.0","dump_timestamp_us":1760434267748202,'
            b'"hostname":"h","pid":7},"coll_perf":{"coll":"AllReduce","coll_sn":3,'
            b'"coll_msg_size_bytes":8192,"coll_exec_time_us":10,"coll_timing_source":"kernel_gpu"}}')
    headless = b'{"metadata":{"inspector_output_format_version":"v4.0"}}'
    text = b"\n".join([good, good[:60], b"", headless])
    result = read_all(NcclInspectorReader(), Source.from_bytes("h-pid7.log", text))
    assert result.tables["collectives"]["rank"].to_list() == [1]
    assert result.quarantine["reason"].to_list() == [
        "not an Inspector record (invalid JSON or no metadata)",
        "header without id, rank or n_ranks"]
    assert result.tables["collectives"].height + result.skipped + result.quarantine.height == 4


def test_profiler_sample(formats_dir):
    result = read_all(NcclProfilerReader(), file_source(formats_dir / PROFILER))
    calls = result.tables["collectives"]
    assert calls.select("rank", "pid", "comm", "op", "seq", "op_count", "count", "dtype",
                        "bytes", "peer").rows() == [
        (0, 225798, "0x14ba61f9a096f33f", "allreduce", 0, 0, 262144, "float32", 1048576, None),
        (0, 225798, "0x14ba61f9a096f33f", "recv", 1, None, 1048576, "bfloat16", 2097152, 1)]
    # COLL 111994.477997 -> 127902.535980 us on the plugin clock: 15.908 ms.
    first = calls.row(0, named=True)
    assert first["t_end_ns"] - first["t_start_ns"] == 15908058
    assert result.quarantine.height == 0


def test_profiler_readme_variant_and_t0_option():
    text = (b'[\n{"name": "AllGather", "cat": "COLL", "ph": "b", "id": 3, "pid": 9, "tid": 1, '
            b'"ts": 10.5, "args": {"SeqNum": 4, "CommHash": 18446744073709551615, "Rank": 2, '
            b'"Count": 8, "Datatype": ncclBfloat16, "Stream": 0x5020000567d0}},\n'
            b'{"name": "AllGather", "cat": "COLL", "ph": "e", "id": 3, "pid": 9, "tid": 1, '
            b'"ts": 12.5},\nnot json at all,\n{}]\n')
    result = read_all(NcclProfilerReader(), Source.from_bytes("x-host-1.txt", text),
                      {"t0_ns": "1000000000"})
    row = result.tables["collectives"].row(0, named=True)
    assert (row["comm"], row["dtype"], row["rank"], row["t_start_ns"], row["t_end_ns"]) == (
        "0xffffffffffffffff", "bfloat16", 2, 1000010500, 1000012500)
    assert result.quarantine["line_no"].to_list() == [4]


@pytest.mark.parametrize("name", ["fr_trace_rank_0.pkl", "fr_trace_rank_0.json"])
def test_flight_recorder_both_variants(formats_dir, name):
    result = read_all(FlightRecorderReader(), file_source(formats_dir / name))
    calls = result.tables["collectives"]
    assert calls.select("rank", "comm", "nranks", "op", "seq", "op_count", "count", "dtype",
                        "peer").rows() == [
        (0, "1", 2, "reducescatter", 5729, 5729, 41943040, "float32", None),
        (0, "1", 2, "allgather", 5730, 5730, 20971520, "bfloat16", None),
        (0, "3", 2, "send", 5731, 211, 4 * 4096 * 8192, "bfloat16", 8),
        (0, "1", 2, "reducescatter", 5732, 5731, 41943040, "float32", None),
        (0, "0", 16, "allreduce", 5733, 12, 1, "float32", None)]
    assert calls["t_end_ns"].to_list()[:2] == [1760433667007102500, 1760433667012689000]
    assert calls["t_end_ns"].to_list()[3:] == [None, None]
    assert result.tables["comms"]["comm_name"].to_list() == ["default_pg", "dp_group", "pp_group"]
    assert registry.sniff(file_source(formats_dir / name)).format == "flight-recorder"


def test_flight_recorder_old_schema_missing_keys():
    dump = {"version": "1.0", "entries": [
        {"profiling_name": "nccl:all_reduce", "time_created_ns": 5, "input_sizes": [[2, 3]],
         "input_dtypes": ["Half"]},
        {"state": "scheduled"}]}
    result = read_all(FlightRecorderReader(),
                      Source.from_bytes("nccl_trace_rank_12", pickle.dumps(dump, protocol=2)))
    row = result.tables["collectives"].row(0, named=True)
    assert (row["rank"], row["op"], row["count"], row["bytes"], row["comm"]) == (
        12, "allreduce", 6, 12, None)
    assert result.quarantine["line_no"].to_list() == [2]


class _Exploit:
    def __reduce__(self):
        return (os.system, ("echo pwned > /tmp/tracekit-pwned",))


def test_restricted_unpickler_refuses_code():
    data = pickle.dumps({"entries": [_Exploit()]})
    with pytest.raises(InputError, match="refusing to load posix.system"):
        safe_pickle.loads(data, "evil.pkl")
    assert not os.path.exists("/tmp/tracekit-pwned")
    assert safe_pickle.loads(pickle.dumps({"a": (1, b"x", {2.5})}), "ok") == {"a": (1, b"x", {2.5})}


def test_corrupt_pickle_is_a_clear_error():
    with pytest.raises(InputError, match="corrupt pickle"):
        safe_pickle.loads(b"\x80\x02}q\x00(X\x03\x00", "cut.pkl")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(max_size=120).map(lambda s: s.replace("\n", " ").replace("\r", " ")),
                max_size=20))
def test_inspector_garbage_accounted(lines):
    data = "\n".join(lines).encode()
    result = read_all(NcclInspectorReader(), Source.from_bytes("g.log", data))
    assert (result.tables["collectives"].height + result.skipped + result.quarantine.height
            == result.lines)


def test_sniffing(formats_dir):
    assert registry.sniff(file_source(formats_dir / INSPECTOR)).format == "nccl-inspector"
    assert registry.sniff(file_source(formats_dir / PROFILER)).format == "nccl-profiler"

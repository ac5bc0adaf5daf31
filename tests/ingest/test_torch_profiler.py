"""The torch-profiler reader on real Kineto traces: four GPU traces from HTA's test data
(A100, NCCL), gloo traces made by the real profiler (``tests/data/torch_profiler``, written by
:mod:`tracekit.synth.profiled`), and damaged copies of them."""

from __future__ import annotations

import gzip
import io
import json
import re
from collections import Counter
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import FORMATS, REPO
from tests.ingest.collective_helpers import file_source, read_all
from tracekit import open_dataset
from tracekit.core.errors import InputError
from tracekit.ingest import kineto_json, registry, torch_profiler
from tracekit.ingest.base import Source
from tracekit.ingest.limits import Limits
from tracekit.ingest.pipeline import ingest
from tracekit.ingest.torch_profiler import READERS, read_trace

READER = READERS[0]
GENERATED = REPO / "tests" / "data" / "torch_profiler"
HTA_TRACES = ("nccl_data_rank0_of_2.json.gz", "rank0_of_16.json.gz", "sampled_rank-0.json.gz",
              "sampled_rank-1.json.gz")
NCCL = ("ncclKernel", "ncclDevKernel")


def load(path: Path) -> dict:
    """The trace by ``json.load``, the independent count; the trailing comma the Python
    exporter leaves before ``]`` removed first (strict JSON refuses it)."""
    data = path.read_bytes()
    text = (gzip.decompress(data) if path.suffix == ".gz" else data).decode()
    return json.loads(re.sub(r",\s*\]", "]", text))


def expected_counts(trace: dict) -> dict[str, int]:
    """What each table and each skip reason must hold, counted from the events by category
    and name, without the reader's code."""
    events = trace["traceEvents"]
    by = Counter((e.get("ph"), (e.get("cat") or "").lower()) for e in events)
    x = [e for e in events if e.get("ph") == "X"]
    names = Counter(e["name"] for e in x)
    kernels = [e for e in x if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    nccl = [e for e in kernels if e["name"].startswith(NCCL)]
    cpu = [e for e in x if e.get("cat") == "cpu_op"]
    comm_cpu = [e for e in cpu if e["name"].startswith("c10d::") or
                e["name"] == "record_param_comms"]
    return {
        "events": len(events),
        "collectives": sum(n for name, n in names.items() if name.startswith("c10d::")),
        "op_traces": len(kernels) - len(nccl),
        "nccl_kernels": len(nccl),
        "iterations": len({e["name"] for e in x if e["name"].startswith("ProfilerStep#")}),
        "gpus": len(trace.get("deviceProperties") or []),
        "metadata": sum(n for (ph, _), n in by.items() if ph == "M"),
        "flow": sum(n for (ph, _), n in by.items() if ph in ("s", "f")),
        "runtime": by[("X", "cuda_runtime")] + by[("X", "cuda_driver")],
        "cpu_op": len(cpu) - len(comm_cpu),
        "gpu_annotation": by[("X", "gpu_user_annotation")],
    }


@pytest.fixture(scope="module", params=HTA_TRACES)
def hta(request, real_dir):
    path = real_dir / "hta-kineto" / request.param
    return path, load(path), read_trace(file_source(path))


def test_every_event_of_the_real_gpu_traces_is_accounted_for(hta):
    _, trace, read = hta
    want = expected_counts(trace)
    chunk = read.chunk
    rows = {name: frame.height for name, frame in chunk.tables.items()}
    assert read.events == chunk.lines == want["events"]
    assert chunk.quarantine.height == 0
    assert rows["collectives"] == want["collectives"]
    assert rows["op_traces"] == want["op_traces"]
    assert rows["iterations"] == want["iterations"]
    assert rows["gpus"] == want["gpus"]
    assert read.folded["comm_kernel"] + read.skipped["orphan_kernel"] == want["nccl_kernels"]
    assert read.folded["launch"] + read.skipped["runtime"] == want["runtime"]
    for reason in ("metadata", "flow", "cpu_op", "gpu_annotation"):
        assert read.skipped[reason] == want[reason], reason
    # rows + deliberately skipped + quarantined == every event
    assert (sum(rows.values()) - chunk.derived + chunk.skipped + chunk.quarantine.height
            == want["events"])
    assert sum(read.skipped.values()) == chunk.skipped
    assert chunk.derived == rows["comms"] + rows["gpus"] - sum(read.folded.values())


def test_nccl_calls_take_their_kernels_and_record_param_comms(real_dir):
    path = real_dir / "hta-kineto" / "nccl_data_rank0_of_2.json.gz"
    tables = read_trace(file_source(path)).chunk.tables
    calls = tables["collectives"]
    assert calls["op"].value_counts().sort("op").rows() == [("allreduce", 15),
                                                             ("broadcast", 6)]
    first = calls.filter(pl.col("op") == "allreduce").row(0, named=True)
    base = 1711964646000000000  # baseTimeNanoseconds: ts are microseconds after it
    assert first == first | {
        "rank": 0, "comm": "0", "nranks": 2, "count": 2049000, "dtype": "float32",
        "bytes": 8196000, "seq": 2, "cuda_dev": 0, "exec_on": "gpu", "pid": 2910249,
        "t_start_ns": base + 4458676524595135}  # c10d::allreduce_ at ts 4458676524595.135
    assert first["t_start_ns"] < first["exec_start_ns"] < first["exec_end_ns"]
    assert first["t_end_ns"] == first["exec_end_ns"]
    assert calls["seq"].to_list() == list(range(21))
    assert tables["comms"].select("comm", "rank", "comm_rank", "nranks", "comm_name").rows() == [
        ("0", 0, 0, 2, "default_pg")]
    gpus = tables["gpus"]
    assert gpus.height == 8 and gpus.filter("used")["cuda_dev"].to_list() == [0]
    assert gpus.row(0, named=True) | {"job": None} == {
        "job": None, "rank": 0, "host": None, "cuda_dev": 0, "name": "NVIDIA A100-PG509-200",
        "memory_bytes": 42297524224, "compute_capability": "8.0", "sm_count": 108,
        "gpu_uuid": None, "bus_id": None, "used": True}
    steps = tables["iterations"]
    assert steps["iteration"].to_list() == [4, 5, 6]
    assert steps["duration_s"].round(6).to_list() == [0.222442, 0.219727, 0.224936]
    kernels = tables["op_traces"]
    assert set(kernels["category"]) == {"kernel", "memcpy", "memset"}
    assert kernels.filter(pl.col("step").is_null()).height < kernels.height
    placed = kernels.filter(pl.col("step").is_not_null())
    assert (placed["start_s"] >= 0).all()
    assert (kernels["t_launch_ns"].drop_nulls() <= kernels.filter(
        pl.col("t_launch_ns").is_not_null())["t_start_ns"]).all()


def test_older_traces_without_collective_names_take_them_from_the_annotations(real_dir):
    read = read_trace(file_source(real_dir / "hta-kineto" / "rank0_of_16.json.gz"))
    calls = read.chunk.tables["collectives"]
    assert dict(calls["op"].value_counts().rows()) == {
        "alltoall": 55, "reducescatter": 10, "allreduce": 10, "allgather": 10}
    assert read.skipped["orphan_kernel"] == 5  # launched before the recording began
    assert read.skipped["wait"] == 75
    assert calls["rank"].unique().to_list() == [0]
    # 45 SendRecv kernels for 55 all-to-alls: ten ran after the recording window closed
    unrun = calls.filter(pl.col("exec_start_ns").is_null())
    assert unrun["op"].to_list() == ["alltoall"] * 10
    assert (unrun["t_end_ns"] > unrun["t_start_ns"]).all()  # the issuing op's own end


def test_gloo_calls_take_the_worker_spans_of_their_operation():
    read = read_trace(file_source(GENERATED / "compute" / "rank1.pt.trace.json.gz"))
    tables = read.chunk.tables
    calls = tables["collectives"]
    assert calls.select("rank", "comm", "nranks", "op", "seq", "count", "dtype", "bytes",
                        "peer", "exec_on").rows() == [
        (1, "0", 2, "broadcast", 0, 5, "int32", 20, 0, "cpu"),
        (1, "0", 2, "broadcast", 1, 1, "int32", 4, 0, "cpu"),
        *[(1, "0", 2, "allreduce", seq, 8320, "float32", 33280, None, "cpu")
          for seq in (2, 3, 4)]]
    assert (calls["exec_start_ns"] >= calls["t_start_ns"]).all()
    assert tables["iterations"]["iteration"].to_list() == [1, 2, 3]
    assert tables["comms"].select("comm", "comm_rank", "nranks", "comm_name").rows() == [
        ("0", 1, 2, "default_pg")]
    ops = tables["op_traces"]
    assert set(ops["category"]) == {"cpu_op"} and ops["stream"].null_count() == ops.height
    assert tables["gpus"].height == 0


def test_the_slow_compute_rank_does_more_cpu_operator_work_per_step():
    """Rank 1 runs four forward / backward passes a step (slow_factor 4), rank 0 one."""
    work = {rank: read_trace(file_source(GENERATED / "compute" / f"rank{rank}.pt.trace.json.gz"))
            .chunk.tables["op_traces"].filter(pl.col("op") == "aten::linear")
            .group_by("step").len().sort("step")["len"].to_list() for rank in (0, 1)}
    assert work == {0: [2, 2, 2], 1: [8, 8, 8]}


def test_a_delayed_send_is_waited_for_by_the_next_rank_in_recv():
    folder = GENERATED / "send_python_export"
    calls = {rank: read_trace(file_source(folder / f"rank{rank}.pt.trace.json.gz"))
             .chunk.tables["collectives"] for rank in range(3)}
    assert [c["op"].to_list().count("send") for c in calls.values()] == [3, 3, 0]
    assert [c["op"].to_list().count("recv") for c in calls.values()] == [0, 3, 3]
    assert calls[1].filter(op="send")["peer"].to_list() == [2, 2, 2]
    assert calls[2].filter(op="recv")["peer"].to_list() == [1, 1, 1]


@pytest.mark.parametrize("path", sorted(GENERATED.rglob("*.json.gz")), ids=lambda p: p.name)
def test_generated_traces_are_accounted_for_event_by_event(path):
    trace = load(path)
    read = read_trace(file_source(path))
    chunk = read.chunk
    want = expected_counts(trace)
    rows = sum(frame.height for frame in chunk.tables.values())
    assert read.events == want["events"]
    assert chunk.tables["collectives"].height == want["collectives"]
    assert rows - chunk.derived + chunk.skipped + chunk.quarantine.height == want["events"]


def test_sniffs_plain_and_gzip_traces_and_nothing_else(tmp_path):
    gz = GENERATED / "compute" / "rank0.pt.trace.json.gz"
    plain = tmp_path / "rank0.json"
    plain.write_bytes(gzip.decompress(gz.read_bytes()))
    for path in (gz, plain, FORMATS / "torch_profiler_rank1.pt.trace.json"):
        assert registry.sniff(file_source(path)).format == "torch-profiler"
    for other in ("fr_trace_rank_0.json", "nccl_profiler_example_1493613951195738943_0.json",
                  "prometheus_range.json"):
        assert not READER.sniff(file_source(FORMATS / other))


def test_a_trace_cut_short_keeps_the_events_before_the_cut():
    whole = gzip.decompress((GENERATED / "compute" / "rank0.pt.trace.json.gz").read_bytes())
    cut = whole[:len(whole) // 2]
    read = read_trace(Source.from_bytes("rank0.json", cut))
    bad = read.chunk.quarantine
    assert bad.height == 1 and bad["reason"][0].startswith("truncated")
    assert bad["line_no"][0] == cut[:cut.rfind(b"\n  {")].count(b"\n") + 2
    assert read.chunk.notes[-1].startswith("the trace ends before its closing brackets")
    chunk = read.chunk
    assert sum(f.height for f in chunk.tables.values()) - chunk.derived + chunk.skipped + (
        bad.height) == read.events


def test_a_bad_event_is_quarantined_with_its_line_and_reading_goes_on():
    events = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1,
               "tid": 1, "ts": 1000.0 * i, "dur": 900.0} for i in range(4)]
    lines = [json.dumps(e) for e in events]
    lines[1] = lines[1].replace('"dur": 900.0', '"dur": 9x0')  # not JSON
    lines[2] = '"a string"'
    text = ('{"schemaVersion": 1, "baseTimeNanoseconds": 1700000000000000000,\n'
            '"traceEvents": [\n' + ",\n".join(lines) + "\n]}\n")
    read = read_trace(Source.from_bytes("rank3.json", text.encode()))
    bad = read.chunk.quarantine.sort("line_no")
    assert bad.select("line_no", "reason").rows() == [
        (4, "not valid JSON (Expecting ',' delimiter)"),
        (5, "an event that is not an object")]
    steps = read.chunk.tables["iterations"]
    assert steps.select("rank", "iteration", "t_start_ns").rows() == [
        (3, 0, 1700000000000000000), (3, 3, 1700000000003000000)]
    assert read.chunk.notes[0] == "rank taken from the file name (no distributedInfo)"


def test_block_boundaries_and_column_moves_do_not_change_what_is_read(monkeypatch):
    path = GENERATED / "compute" / "rank1.pt.trace.json.gz"
    whole = read_trace(file_source(path)).chunk
    monkeypatch.setattr(kineto_json, "BLOCK_CHARS", 97)
    monkeypatch.setattr(torch_profiler, "FLUSH_EVENTS", 100)
    small = read_trace(file_source(path)).chunk
    for name, frame in whole.tables.items():
        assert small.tables[name].equals(frame), name
    assert (small.lines, small.skipped, small.derived) == (whole.lines, whole.skipped,
                                                           whole.derived)


def test_a_gzip_bomb_stops_at_the_expansion_limit():
    events = ",".join(['{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1}'] * 20000)
    data = gzip.compress(f'{{"traceEvents": [{events}]}}'.encode())
    source = Source("bomb.json.gz", len(data), lambda: io.BytesIO(data),
                    limits=Limits(max_expansion=1, max_archive_bytes=64 * 1024))
    with pytest.raises(InputError, match="max_expansion"):
        read_trace(source)


def test_not_a_trace_is_one_line_naming_the_file():
    with pytest.raises(InputError) as error:
        read_trace(Source.from_bytes("x.json", b'["not", "an object"]'))
    assert str(error.value).startswith("x.json") and "\n" not in str(error.value)


def test_a_folder_of_gzipped_rank_traces_ingests_into_one_dataset(tmp_path):
    summary = ingest([GENERATED / "send_python_export"], tmp_path / "ds", job="send")
    assert [(s.status, s.format) for s in summary.sources] == [("ingested", "torch-profiler")] * 3
    dataset = open_dataset(tmp_path / "ds")
    calls = dataset.table("collectives").collect()
    assert calls.group_by("rank").len().sort("rank").rows() == [(0, 8), (1, 11), (2, 8)]
    assert calls["job"].unique().to_list() == ["send"]
    steps = dataset.table("iterations").collect()
    assert steps.height == 9 and set(steps["source"]) == {"framework"}


def test_a_generated_job_reads_back_with_its_slow_rank(tmp_path):
    """The generator end to end, as tests of the verdict use it: a data-loader sleep on rank 1
    stretches rank 0's wait in the gradient allreduce, not its own operators."""
    pytest.importorskip("torch")
    from tracekit.synth.profiled import ProfiledJob, run_profiled_job

    job = ProfiledJob(world_size=2, steps=3, slow_rank=1, slow_kind="data", slow_ms=150,
                      hidden=32, layers=1, gzip=False)
    paths = run_profiled_job(job, tmp_path).traces
    assert [p.name for p in paths] == ["rank0.pt.trace.json", "rank1.pt.trace.json"]
    calls = {rank: read_trace(file_source(path)).chunk.tables["collectives"]
             for rank, path in enumerate(paths)}
    # ms from issue to end of the gradient allreduce in steps 2 and 3 (in step 1 the ranks
    # meet first in DDP's buffer broadcasts, so rank 0 waits there)
    waits = {rank: calls[rank].filter(op="allreduce").select(
        (pl.col("exec_end_ns") - pl.col("t_start_ns")) / 1e6)["exec_end_ns"].to_list()[1:]
        for rank in calls}
    assert min(waits[0]) > 100 and min(waits[0]) > max(waits[1])  # rank 0 waits out the sleep
    assert read_all(READER, file_source(paths[0])).quarantine.height == 0


GROUP_ATTEMPTS = 3
"""Runs of the two-group job until both ranks' worker threads split into their groups."""


def test_gloo_calls_of_two_process_groups_get_their_groups_from_the_worker_threads(tmp_path):
    """gloo writes no ``record_param_comms``, so a call names no group; each group's worker
    threads do: DDP's gradient all-reduces and buffer broadcasts run on the default group's
    (``0``), the loss all-reduce of a second group (``1``, described ``loss``) on its own.
    The threads are told apart by their ids, which the operating system hands out: where
    another process took ids between them so that the split ties, the reader leaves the
    groups unnamed rather than guess (seen once in a clean-clone suite run), and the job is
    run again, at most :data:`GROUP_ATTEMPTS` times. A wrong group is never accepted."""
    pytest.importorskip("torch")
    from tracekit.synth.profiled import ProfiledJob, run_profiled_job

    job = ProfiledJob(world_size=2, steps=2, hidden=32, layers=1, gzip=False,
                      second_group=True)
    expected = [("0", "allreduce", 2, [1056]), ("0", "broadcast", 2, [1, 3]),
                ("1", "allreduce", 2, [1])]
    for attempt in range(GROUP_ATTEMPTS):
        named = []
        for rank, path in enumerate(run_profiled_job(job, tmp_path / str(attempt)).traces):
            tables = read_trace(file_source(path)).chunk.tables
            assert tables["comms"].select("comm", "comm_name", "comm_rank", "nranks").rows() \
                == [("0", "default_pg", rank, 2), ("1", "loss", rank, 2)]
            calls = tables["collectives"]
            if calls["comm"].null_count() == calls.height:  # a tie: no group named
                continue
            assert calls.group_by("comm", "op").agg(
                pl.len(), pl.col("count").unique().sort()).sort("comm", "op").rows() == expected
            named.append(rank)
        if named == [0, 1]:
            return
    pytest.fail(f"the worker threads' groups were left unnamed in {GROUP_ATTEMPTS} runs")


def test_torch_1x_category_names_and_unix_time_read_the_same(real_dir, tmp_path):
    """torch before 2.1 wrote ``ts`` as Unix time without ``baseTimeNanoseconds``, and early
    Kineto capitalised its categories (``Operator``, ``Kernel``, ``Runtime``, ``Memcpy``)."""
    path = real_dir / "hta-kineto" / "nccl_data_rank0_of_2.json.gz"
    trace = load(path)
    base_us = trace.pop("baseTimeNanoseconds") // 1000
    old = {"cpu_op": "Operator", "kernel": "Kernel", "cuda_runtime": "Runtime",
           "gpu_memcpy": "Memcpy", "gpu_memset": "Memset"}
    for event in trace["traceEvents"]:
        event["cat"] = old.get(event.get("cat"), event.get("cat"))
        if isinstance(event.get("ts"), int | float):
            event["ts"] += base_us
    older = tmp_path / "rank0.json"
    older.write_text(json.dumps(trace))
    new, converted = (read_trace(file_source(p)).chunk for p in (path, older))
    for name in ("collectives", "op_traces", "iterations", "comms", "gpus"):
        times = [c for c in new.tables[name].columns if c.endswith(("_ns", "_s"))]
        assert converted.tables[name].drop(times).equals(new.tables[name].drop(times)), name
        # a float of Unix microseconds with ns digits holds them to 1/4 us (2^-2 at 1.7e15)
        for column in times:
            difference = converted.tables[name][column] - new.tables[name][column]
            assert (difference.abs().max() or 0) <= (250 if column.endswith("_ns") else 1e-6)


def _no_distributed_info(trace: dict) -> None:
    del trace["distributedInfo"]


def _cuda_driver(trace: dict) -> None:
    for event in trace["traceEvents"]:
        if event.get("cat") == "cuda_runtime":
            event["cat"] = "cuda_driver"


def _title_case_metadata(trace: dict) -> None:
    for event in trace["traceEvents"]:
        if event.get("name") == "record_param_comms":
            event["args"] = {key.title(): value for key, value in event["args"].items()}


VARIANTS = {
    # torch before 2.1 without a distributed job, or a trace cut from a bigger file: the rank
    # comes from the name, the group from the calls' own metadata
    "no distributedInfo": (_no_distributed_info,
                           ["rank taken from the file name (no distributedInfo)"]),
    # newer CUPTI records launches through the driver API (cuLaunchKernelEx)
    "cuda_driver launches": (_cuda_driver, []),
    # converted or re-exported traces spell the metadata keys in title case
    "Collective Name": (_title_case_metadata, []),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_field_variants_of_a_real_trace_read_the_same(real_dir, tmp_path, variant):
    """Each variant of the real 2-rank NCCL trace gives the same rows: 21 calls (15
    all-reduces, 6 broadcasts) of group ``0`` (default_pg), 3753 op traces, each with its
    launch, 3 iterations."""
    change, notes = VARIANTS[variant]
    path = real_dir / "hta-kineto" / "nccl_data_rank0_of_2.json.gz"
    trace = load(path)
    change(trace)
    variant_path = tmp_path / "rank0.pt.trace.json"
    variant_path.write_text(json.dumps(trace))
    new, old = (read_trace(file_source(p)).chunk for p in (variant_path, path))
    for name in ("collectives", "op_traces", "iterations", "comms"):
        assert new.tables[name].equals(old.tables[name]), name
    tables = new.tables
    assert {name: frame.height for name, frame in tables.items()} == {
        "collectives": 21, "op_traces": 3753, "iterations": 3, "comms": 1, "gpus": 8}
    assert tables["collectives"].group_by("comm", "op").len().sort("op").rows() == [
        ("0", "allreduce", 15), ("0", "broadcast", 6)]
    assert tables["op_traces"]["t_launch_ns"].null_count() == 0
    assert tables["comms"].select("comm", "comm_rank", "nranks", "comm_name").rows() == [
        ("0", 0, 2, "default_pg")]
    assert new.notes == notes + old.notes


def test_calls_without_a_c10d_op_or_metadata_are_told_from_waits(real_dir, tmp_path):
    """torch 1.13 wrapped a call in ``record_param_comms`` > ``nccl:*`` with no ``c10d::``
    op and no metadata; a bare ``record_param_comms`` is then a wait."""
    path = real_dir / "hta-kineto" / "nccl_data_rank0_of_2.json.gz"
    trace = load(path)
    trace["traceEvents"] = [e for e in trace["traceEvents"]
                            if not e.get("name", "").startswith("c10d::")]
    for event in trace["traceEvents"]:
        if event.get("name") == "record_param_comms":
            event["args"] = {"External id": event["args"]["External id"]}
    older = tmp_path / "rank0.json"
    older.write_text(json.dumps(trace))
    new, old = (read_trace(file_source(p)) for p in (path, older))
    columns = ["op", "exec_start_ns", "exec_end_ns", "exec_on"]
    assert old.chunk.tables["collectives"].select(columns).equals(
        new.chunk.tables["collectives"].select(columns))
    assert old.skipped["wait"] == new.skipped["wait"] == 6

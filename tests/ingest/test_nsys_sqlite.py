"""The Nsight Systems SQLite reader, on exports written table for table as ``nsys export``
lays them out (:mod:`tests.ingest.nsys_export`)."""

from __future__ import annotations

import sqlite3
import tarfile
from pathlib import Path

import polars as pl
import pytest

from tests.ingest.collective_helpers import file_source, read_all
from tests.ingest.nsys_export import (
    SESSION_START_NS,
    Export,
    Job,
    global_pid,
    simulate,
    write_export,
    write_job,
)
from tracekit.core.dataset import open_dataset
from tracekit.core.errors import InputError
from tracekit.ingest.base import Source
from tracekit.ingest.nsys_sqlite import NsysSqliteReader
from tracekit.ingest.pipeline import ingest
from tracekit.ingest.registry import sniff

READER = NsysSqliteReader()


@pytest.fixture(scope="module")
def job_folder(tmp_path_factory) -> Path:
    return write_job(tmp_path_factory.mktemp("nsys"), Job(ranks=2, steps=3))


def test_one_rank_export_into_the_canonical_tables(job_folder):
    source = file_source(job_folder / "report_1.sqlite")
    assert sniff(source).format == "nsys-sqlite"
    result = read_all(READER, source)
    steps, calls, ops, gpus = (result.tables[t] for t in
                               ("iterations", "collectives", "op_traces", "gpus"))
    # 3 NVTX step ranges + 3 x 6 kernels, every one a row
    assert (result.lines, result.skipped, result.quarantine.height) == (21, 0, 0)
    assert result.rows() - gpus.height == result.lines
    assert steps.select("rank", "iteration", "duration_s", "source").rows() == [
        (1, 0, 0.004525, "framework"), (1, 1, 0.004525, "framework"),
        (1, 2, 0.004525, "framework")]
    assert steps["t_start_ns"][0] == SESSION_START_NS + 1_000_000
    first = calls.row(0, named=True)
    assert {k: first[k] for k in ("rank", "host", "pid", "cuda_dev", "comm", "op", "seq",
                                  "dtype", "exec_on")} == {
        "rank": 1, "host": "node01", "pid": 1001, "cuda_dev": 0, "comm": "stream:20",
        "op": "allreduce", "seq": 0, "dtype": "float32", "exec_on": "gpu"}
    # issued by the host at 15 us; ran from its second GEMM's end to the peer's + 600 us
    base = SESSION_START_NS + 1_000_000
    assert (first["t_start_ns"] - base, first["exec_start_ns"] - base,
            first["exec_end_ns"] - base, first["t_end_ns"] - base) == (
        15_000, 2_005_000, 2_605_000, 2_605_000)
    assert calls["seq"].to_list() == [0, 1, 2]
    assert ops.height == 15 and set(ops["category"]) == {"kernel"}
    assert ops.filter(pl.col("step") == 0).select(
        "seq", pl.col("start_s").round(9), "duration_s", "stream").rows() == [
        (0, 5e-06, 0.001, 7), (1, 0.001005, 0.001, 7), (2, 0.002005, 0.001, 7),
        (3, 0.003005, 0.001, 7), (4, 0.004005, 0.0005, 7)]
    assert (ops["t_start_ns"] - ops["t_launch_ns"]).to_list()[:2] == [5_000, 995_000]
    assert gpus.select("rank", "host", "cuda_dev", "name", "memory_bytes", "sm_count",
                       "bus_id", "used").rows() == [
        (1, "node01", 0, "NVIDIA A100-SXM4-80GB", 85_899_345_920, 108, "0000:07:00.0", True)]


def test_processes_of_one_export_are_ranks_by_device(tmp_path):
    job = Job(ranks=2, ranks_per_host=2, steps=2)
    path = write_export(tmp_path / "node00.sqlite", simulate(job))
    result = read_all(READER, file_source(path))
    assert result.tables["collectives"].group_by("rank").agg(pl.col("cuda_dev").first()).sort(
        "rank").rows() == [(0, 0), (1, 1)]
    assert result.tables["iterations"].group_by("rank").len().sort("rank").rows() == [
        (0, 2), (1, 2)]
    assert result.tables["gpus"].filter("used").select("rank", "cuda_dev").rows() == [
        (0, 0), (1, 0)]  # each process sees its own GPU as CUDA device 0
    assert any("2 processes in one export" in note for note in result.notes)
    shifted = read_all(READER, file_source(path), {"rank": "8"})
    assert sorted(shifted.tables["iterations"]["rank"].unique()) == [8, 9]


def _one_process(tmp_path: Path, kernels: list[tuple], nvtx: list[tuple] = ()) -> Path:
    export = Export(rank=0, host="gpu7", device=0, pid=42)
    for start, end, name in kernels:
        export.launch(start, start + 1_000, end, name, 20)
    tid = global_pid(42) | 42
    export.nvtx = [(s - SESSION_START_NS, None if e is None else e - SESSION_START_NS, 59,
                    None, None, None, text, tid, None, None, None, None)
                   for s, e, text in nvtx]
    path = write_export(tmp_path / "trace.sqlite", [export])
    db = sqlite3.connect(path)
    db.executemany("INSERT OR REPLACE INTO StringIds VALUES (?, ?)", [
        (1, "ncclKernel_AllReduce_RING_LL_Sum_float"), (2, "ncclAllGatherRingLLKernel_copy_i8"),
        (5, "ncclDevKernel_SendRecv"), (6, "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL"),
        (7, "void at::native::vectorized_elementwise_kernel<4>")])
    db.commit()
    db.close()
    return path


def test_kernel_names_of_every_nccl_generation(tmp_path):
    t0 = SESSION_START_NS + 10_000
    path = _one_process(tmp_path, [(t0 + i * 100_000, t0 + i * 100_000 + 50_000, name)
                                   for i, name in enumerate((1, 2, 5, 6, 7))])
    result = read_all(READER, file_source(path))
    assert result.tables["collectives"].select("op", "dtype", "seq").rows() == [
        ("allreduce", "float32", 0), ("allgather", "int8", 1), ("sendrecv", None, 2),
        ("reducescatter", "bfloat16", 3)]
    assert result.tables["op_traces"].select("op", "step").rows() == [
        ("void at::native::vectorized_elementwise_kernel<4>", None)]


def test_untimed_activities_and_open_ranges_are_quarantined_with_their_rowid(tmp_path):
    t0 = SESSION_START_NS + 10_000
    path = _one_process(tmp_path, [(t0, t0 + 5_000, 7), (t0 + 9_000, t0 + 8_000, 7),
                                   (t0 + 20_000, t0 + 30_000, 1)],
                        nvtx=[(t0, t0 + 100_000, "iteration 5"), (t0 + 100_000, None, "iter 6"),
                              (t0, t0 + 1, "forward")])
    db = sqlite3.connect(path)
    db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 0, end = 0 WHERE rowid = 3")
    db.commit()
    db.close()
    result = read_all(READER, file_source(path))
    assert result.quarantine.select("source", "line_no", "reason").sort(
        "source", "line_no", descending=[True, False]).rows() == [
        (f"{path}#NVTX_EVENTS", 2,
         "iteration range without an end (the capture stopped inside it?)"),
        (f"{path}#CUPTI_ACTIVITY_KIND_KERNEL", 2, "activity ends before it starts"),
        (f"{path}#CUPTI_ACTIVITY_KIND_KERNEL", 3,
         "activity without timestamps (CUPTI could not collect them)")]
    assert result.tables["iterations"].select("iteration", "duration_s").rows() == [(5, 1e-4)]
    assert result.tables["op_traces"].select("step", "seq").rows() == [(5, 0)]
    # 3 NVTX rows + 3 kernels: 1 iteration, 1 op trace, 1 skipped range, 3 quarantined
    assert (result.lines, result.skipped) == (6, 1)
    assert result.rows() + result.skipped + result.quarantine.height == result.lines + 1  # gpus


def test_iteration_range_option_and_missing_session_start(tmp_path):
    t0 = SESSION_START_NS + 10_000
    path = _one_process(tmp_path, [(t0 + 10, t0 + 5_000, 7)],
                        nvtx=[(t0, t0 + 100_000, "train_batch[12]")])
    db = sqlite3.connect(path)
    db.execute("DELETE FROM TARGET_INFO_SESSION_START_TIME")
    db.commit()
    db.close()
    result = read_all(READER, file_source(path), {"iteration_range": r"^train_batch\[(\d+)\]$"})
    steps = result.tables["iterations"]
    assert steps.select("iteration").rows() == [(12,)]
    assert steps["t_start_ns"][0] == t0 - SESSION_START_NS
    assert any("not Unix times" in note for note in result.notes)
    with pytest.raises(InputError, match="needs one group"):
        list(READER.read(file_source(path), {"iteration_range": "step"}))


def test_not_an_nsys_export(tmp_path):
    other = tmp_path / "other.sqlite"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE t(a)")
    db.commit()
    db.close()
    assert not READER.sniff(file_source(other))
    empty = tmp_path / "nsys.sqlite"
    db = sqlite3.connect(empty)
    db.execute("CREATE TABLE TARGET_INFO_SESSION_START_TIME(utcEpochNs INTEGER)")
    db.commit()
    db.close()
    with pytest.raises(InputError, match="without kernels or NVTX ranges"):
        list(READER.read(file_source(empty), {}))
    torn = Source.from_bytes("torn.sqlite", b"SQLite format 3\x00NVTX_EVENTS" + b"\x00" * 50)
    with pytest.raises(InputError, match="not a readable SQLite database"):
        list(READER.read(torn, {}))


def test_ingest_of_an_archive_of_rank_exports(tmp_path, job_folder):
    archive = tmp_path / "nsys.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for rank in (0, 1):
            tar.add(job_folder / f"report_{rank}.sqlite", f"run/report_{rank}.sqlite")
    summary = ingest([archive], tmp_path / "ds", job="j")
    assert not summary.failed
    dataset = open_dataset(tmp_path / "ds")
    calls = dataset.table("collectives").collect()
    assert calls.group_by("rank").len().sort("rank").rows() == [(0, 3), (1, 3)]
    assert set(calls["job"]) == {"j"}
    assert dataset.table("op_traces").select(pl.len()).collect().item() == 30

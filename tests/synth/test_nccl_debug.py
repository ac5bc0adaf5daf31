"""The NCCL_DEBUG=INFO writer: lines as NCCL 2.27 prints them, read back by the real NCCL
reader into the same calls as the hook CSV output of the same job."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tracekit.core.dataset import open_dataset
from tracekit.ingest.nccl_debug import INIT_PATTERN, NO_TIMESTAMP_NOTE
from tracekit.ingest.pipeline import ingest
from tracekit.synth.faults import Injection
from tracekit.synth.job import JobSpec, generate_job
from tracekit.synth.layout import Layout
from tracekit.synth.writers.nccl_debug import bus_id, hex_digits

COLL_LINE = re.compile(
    r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}\] gpu0[12]:\d+:\d+ \[[0-3]\] NCCL INFO "
    r"(AllReduce|AllGather|ReduceScatter|Broadcast|Send|Recv): opCount [0-9a-f]+ "
    r"sendbuff (0x7f[0-9a-f]{10}|\(nil\)) recvbuff 0x7f[0-9a-f]{10} count \d+ datatype \d+ "
    r"op \d root \d+ comm 0x[0-9a-f]+ \[nranks=\d+\] stream 0x[0-9a-f]+$")


def _job(root: Path, collectives: str, **kw) -> Path:
    spec = JobSpec(Layout.parse("tp2-dp2-pp2", gpus_per_host=4), 40, seed=3,
                   collectives=collectives, monitoring=False,
                   injections=(Injection.parse("congestion:link=0-1@15+15x2"),), **kw)
    generate_job(root / collectives / "job", spec)
    summary = ingest([root / collectives / "job" / "ranks"], root / collectives / "ds")
    assert not summary.failed
    return root / collectives


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("nccl")
    return {fmt: _job(root, fmt) for fmt in ("hook", "nccl")}


def _calls(folder: Path) -> pl.DataFrame:
    return open_dataset(folder / "ds").table("collectives").collect().sort(
        "rank", "comm", "seq")


def test_same_calls_as_the_hook_csv(jobs):
    hook, nccl = _calls(jobs["hook"]), _calls(jobs["nccl"])
    keys = ["rank", "host", "pid", "comm", "nranks", "op", "seq", "count", "dtype",
            "bytes", "peer"]
    assert nccl.height == hook.height > 8 * 40 * 50
    assert nccl.select(keys).equals(hook.select(keys))
    # each process sees only its own GPU (CUDA_VISIBLE_DEVICES): NCCL prints CUDA device 0
    assert set(nccl["cuda_dev"]) == {0} and set(hook["cuda_dev"]) != {0}
    # NCCL_DEBUG_TIMESTAMP_FORMAT="[%F %T.%6f] ": enqueue times to the microsecond
    assert (nccl["t_start_ns"] == hook["t_start_ns"] // 1000 * 1000).all()
    manifest = open_dataset(jobs["nccl"] / "ds").manifest["sources"]
    assert {s["format"] for s in manifest} == {"nccl-debug"}
    assert all(s["quarantined"] == 0 and "NCCL 2.27.5+cuda12.9" in s["notes"] for s in manifest)


def test_lines_follow_the_nccl_format(jobs):
    path = sorted((jobs["nccl"] / "job" / "ranks").glob("nccl.gpu01.*.log"))[1]
    lines = path.read_text().splitlines()
    assert path.name.startswith("nccl.gpu01.") and path.name.endswith(".log")
    calls = [line for line in lines if ": opCount " in line]
    assert calls and all(COLL_LINE.match(line) for line in calls)
    inits = [line.split(" NCCL INFO ", 1)[1] for line in lines if " - Init " in line]
    assert all(re.match(INIT_PATTERN, init) for init in inits)
    assert inits[0].startswith("ncclCommInitRankConfig comm ") and inits[0].endswith("START")
    assert f"busId {bus_id(1)} " in inits[0] and "rank 1 nranks 8 cudaDev 0 nvmlDev 1" in inits[0]
    # world, then a split per group of the process: TP, DP, PP, embedding
    assert [i.split()[0] for i in inits] == ["ncclCommInitRankConfig"] * 2 + ["ncclCommSplit"] * 4
    assert [int(re.search(r"splitCount (\d+)", i)[1]) for i in inits[2:]] == [1, 2, 3, 4]


def test_op_count_advances_only_on_network_communicators(jobs):
    calls = _calls(jobs["nccl"]).filter(pl.col("rank") == 0)
    tp = calls.filter(pl.col("nranks") == 2, pl.col("op") == "allreduce",
                      pl.col("bytes") == 2048 * 2048 * 2)
    assert tp["op_count"].unique().to_list() == [0]  # TP stays on NVLink
    pipeline = calls.filter(pl.col("op").is_in(["send", "recv"]))
    # the pipeline crosses hosts 0-1: one launch per exchange, shared by its send and recv
    launches = pipeline["op_count"].to_numpy()
    assert launches[0] == 0 and np.all(np.diff(launches) >= 0) and launches[-1] > 100


def test_without_timestamps_the_reader_says_timing_is_missing(tmp_path):
    folder = _job(tmp_path, "nccl", nccl_timestamps=False)
    calls = _calls(folder)
    assert calls["t_start_ns"].null_count() == calls.height
    notes = open_dataset(folder / "ds").manifest["sources"][0]["notes"]
    assert NO_TIMESTAMP_NOTE in notes
    first = next((folder / "job" / "ranks").glob("*.log")).read_text().splitlines()[0]
    assert re.match(r"^gpu0\d:\d+:\d+ \[\d\] NCCL INFO Bootstrap: Using ", first)


def test_hex_digits():
    assert hex_digits(np.array([0, 9, 10, 255, 4096, 2**40 + 1])).to_list() == [
        "0", "9", "a", "ff", "1000", "10000000001"]

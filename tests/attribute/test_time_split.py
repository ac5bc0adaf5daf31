"""The time split of profiler traces: exact interval arithmetic on hand-built timelines, the
call split, and the job verdicts on simulated Nsight Systems jobs (one export per rank)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tests.ingest.nsys_export import Job, write_job
from tracekit.attribute.time_split import (
    call_split,
    episode_growth,
    job_verdict,
    rank_hosts,
    time_split,
)
from tracekit.core import schema
from tracekit.core.dataset import open_dataset
from tracekit.ingest.pipeline import ingest
from tracekit.pipeline.analyze import analyze

PARTS = ("compute_s", "overlapped_comm_s", "exposed_comm_s", "memory_s", "host_s", "idle_s",
         "late_send_s")


def _ops(rows: list[tuple]) -> pl.DataFrame:
    """(category, op, start, end, launch) rows of rank 0."""
    return schema.conform("op_traces", pl.DataFrame(
        rows, schema={"category": pl.String, "op": pl.String, "t_start_ns": pl.Int64,
                      "t_end_ns": pl.Int64, "t_launch_ns": pl.Int64}, orient="row")
        .with_columns(pl.lit(0, dtype=pl.Int32).alias("rank")))


def _calls(rows: list[tuple]) -> pl.DataFrame:
    """(rank, op, peer, issue, exec start, exec end, exec_on) rows on process group 0."""
    frame = pl.DataFrame(rows, schema={
        "rank": pl.Int32, "op": pl.String, "peer": pl.Int32, "t_start_ns": pl.Int64,
        "exec_start_ns": pl.Int64, "exec_end_ns": pl.Int64, "exec_on": pl.String},
        orient="row")
    return schema.conform("collectives", frame.with_columns(
        pl.lit("0").alias("comm"), pl.int_range(pl.len()).over("rank").alias("seq"),
        pl.col("exec_end_ns").alias("t_end_ns")))


def _steps(rank: int, bounds: list[tuple[int, int]]) -> pl.DataFrame:
    return schema.conform("iterations", pl.DataFrame(
        {"rank": [rank] * len(bounds), "iteration": list(range(len(bounds))),
         "t_start_ns": [b[0] for b in bounds], "t_end_ns": [b[1] for b in bounds],
         "source": ["framework"] * len(bounds)},
        schema_overrides={"rank": pl.Int32}))


def test_gpu_timeline_parts_add_up_to_the_iteration():
    ops = _ops([("kernel", "gemm", 1000, 1300, 990),     # launched before the device ran dry
                ("kernel", "gemm", 1400, 1600, 1350),    # launched 50 ns after: a host gap
                ("memcpy", "Memcpy DtoH", 1750, 1850, 1200),
                ("kernel", "gemm", 1900, 1950, 1700),    # launched early: waited (idle)
                ("kernel", "gemm", 2100, 2200, 2050)])   # next iteration, launched late
    calls = _calls([(0, "allreduce", None, 1100, 1500, 1800, "gpu")])
    split = time_split(_steps(0, [(1000, 2000), (2000, 2300)]), ops, calls)
    assert split.select("iteration", "duration_s", *PARTS, "bound", "timeline").rows() == [
        (0, 1e-6, 5.5e-7, 1e-7, 2e-7, 5e-8, 1.5e-7, 5e-8, 0.0, "compute", "gpu"),
        (1, 3e-7, 1e-7, 0.0, 0.0, 0.0, 1e-7, 1e-7, 0.0, "compute", "gpu")]
    total = sum(split[c] for c in ("compute_s", "exposed_comm_s", "memory_s", "host_s",
                                   "idle_s"))
    assert (total - split["duration_s"]).abs().max() < 1e-15


def test_cpu_timeline_idle_before_a_send_is_a_late_send():
    ops = _ops([("cpu_op", "aten::mm", 0, 100, None),
                ("cpu_op", "c10d::send", 150, 152, None)])  # the issue is not compute
    calls = _calls([(0, "send", 1, 150, 150, 170, "cpu"), (0, "allreduce", None, 180, 185, 190,
                                                          "cpu")])
    split = time_split(_steps(0, [(0, 200)]), ops, calls)
    assert split.select(*PARTS, "bound", "timeline").row(0) == (
        1e-7, 0.0, 2.5e-8, 0.0, 0.0, 7.5e-8, 5e-8, "compute", "cpu")


def test_call_split_matches_collectives_by_number_and_sends_with_receives():
    # rank 1 sends between its collectives, so seq numbers its second all-reduce 2, not 1
    calls = _calls([(0, "allreduce", None, 100, 110, 400, "cpu"),
                    (0, "recv", 1, 500, 510, 900, "cpu"),
                    (0, "allreduce", None, 1000, 1000, 1200, "cpu"),
                    (1, "allreduce", None, 200, 300, 420, "cpu"),
                    (1, "send", 0, 800, 800, 905, "cpu"),
                    (1, "allreduce", None, 1100, 1150, 1210, "cpu")])
    split = call_split(calls, pl.DataFrame(schema=schema.COMMS.schema))
    ns = [(pl.col(c) * 1e9).round().cast(pl.Int64) for c in ("queue_s", "wait_s", "transfer_s")]
    assert split.select("rank", "op", "instance", "members", "last_rank", *ns).sort(
        "rank", "instance").rows() == [
        (0, "recv", "0:1->0#0", 2, 1, 10, 290, 100),
        (0, "allreduce", "0[0,1]#0", 2, 1, 10, 190, 100),
        (0, "allreduce", "0[0,1]#1", 2, 1, 0, 150, 50),
        (1, "send", "0:1->0#0", 2, 1, 0, 0, 105),
        (1, "allreduce", "0[0,1]#0", 2, 1, 100, 0, 120),
        (1, "allreduce", "0[0,1]#1", 2, 1, 50, 0, 60)]


def _job_tables(tmp_path: Path, job: Job) -> dict[str, pl.DataFrame]:
    write_job(tmp_path / "dump", job)
    ingest([tmp_path / "dump"], tmp_path / "ds", job="j")
    dataset = open_dataset(tmp_path / "ds")
    return {n: dataset.table(n).collect()
            for n in ("collectives", "op_traces", "iterations", "comms")}


def _verdict(tables: dict[str, pl.DataFrame]):
    calls = call_split(tables["collectives"], tables["comms"])
    split = time_split(tables["iterations"], tables["op_traces"], tables["collectives"])
    return job_verdict(split, calls, rank_hosts(tables["collectives"])), split


@pytest.mark.parametrize(("job", "kind", "cause", "target", "numbers"), [
    (Job(), "unknown", "none", None, "at most rank 0, +0.00 ms"),
    (Job(slow_rank=2, compute_factor=1.5), "compute", "slow-compute", "rank:2",
     "its compute is 6.8 ms per iteration vs 4.5 ms for the median peer (x1.50)"),
    (Job(slow_rank=1, host_delay_us=1500), "compute", "host-bound", "rank:1",
     "its peers waited 1.5 ms per iteration for it"),
    (Job(slow_link=("node00", "node01"), transfer_factor=2.0), "communication",
     "network-congestion", "link:node00<->node01", "worst x1.33, 1.20 ms per call"),
], ids=["balanced", "slow-compute", "host-bound", "congested-link"])
def test_verdicts_on_simulated_nsight_jobs(tmp_path, job, kind, cause, target, numbers):
    verdict, _ = _verdict(_job_tables(tmp_path, job))
    assert (verdict.kind, verdict.cause, verdict.target) == (kind, cause, target)
    assert numbers in verdict.evidence


def test_episode_growth_names_the_part_and_rank(tmp_path):
    _, split = _verdict(_job_tables(tmp_path, Job(slow_rank=3, compute_factor=2.0,
                                                  slow_from=6)))
    episodes = pl.DataFrame({"detector": ["bocd"], "episode": [1], "start_iteration": [6],
                             "end_iteration": [11]}, schema_overrides={"episode": pl.Int32})
    assert episode_growth(split, episodes).select(
        "rank", "part", pl.col("before_s", "after_s", "growth_s").round(6)).rows() == [
        (3, "compute", 0.0045, 0.009, 0.0045)]


def test_analyze_names_the_rank_and_reports_the_split(tmp_path):
    write_job(tmp_path / "dump", Job(slow_rank=2, compute_factor=1.5))
    result = analyze([tmp_path / "dump"], tmp_path / "ds")
    assert (result.time_split.kind, result.time_split.target) == ("compute", "rank:2")
    dataset = open_dataset(tmp_path / "ds")
    assert dataset.table("time_split").select(pl.len()).collect().item() == 48
    assert dataset.table("call_split").select(pl.len()).collect().item() == 48
    page = result.report_markdown.read_text()
    assert "## Time split (profiler trace)" in page
    assert "compute, slow-compute: rank:2" in page

"""Peer comparison: stragglers no change point shows, from per-worker step tables and what-if op
traces, and none on real healthy jobs."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from tracekit import open_dataset
from tracekit.core import schema
from tracekit.detect import detect_dataset, peers
from tracekit.detect.peers import peer_medians, straggler_episodes
from tracekit.detect.verdict import VERDICT_DETECTOR, shown_episodes
from tracekit.ingest.pipeline import ingest
from tracekit.ingest.whatif import TRACE_COLUMNS
from tracekit.iterations import reconstruct_dataset
from tracekit.synth.corpus import job_spec
from tracekit.synth.job import generate_job

WORKERS = 8
STEPS = 200


def step_table(path, slow: dict[int, tuple[int, int, float]], seed: int = 0):
    """A per-worker step table CSV (worker, step, step_time_s): 1 s steps with 2 % noise;
    ``slow`` maps a worker to (first step, stop step, factor)."""
    rng = np.random.default_rng(seed)
    times = 1.0 + 0.02 * rng.standard_normal((WORKERS, STEPS))
    for worker, (first, stop, factor) in slow.items():
        times[worker, first:stop] *= factor
    frame = pl.DataFrame({
        "worker": np.repeat(np.arange(WORKERS), STEPS),
        "step": np.tile(np.arange(STEPS), WORKERS),
        "step_time_s": times.ravel(),
    })
    frame.write_csv(path)
    return times


def detected(tmp_path, source) -> pl.DataFrame:
    ingest([source], tmp_path / "ds")
    return detect_dataset(tmp_path / "ds").episodes


def test_peer_medians_leave_each_row_out():
    values = np.array([[1.0, 4.0], [2.0, 3.0], [3.0, 2.0], [10.0, 1.0]])
    expected = [[np.median(np.delete(values[:, c], r)) for c in range(2)] for r in range(4)]
    assert peer_medians(values).tolist() == expected
    assert peer_medians(values[:3]).tolist() == [[2.5, 2.5], [2.0, 3.0], [1.5, 3.5]]


def test_worker_slowed_mid_run_is_one_episode(tmp_path):
    """The job median hides one worker of eight at x2.0 for 60 steps: no job-level episode,
    one peer episode naming that worker, with its blocking slowdown."""
    times = step_table(tmp_path / "steps.csv", {3: (80, 140, 2.0)})
    episodes = detected(tmp_path, tmp_path / "steps.csv")
    assert episodes.filter(pl.col("detector") == "bocd+b").is_empty()
    (row,) = episodes.filter(pl.col("detector") == "peers").rows(named=True)
    assert (row["ranks"], row["start_iteration"], row["end_iteration"]) == ("3", 80, 139)
    injected = times.max(axis=0)[80:140].sum() / np.delete(times, 3, axis=0).max(
        axis=0)[80:140].sum()
    assert row["slowdown"] == pytest.approx(injected, rel=0.10)
    assert row["slowdown"] == pytest.approx(2.0, rel=0.10)
    name, verdict = shown_episodes(open_dataset(tmp_path / "ds").table("episodes").collect())
    assert name == VERDICT_DETECTOR and verdict["ranks"].to_list() == ["3"]


def test_straggler_from_the_first_step(tmp_path):
    """A worker x1.5 in every step has no change point; the peers name it from step 0."""
    step_table(tmp_path / "steps.csv", {5: (0, STEPS, 1.5)})
    episodes = detected(tmp_path, tmp_path / "steps.csv")
    (row,) = episodes.filter(pl.col("detector") == "peers").rows(named=True)
    assert (row["ranks"], row["start_iteration"], row["iterations"]) == ("5", 0, STEPS)
    assert row["t_end_ns"] is None  # still slow at the end of the trace
    assert row["slowdown"] == pytest.approx(1.5, rel=0.10)
    assert row["jct_slowdown"] == pytest.approx(row["lost_s"] / (row["duration_s"]
                                                                 - row["lost_s"]))


def test_two_workers_together_are_one_episode(tmp_path):
    step_table(tmp_path / "steps.csv", {1: (50, 120, 1.6), 6: (60, 110, 1.8)})
    (row,) = detected(tmp_path, tmp_path / "steps.csv").filter(
        pl.col("detector") == "peers").rows(named=True)
    assert (row["ranks"], row["start_iteration"], row["end_iteration"]) == ("1,6", 50, 119)


@pytest.mark.parametrize(("factor", "found"), [(1.09, 0), (1.25, 1)])
def test_threshold_is_ten_percent_over_peers(tmp_path, factor, found):
    step_table(tmp_path / "steps.csv", {2: (0, STEPS, factor)})
    episodes = detected(tmp_path, tmp_path / "steps.csv")
    assert episodes.filter(pl.col("detector") == "peers").height == found


def test_short_slow_stretch_is_no_episode(tmp_path):
    step_table(tmp_path / "steps.csv", {2: (100, 108, 3.0)})  # 8 steps: a disturbance
    assert detected(tmp_path, tmp_path / "steps.csv").filter(
        pl.col("detector") == "peers").is_empty()


def whatif_trace(path, slow_rank: int | None, factor: float = 2.0, steps: int = 40):
    """A what-if op trace of dp4 x pp2 (8 ranks; stage 1 holds 30 % more layers): forward and
    backward compute per rank, then a gradient reduce-scatter every rank waits in until the
    slowest has computed. Returns the injected blocking slowdown (actual over ideal job time)."""
    rng = np.random.default_rng(7)
    layers = np.where(np.arange(8) // 4 == 0, 1.0, 1.3)
    rows, actual, ideal = [], 0.0, 0.0
    for step in range(steps):
        healthy = layers * (1 + 0.01 * rng.standard_normal(8))
        compute = healthy * np.where(np.arange(8) == slow_rank, factor, 1.0)
        end = compute.max() + 0.2
        actual += end
        ideal += healthy.max() + 0.2
        for rank in range(8):
            forward = compute[rank] / 3
            for optype, start, duration in (
                    ("forward-compute", 0.0, forward),
                    ("backward-compute", forward, compute[rank] - forward),
                    ("grads-reduce-scatter", compute[rank], end - compute[rank])):
                rows.append({"dp_rank": rank % 4, "stage": rank // 4, "rank": rank, "step": step,
                             "optype": optype, "start_ts": start, "duration": duration,
                             "seq_id": 0, "mc": -1, "mb_id": -1, "gmc": -1})
    pl.DataFrame(rows).with_columns(
        pl.col(c).cast(t) for c, t in TRACE_COLUMNS.items()).write_parquet(path)
    return actual / ideal


def test_whatif_straggler_from_the_first_step(tmp_path):
    """A GPU at x2 compute in every step of a what-if trace (a thermal GPU): peers of the same
    stage name it; the stage holding more layers is not a straggler."""
    injected = whatif_trace(tmp_path / "trace-T.parquet", slow_rank=5)
    episodes = detected(tmp_path, tmp_path / "trace-T.parquet").filter(
        pl.col("detector") == "peers")
    (row,) = episodes.rows(named=True)
    assert (row["ranks"], row["start_iteration"], row["iterations"]) == ("5", 0, 40)
    assert row["slowdown"] == pytest.approx(injected, rel=0.10)
    assert "op_traces compute" in row["evidence"]


def test_whatif_stage_imbalance_alone_is_no_straggler(tmp_path):
    whatif_trace(tmp_path / "trace-T.parquet", slow_rank=None)
    assert detected(tmp_path, tmp_path / "trace-T.parquet").filter(
        pl.col("detector") == "peers").is_empty()


def test_no_straggler_on_real_jobs(real_dir, tmp_path):
    """The real ByteDance trace (a stage imbalance: stage 3 is slower, its two ranks alike), the
    real Alibaba PAI job (stable offsets; its slowest worker x1.095 its peers, noisy) and the
    real MLPerf run (one rank) give no straggler episode."""
    for name, files in (("bytedance-whatif", ["trace-ST.parquet", "meta-ST.yaml"]),
                        ("alibaba-pai-minibatch", ["job_2_norm.csv"]),
                        ("mlperf-gpt3", ["raw_eos_n64_gpt3_result_0.txt"])):
        ingest([real_dir / name / f for f in files], tmp_path / name)
        dataset = open_dataset(tmp_path / name)
        found = straggler_episodes(name, dataset.table("iterations").collect(),
                                   dataset.table("op_traces").collect())
        assert found.is_empty(), name


def synthesized(tmp_path, layout: str, inject: list[str]) -> tuple[pl.DataFrame, float]:
    """Peer episodes of a synthesized job in the raw formats (hook CSV collectives, Megatron
    log), after ingest and ACF iterations, and the injected slowdown (truth: actual over
    healthy job time)."""
    spec = job_spec(layout=layout, iterations=200, inject=inject, scenario=None,
                    model="gpt-tiny", hardware="a100", gpus_per_host=4,
                    sequence_parallel=False, distributed_optimizer=True, collectives="hook",
                    nccl_timestamps=True, monitoring=False, seed=5, job="j")
    generate_job(tmp_path / "raw", spec)
    ingest([tmp_path / "raw"], tmp_path / "ds")
    reconstruct_dataset(open_dataset(tmp_path / "ds"))
    truth = pl.read_parquet(tmp_path / "raw" / "truth.parquet")
    episodes = detect_dataset(tmp_path / "ds", ["peers"]).episodes
    return episodes, truth["duration_s"].sum() / truth["healthy_s"].sum()


def test_thermal_gpu_from_the_first_step_in_raw_formats(tmp_path):
    """tp2 x dp2 x pp2, rank 5's GPU x1.3 from the start: every rank's iteration time is the
    same (they wait for it), its time outside collectives is not."""
    episodes, injected = synthesized(tmp_path, "tp2-dp2-pp2", ["thermal:rank=5@0+200x1.3"])
    (row,) = episodes.rows(named=True)
    assert (row["ranks"], row["start_iteration"]) == ("5", 0)
    assert row["slowdown"] == pytest.approx(injected, rel=0.10)
    assert "time outside collectives" in row["evidence"]


def test_own_times_do_not_depend_on_the_blocks_of_ranks(tmp_path, monkeypatch):
    """The time outside collectives is computed by blocks of ranks (a worker holds one rank's
    calls): blocks of one rank and blocks of the whole job give the same own times."""
    synthesized(tmp_path, "tp2-dp2-pp2", ["thermal:rank=5@0+200x1.3"])
    dataset = open_dataset(tmp_path / "ds")
    iterations = dataset.table("iterations").filter(pl.col("source") == "acf").collect()
    whole = peers.outside_collectives(iterations, dataset.table("collectives"))
    monkeypatch.setattr(peers, "RANKS_PER_BLOCK", 1)
    single = peers.outside_collectives(iterations, dataset.table("collectives"))
    assert (whole.height, whole["rank"].n_unique()) == (iterations.height, 8)
    assert whole.equals(single)


def test_healthy_pipeline_job_has_no_straggler(tmp_path):
    """Pipeline stages differ in own time (the last holds the output head); peers are the ranks
    of the same stage."""
    episodes, _ = synthesized(tmp_path, "tp1-dp2-pp2", [])
    assert episodes.is_empty()


def test_detecting_the_verdict_runs_its_sources(tmp_path):
    step_table(tmp_path / "steps.csv", {4: (80, 140, 2.0)})
    ingest([tmp_path / "steps.csv"], tmp_path / "ds")
    found = detect_dataset(tmp_path / "ds", [VERDICT_DETECTOR])
    assert set(found.events["detector"]) == {"bocd+b"}  # rank 4's own change points
    assert found.episodes["detector"].to_list() == ["peers"]
    weakened = detect_dataset(tmp_path / "ds", ["peers"], min_slowdown=1.5)
    assert weakened.episodes.is_empty()  # its blocking slowdown, x2.0, is under x2.5


def test_time_outside_calls_counts_overlaps_once_and_each_call_where_it_starts():
    """Per iteration, the duration less the union of the calls that start in it before its
    end: overlapping calls count once, a call crossing into the next iteration counts whole in
    the one it starts in (the next counts from where it ended), calls after an iteration's end
    or before the first iteration, and calls without an end, count nowhere."""
    s = 1_000_000_000
    iterations = pl.DataFrame({
        "rank": [0, 0, 0], "iteration": [0, 1, 2], "t_start_ns": [0, s, 3 * s],
        "t_end_ns": [s, 2 * s, 4 * s], "duration_s": [1.0, 1.0, 1.0]},
        schema_overrides={"rank": pl.Int32})
    starts, ends = zip(
        (1.05, 1.2), (0.1, 0.3), (0.2, 0.4), (0.9, 1.1), (-0.5, -0.4), (2.5, 2.7), (0.5, None),
        strict=True)
    calls = pl.LazyFrame({
        "rank": [0] * len(starts), "t_start_ns": [round(t * s) for t in starts],
        "t_end_ns": [None if t is None else round(t * s) for t in ends]},
        schema_overrides={"rank": pl.Int32, "t_start_ns": pl.Int64, "t_end_ns": pl.Int64})
    outside = peers.outside_collectives(iterations, calls).sort("iteration")
    assert outside.rows() == [(0, 0, 0.5), (0, 1, 0.9), (0, 2, 1.0)]


def test_no_outside_time_without_call_ends():
    iterations = pl.DataFrame({"rank": [0], "iteration": [0], "t_start_ns": [0],
                               "t_end_ns": [10], "duration_s": [1e-8]},
                              schema_overrides={"rank": pl.Int32})
    calls = pl.LazyFrame({"rank": [0], "t_start_ns": [1], "t_end_ns": [None]},
                         schema_overrides={"rank": pl.Int32, "t_end_ns": pl.Int64})
    assert peers.outside_collectives(iterations, calls) is None


@pytest.mark.parametrize(("job_factor", "expected"), [(1.05, []), (1.15, [(40, 69)])])
def test_a_straggler_whose_excess_the_job_absorbs_is_no_fail_slow(job_factor, expected):
    """Rank 3 computes x1.3 its peers on steps [40, 70); the job's step (slack in a pipeline
    absorbs part of the excess) slows x1.05 or x1.15: its blocking slowdown, x1.15 either
    way, counts the whole excess, so only the job's own step tells a fail-slow."""
    rng = np.random.default_rng(3)
    steps, ranks = 120, 8
    compute = 0.5 * (1 + 0.01 * rng.standard_normal((ranks, steps)))
    compute[3, 40:70] *= 1.3
    step_s = 1.0 + 0.01 * rng.standard_normal(steps)
    step_s[40:70] *= job_factor
    ends = (np.cumsum(step_s) * 1e9).astype(np.int64)
    iterations = schema.conform("iterations", pl.DataFrame({
        "job": "j", "rank": np.repeat(np.arange(ranks), steps),
        "iteration": np.tile(np.arange(steps), ranks),
        "t_start_ns": np.tile(ends - (step_s * 1e9).astype(np.int64), ranks),
        "t_end_ns": np.tile(ends, ranks), "duration_s": np.tile(step_s, ranks),
        "source": "framework", "quality": "ok"}))
    op_traces = schema.conform("op_traces", pl.DataFrame({
        "job": "j", "rank": np.repeat(np.arange(ranks), steps), "pp_stage": 0,
        "step": np.tile(np.arange(steps), ranks), "op": "forward-compute",
        "duration_s": compute.ravel()}))
    found = straggler_episodes("j", iterations, op_traces)
    assert list(zip(found["start_iteration"], found["end_iteration"], strict=True)) == expected

"""Iteration reconstruction on Megatron-like call sequences with known iteration times."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from tests.iterations.megatron_calls import (
    Layout,
    collectives,
    drop_records,
    insert_calls,
    iteration_calls,
    rank_frame,
)
from tracekit.cli import app
from tracekit.core import schema
from tracekit.core.dataset import create_dataset, open_dataset
from tracekit.iterations import (
    QUALITY_DISTURBED,
    QUALITY_OK,
    QUALITY_RESYNC,
    compare,
    find_period,
    match_acf,
    reconstruct,
    reconstruct_dataset,
)

LAYOUTS = [
    pytest.param(Layout(tp=2, pp=1, dp=2), 0, id="tp2-dp2"),
    pytest.param(Layout(tp=1, pp=1, dp=8), 0, id="dp8"),
    pytest.param(Layout(tp=4, pp=4, dp=2, micro=8, layers=4), 0, id="tp4-pp4-dp2-first"),
    pytest.param(Layout(tp=4, pp=4, dp=2, micro=8, layers=4), 2, id="tp4-pp4-dp2-middle"),
    pytest.param(Layout(tp=8, pp=2, dp=4, micro=16, layers=8, distributed_optimizer=True), 1,
                 id="tp8-pp2-dp4-distopt-last"),
    pytest.param(Layout(tp=2, pp=2, dp=1, micro=4), 0, id="tp2-pp2"),
    # 512 TP all-reduces and one grad-norm all-reduce per iteration: the once-per-iteration
    # call is 0.2 % of the calls, under any coverage slack
    pytest.param(Layout(tp=8, pp=1, dp=1, micro=16, layers=8), 0, id="tp8-only"),
    pytest.param(Layout(tp=1, pp=4, dp=1, micro=8), 1, id="pp4-only-middle"),
    pytest.param(Layout(tp=2, pp=4, dp=2, micro=32, layers=2), 3, id="tp2-pp4-dp2-32-micro-last"),
    # the sync all-reduce twice per iteration (found-inf, grad norm), no call once per iteration
    pytest.param(Layout(tp=4, pp=1, dp=1, micro=2, layers=1, found_inf=True), 0,
                 id="tp4-only-found-inf"),
    pytest.param(Layout(tp=4, pp=1, dp=2, experts=True, found_inf=True), 0, id="tp4-dp2-moe"),
]


def test_match_acf_counts_equal_symbols_at_each_lag():
    acf = match_acf(np.array([0, 1, 0, 1, 0, 2]), 3)
    # lag 1: no pair equal; lag 2: (0,0) (1,1) (0,0) equal, (1,2) not -> 3/4; lag 3: 0/3
    assert acf.tolist() == [1.0, 0.0, 0.75, 0.0]


@pytest.mark.parametrize(("layout", "stage"), LAYOUTS)
def test_exact_period_and_error_for_each_layout(layout, stage):
    calls, truth = rank_frame(layout, stage, iterations=120, seed=3)
    result = reconstruct(calls)
    (summary,) = result.ranks
    assert summary.period_calls == len(iteration_calls(layout, stage))
    assert summary.iterations == 119 and summary.recovered == 119
    assert summary.acf == 1.0
    assert set(result.iterations["quality"]) == {QUALITY_OK}
    comparison = compare(result.iterations, truth, "truth")
    assert (comparison.missed, comparison.extra) == (0, 0)
    assert comparison.rel_error_quantile(0.5) < 1e-3
    assert comparison.rel_error_quantile(1.0) < 1e-3
    schema.validate("iterations", result.iterations)


def test_anchored_period_beats_the_baseline_sub_period():
    """Many TP all-reduces per micro-batch: the baseline ACF > 0.95 picks a micro-batch-sized
    lag; the anchored period is the whole iteration."""
    layout = Layout(tp=8, pp=2, dp=4, micro=16, layers=8, distributed_optimizer=True)
    calls, _ = rank_frame(layout, 1, iterations=60)
    result = reconstruct(calls)
    (summary,) = result.ranks
    assert summary.period_calls == 568
    assert summary.baseline_lag == 35
    assert summary.pattern.startswith("512xallreduce[8] 16xallreduce[4] 16xrecv[2] 16xsend[2]")
    assert result.baseline_note == ("the baseline (smallest lag with ACF > 0.95) disagrees on 1 "
                                    "of 1 ranks: lag 35 where the period is 568 calls on rank 0")
    assert not result.warnings


@pytest.mark.parametrize(("layout", "stage"), LAYOUTS)
def test_one_percent_dropped_records_invent_nothing(layout, stage):
    calls, truth = rank_frame(layout, stage, iterations=300, seed=5)
    kept = drop_records(calls, 0.01, seed=11)
    result = reconstruct(kept)
    comparison = compare(result.iterations, truth, "truth")
    assert comparison.extra == 0
    # an iteration is missed only next to a lost grad-norm record that no other
    # once-per-iteration call could stand in for (a gap, never a guess)
    sync = (pl.col("op") == "allreduce") & (pl.col("bytes") == 4)
    lost = calls.filter(sync).height - kept.filter(sync).height
    assert comparison.missed <= 2 * lost
    assert comparison.rel_error_quantile(0.5) < 1e-3
    assert comparison.rel_error_quantile(0.99) < 0.005
    assert set(result.iterations["quality"]) <= {QUALITY_OK, QUALITY_RESYNC}


def test_dropped_anchor_is_resynchronised_from_a_secondary_call():
    layout = Layout(tp=2, pp=1, dp=2)
    calls, truth = rank_frame(layout, 0, iterations=50)
    anchor = (pl.col("op") == "allreduce") & (pl.col("bytes") == 4)
    nth_anchor = pl.int_range(pl.len()).over(anchor)
    dropped = calls.filter(~(anchor & (nth_anchor == 20)))
    result = reconstruct(dropped)
    rows = result.iterations
    assert rows.height == 49
    resync = rows.filter(pl.col("quality") == QUALITY_RESYNC)
    assert resync["iteration"].to_list() == [19, 20]
    comparison = compare(rows, truth, "truth")
    assert (comparison.missed, comparison.extra) == (0, 0)
    assert comparison.rel_error_quantile(1.0) < 0.01


def test_lost_anchor_and_secondaries_leave_a_gap_not_an_invented_iteration():
    layout = Layout(tp=1, pp=1, dp=2, buckets=1)
    calls, truth = rank_frame(layout, 0, iterations=40)
    t_cut = truth["t_end_ns"][9]
    hole = (pl.col("t_end_ns") > t_cut - 400_000_000) & (pl.col("t_end_ns") <= t_cut)
    result = reconstruct(calls.filter(~hole))
    numbers = result.iterations["iteration"].to_list()
    # the hole swallows the anchor closing iteration 10 and its secondaries: the two
    # iterations it merges get no rows, and numbering skips them
    assert len(numbers) == 37 and numbers[-1] == 38
    assert numbers[7:9] == [7, 10]
    assert result.ranks[0].iterations == 39 and result.ranks[0].recovered == 37
    comparison = compare(result.iterations, truth, "truth")
    assert (comparison.missed, comparison.extra) == (2, 0)
    assert comparison.rel_error_quantile(1.0) < 1e-3


def test_evaluation_and_checkpoint_windows_are_marked_disturbed():
    layout = Layout(tp=2, pp=1, dp=2)
    calls, truth = rank_frame(layout, 0, iterations=60)
    after = int(truth["t_end_ns"][29]) + 1_000_000
    evaluation = [("allreduce", 2, 4096 * 1024 * 2 * 1)] * 40
    calls = insert_calls(calls, after, evaluation, span_ns=3_000_000_000)
    after = int(truth["t_end_ns"][44]) + 3_000_000_000 + 1_000_000
    checkpoint = [("allreduce", 4, 4), ("allreduce", 4, 4)]  # barriers like the anchor
    calls = insert_calls(calls, after, checkpoint, span_ns=20_000_000_000)
    result = reconstruct(calls)
    rows = result.iterations
    assert rows.height == 59
    disturbed = rows.filter(pl.col("quality") == QUALITY_DISTURBED)
    assert disturbed["iteration"].to_list() == [29, 44]
    assert disturbed["duration_s"].to_numpy() == pytest.approx(
        truth["duration_s"].to_numpy()[[30, 45]] + [3.0, 20.0], abs=1e-6)
    assert result.ranks[0].period_calls == 40


def test_schedule_change_after_a_restart_is_followed():
    before, _ = rank_frame(Layout(tp=2, dp=2, micro=4), 0, iterations=50, pid=100)
    t_restart = int(before["t_end_ns"].max()) + 60_000_000_000
    after, _ = rank_frame(Layout(tp=2, dp=2, micro=8), 0, iterations=50, pid=200,
                          t0_ns=t_restart, base_s=2.0)
    result = reconstruct(collectives(pl.concat([before, after])))
    (summary,) = result.ranks
    assert summary.segments == 2
    rows = result.iterations
    assert rows.height == 98
    assert rows["iteration"].to_list() == list(range(98))
    first, second = rows.head(49), rows.tail(49)
    assert first["duration_s"].mean() == pytest.approx(1.0, rel=0.01)
    assert second["duration_s"].mean() == pytest.approx(2.0, rel=0.01)


def test_rank_without_periodic_structure_warns_and_writes_nothing():
    periodic, _ = rank_frame(Layout(), 0, iterations=50, rank=0)
    rng = np.random.default_rng(0)
    noise = periodic.with_columns(
        pl.lit(1, dtype=pl.Int32).alias("rank"),
        pl.Series(rng.choice(["allreduce", "allgather", "broadcast"], periodic.height)).alias("op"),
        pl.Series(rng.integers(1, 200, periodic.height) * 1024).alias("bytes"),
    )
    result = reconstruct(collectives(pl.concat([periodic, noise])))
    assert set(result.iterations["rank"]) == {0}
    (warning,) = [w for w in result.warnings if w.startswith("rank 1")]
    assert "no periodic structure" in warning
    assert result.ranks[1].period_calls is None


def test_calls_without_clock_give_period_but_no_times():
    calls, _ = rank_frame(Layout(), 0, iterations=30)
    result = reconstruct(calls.with_columns(pl.lit(None, pl.Int64).alias("t_start_ns"),
                                            pl.lit(None, pl.Int64).alias("t_end_ns")))
    assert result.iterations.height == 0
    (summary,) = result.ranks
    assert summary.period_calls == 40 and summary.iterations == 29
    assert "no timestamps" in summary.warnings[0]


def test_ranks_are_numbered_alike_even_when_one_loses_its_first_anchor():
    rank0, truth = rank_frame(Layout(), 0, iterations=30, rank=0)
    rank1, _ = rank_frame(Layout(), 0, iterations=30, rank=1)
    anchor = (pl.col("op") == "allreduce") & (pl.col("bytes") == 4)
    rank1 = rank1.filter(~(anchor & (pl.int_range(pl.len()).over(anchor) == 0)))
    rows = reconstruct(collectives(pl.concat([rank0, rank1]))).iterations
    by_rank = rows.pivot(on="rank", index="iteration", values="t_end_ns").drop_nulls()
    assert by_rank.height >= 28
    assert (by_rank["0"] == by_rank["1"]).all()


def test_ranks_of_every_stage_share_numbers_and_the_last_arrival():
    """Stages issue different calls; the job-wide boundary is where the last rank completes
    the grad-norm all-reduce (here rank 1, 3 ms late throughout)."""
    layout = Layout(tp=2, pp=2, dp=1, micro=4)
    stage0, truth = rank_frame(layout, 0, rank=0, iterations=40, seed=2)
    stage1, _ = rank_frame(layout, 1, rank=1, iterations=40, seed=2)
    late = stage1.with_columns(pl.col("t_start_ns") + 3_000_000, pl.col("t_end_ns") + 3_000_000)
    result = reconstruct(collectives(pl.concat([stage0, late])))
    assert [r.period_calls for r in result.ranks] == [len(iteration_calls(layout, 0)),
                                                      len(iteration_calls(layout, 1))]
    by_rank = result.iterations.pivot(on="rank", index="iteration", values="t_end_ns")
    assert by_rank["iteration"].to_list() == list(range(39))
    assert by_rank["0"].to_list() == by_rank["1"].to_list()
    assert by_rank["1"].to_list() == (truth["t_end_ns"][1:] + 3_000_000).to_list()


@pytest.mark.parametrize(("jitter", "clock_offset_ns"), [(0.2, 0), (0.02, 500_000_000)],
                         ids=["independent-iteration-times", "clocks-half-an-iteration-apart"])
def test_ranks_whose_boundaries_do_not_line_up_keep_their_own_times(jitter, clock_offset_ns):
    """Ranks that do not wait for each other, or whose clocks are half an
    iteration apart: no job-wide boundary shows in time, so nothing is moved."""
    rank0, truth0 = rank_frame(Layout(), 0, iterations=60, rank=0, seed=1)
    rank1, truth1 = rank_frame(Layout(), 0, iterations=60, rank=1, seed=2, jitter=jitter,
                               t0_ns=1_700_000_000_000_000_000 + clock_offset_ns)
    rows = reconstruct(collectives(pl.concat([rank0, rank1]))).iterations
    for rank, truth in ((0, truth0), (1, truth1)):
        mine = rows.filter(pl.col("rank") == rank)
        assert mine["t_end_ns"].to_list() == truth["t_end_ns"][1:].to_list()


def test_find_period_rejects_sequences_without_anchor():
    assert find_period(np.random.default_rng(1).integers(0, 50, 2000)) is None


def test_dataset_round_trip_keeps_framework_rows_and_compares(tmp_path):
    calls, truth = rank_frame(Layout(), 0, iterations=80)
    dataset = create_dataset(tmp_path / "job", job="test")
    dataset.write_part("collectives", calls, "calls")
    framework = truth.with_columns(pl.lit("framework").alias("source"))
    dataset.write_part("iterations", framework, "megatron")
    dataset.save_manifest()
    reconstruct_dataset(dataset)
    reconstruct_dataset(dataset)
    stored = dataset.table("iterations").collect()
    assert stored.group_by("source").len().sort("source").rows() == [("acf", 79),
                                                                      ("framework", 80)]
    result = CliRunner().invoke(app, ["iterations", str(tmp_path / "job")])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "job test: 1 rank; period 40 calls on 1 rank",
        "iterations per rank 79, 100.0% with times, mean 1.0024 s",
        "pattern (rank 0): 39xallreduce[2] 1xallreduce[4]",
        "vs framework: 79 matched, 0 missed, 0 extra; median relative error 0.0000%, p99 0.0000%",
    ]


def test_failing_rank_fails_the_stage_naming_rank_and_cause_and_keeps_the_table(tmp_path,
                                                                               monkeypatch):
    import importlib

    module = importlib.import_module("tracekit.iterations.reconstruct")
    calls, _ = rank_frame(Layout(), 0, iterations=30, rank=3)
    dataset = create_dataset(tmp_path / "job", job="test")
    dataset.write_part("collectives", calls, "calls")
    dataset.save_manifest()
    assert CliRunner().invoke(app, ["iterations", str(tmp_path / "job")]).exit_code == 0

    def out_of_bounds(symbols, period):
        raise IndexError("index 300 is out of bounds for axis 0 with size 300")

    monkeypatch.setattr(module, "_split_intervals", out_of_bounds)
    result = CliRunner().invoke(app, ["iterations", str(tmp_path / "job")])
    assert result.exit_code == 2
    assert result.output == (
        "error: 1 of 1 partitions failed, nothing was written: ranks 3-3: rank 3: IndexError: "
        "index 300 is out of bounds for axis 0 with size 300 (the other partitions "
        "completed)\n")
    kept = open_dataset(tmp_path / "job").table("iterations").collect()
    assert kept.height == 29 and set(kept["rank"]) == {3}


def test_a_lost_worker_is_retried_not_reported_as_the_ranks_error(tmp_path, monkeypatch):
    """A MemoryError (the OOM killer's doing, not the rank's data) reaches the executor, which
    runs the partition again, instead of becoming "rank 3: MemoryError"."""
    import importlib

    module = importlib.import_module("tracekit.iterations.reconstruct")
    calls, _ = rank_frame(Layout(), 0, iterations=30, rank=3)
    dataset = create_dataset(tmp_path / "job", job="test")
    dataset.write_part("collectives", calls, "calls")
    dataset.save_manifest()
    split, failures = module._split_intervals, []

    def lost_once(symbols, period):
        if not failures:
            failures.append(1)
            raise MemoryError
        return split(symbols, period)

    monkeypatch.setattr(module, "_split_intervals", lost_once)
    result = CliRunner().invoke(app, ["iterations", str(tmp_path / "job")])
    assert result.exit_code == 0, result.output
    assert failures == [1]
    assert open_dataset(tmp_path / "job").table("iterations").collect().height == 29


def test_cli_errors_are_one_line(tmp_path):
    create_dataset(tmp_path / "empty", job="empty")
    result = CliRunner().invoke(app, ["iterations", str(tmp_path / "empty")])
    assert result.exit_code == 2
    assert "no collectives table" in result.output


def test_each_rank_read_from_its_own_parts_gives_the_rows_of_the_whole_table(tmp_path):
    """The dataset's reconstruction reads each rank's ``rank=N`` parts alone (a worker holds
    one rank's calls); the rows are those of the whole table read at once."""
    from tracekit.ingest.pipeline import ingest
    from tracekit.synth.job import JobSpec, generate_job
    from tracekit.synth.layout import Layout as SynthLayout

    generate_job(tmp_path / "job", JobSpec(SynthLayout.parse("tp2-dp2-pp2"), 60, seed=3,
                                           monitoring=False))
    ingest([tmp_path / "job" / "ranks"], tmp_path / "ds")
    dataset = open_dataset(tmp_path / "ds")
    whole = reconstruct(dataset.table("collectives").collect())
    by_rank = reconstruct_dataset(dataset)
    assert [r.rank for r in by_rank.ranks] == list(range(8))
    assert by_rank.iterations.height == 8 * 59  # the last iteration has no closing anchor
    assert by_rank.iterations.equals(whole.iterations)

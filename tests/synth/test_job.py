"""A synthetic job end to end: call sequences match the layout, synchronisation spreads
delays the way real collectives do, labels agree with injections, output is deterministic and
reads back through the real ingest readers."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tracekit.core.dataset import open_dataset
from tracekit.ingest.pipeline import ingest
from tracekit.synth.faults import Injection
from tracekit.synth.job import JobRun, JobSpec, generate_job
from tracekit.synth.layout import Layout


def _spec(layout="tp2-dp2-pp2", iterations=200, inject=(), **kw) -> JobSpec:
    return JobSpec(Layout.parse(layout, gpus_per_host=4), iterations, seed=7,
                   injections=tuple(Injection.parse(i) for i in inject), **kw)


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> tuple[Path, object]:
    out = tmp_path_factory.mktemp("synth") / "job"
    spec = _spec(inject=("congestion:link=0-1@60+40x2", "thermal:rank=3@130+30x1.5"))
    return out, generate_job(out, spec)


@pytest.fixture(scope="module")
def dataset(job, tmp_path_factory):
    out, _ = job
    target = tmp_path_factory.mktemp("ds") / "ds"
    summary = ingest([out], target)
    assert not summary.failed
    return open_dataset(target)


def test_calls_per_iteration_match_the_layout(dataset):
    calls = dataset.table("collectives").collect()
    # rank 0: TP 2 x DP 2 x PP 2, 4 layers (2 per stage), 4 micro-batches, first stage
    rank0 = calls.filter(pl.col("rank") == 0)
    iterations = 200
    activation_bytes = 2048 * 2048 * 2  # seq x hidden x bf16
    tp_allreduce = rank0.filter((pl.col("op") == "allreduce")
                                & (pl.col("bytes") == activation_bytes))
    # 2 all-reduces per layer forward and 2 backward, 2 layers, 4 micro-batches
    assert tp_allreduce.height == iterations * 2 * 2 * 2 * 4
    broadcasts = rank0.filter(pl.col("op") == "broadcast")
    assert broadcasts.height == iterations * 4 * 2  # tokens + position ids per micro-batch
    sends = rank0.filter(pl.col("op") == "send")
    assert sends.height == iterations * 4 and set(sends["bytes"]) == {activation_bytes}
    # distributed optimizer: gradient buckets reduce-scattered, parameters all-gathered
    reduce_scatter = rank0.filter(pl.col("op") == "reducescatter")
    all_gather = rank0.filter((pl.col("op") == "allgather") & (pl.col("nranks") == 2))
    assert reduce_scatter.height == iterations * 3  # 2 full 40M buckets + remainder
    assert all_gather.height == reduce_scatter.height


def test_one_slow_gpu_slows_everyone(tmp_path):
    run = JobRun(_spec("tp2-dp2-pp1"))
    cond = run.conditions(0, 128, healthy=True)
    base = run.simulator.run(cond, record=False).end_s
    cond.gpu_factor[:, 3] *= 2.0
    slow = run.simulator.run(cond, record=False).end_s
    assert np.all(slow[10:] > base[10:] * 1.3)


def test_congested_link_slows_only_groups_that_cross_it():
    # tp2-dp4 on hosts of 4: DP groups cross hosts 0-1, TP groups stay inside a host
    run = JobRun(_spec("tp2-dp4-pp1"))
    cond = run.conditions(0, 16, healthy=True)
    healthy = run.simulator.run(cond)
    cond.link_factor = {(0, 1): np.full(16, 3.0)}
    congested = run.simulator.run(cond)

    def transfer(result, group):
        return sum((r.end_s - r.arrival_s).sum() for r in result.calls if r.op.group == group)

    assert transfer(congested, "dp") > 2.0 * transfer(healthy, "dp")
    assert transfer(congested, "tp") == pytest.approx(transfer(healthy, "tp"), rel=0.05)


def test_labels_agree_with_injections(job):
    _, result = job
    labels = result.labels
    injected = labels.filter(pl.col("kind") != "noise").sort("episode")
    assert injected["cause"].to_list() == ["network-congestion", "gpu-thermal"]
    assert injected["target"].to_list() == ["link:gpu01<->gpu02", "rank:3"]
    assert injected["start_iteration"].to_list() == [61, 131]
    assert injected["end_iteration"].to_list() == [100, 160]
    assert injected["fail_slow"].to_list() == [True, True]
    truth = result.truth
    slow = truth.filter("slow")["iteration"]
    assert slow.min() == 61 and slow.max() == 160 and slow.len() == 70


def test_noise_is_present_and_not_a_fail_slow(job):
    _, result = job
    noise = result.labels.filter(pl.col("kind") == "noise")
    assert not noise["fail_slow"].any()
    assert {"warmup", "gc-pause", "logging"} <= set(noise["cause"])
    truth = result.truth
    assert truth["duration_s"][0] > 1.5 * truth["duration_s"].median()  # warm-up iteration
    healthy = truth.filter(~pl.col("slow") & pl.col("noise").is_null())["slowdown"]
    assert healthy.max() == pytest.approx(1.0)


def test_same_seed_same_bytes(tmp_path):
    spec = _spec(iterations=60, inject=("cpu@10+20x3",))
    digests = []
    for name in ("a", "b"):
        generate_job(tmp_path / name, spec)
        digests.append({p.relative_to(tmp_path / name).as_posix():
                        hashlib.sha256(p.read_bytes()).hexdigest()
                        for p in sorted((tmp_path / name).rglob("*")) if p.is_file()})
    assert digests[0] == digests[1]


def test_ingest_reads_every_file(dataset, job):
    _, result = job
    labels = dataset.table("labels").collect()
    assert labels.height == result.labels.height
    truth = dataset.table("iterations").filter(pl.col("source") == "truth").collect()
    assert truth.height == 200
    assert dataset.manifest["sources"] and all(
        s["quarantined"] == 0 for s in dataset.manifest["sources"])


def test_megatron_log_reads_back_with_the_job_timing(dataset, job):
    _, result = job
    steps = dataset.table("megatron_steps").collect().sort("iteration")
    assert steps["iteration"].to_list() == list(range(10, 201, 10))
    truth = result.truth
    # elapsed time per iteration is the mean over the log interval (iterations 11..20)
    expected_ms = truth.filter(pl.col("iteration").is_between(11, 20))["duration_s"].mean() * 1e3
    assert steps["elapsed_ms"][1] == pytest.approx(expected_ms, abs=0.05)
    timers = dataset.table("megatron_timers").collect()
    assert {"forward-backward", "all-grads-sync", "optimizer"} <= set(timers["name"])


def test_monitoring_shows_the_culprit(tmp_path):
    out = tmp_path / "job"
    generate_job(out, _spec("tp2-dp4-pp1", iterations=400,
                            inject=("thermal:rank=1@100+200x1.5", "congestion@150+100x2")))
    summary = ingest([out / "monitoring"], tmp_path / "ds")
    assert not summary.failed
    ds = open_dataset(tmp_path / "ds")
    gpu = ds.table("gpu_metrics").filter(pl.col("metric") == "sm_clock_mhz").collect()
    assert gpu.filter(pl.col("gpu") == 1)["value"].min() == 940  # 1410 / 1.5
    assert gpu.filter(pl.col("gpu") != 1)["value"].unique().to_list() == [1410]
    cnp = ds.table("nic_counters").filter(pl.col("counter") == "np_cnp_sent").collect()
    assert cnp["rate_per_s"].max() > 30_000 and cnp["rate_per_s"].min() < 10

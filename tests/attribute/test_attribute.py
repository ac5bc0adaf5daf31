"""Attribution on synthesized jobs of every cause (two layouts each), on a clean job, without
monitoring, and on the real ByteDance what-if trace."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tracekit import attribute
from tracekit.attribute import MONITORING_TABLES, attribute_dataset, attribute_episodes
from tracekit.attribute.evidence import Window
from tracekit.attribute.groups import handle_groups
from tracekit.attribute.job_signals import signals_in_windows
from tracekit.attribute.links import localise
from tracekit.attribute.verdict import (
    CONFIDENCE_INFERRED,
    CONFIDENCE_SIGNAL,
    CONFIDENCE_TIMING,
    CONFIDENCE_TIMING_AND_SIGNAL,
)
from tracekit.core import schema
from tracekit.core.dataset import create_dataset, open_dataset, stale_stages
from tracekit.core.identity import link_hosts
from tracekit.detect import detect_dataset
from tracekit.ingest.pipeline import ingest
from tracekit.iterations import reconstruct_dataset
from tracekit.synth.faults import Injection
from tracekit.synth.job import JobSpec, generate_job
from tracekit.synth.layout import Layout

ITERATIONS = 300

JOBS = {
    # name: (layout, GPUs per host, injection)
    "thermal-a": ("tp2-dp2-pp2", 2, "thermal:rank=3@150+150x2.0"),
    "thermal-b": ("tp2-dp4-pp1", 4, "thermal:rank=5@150+150x2.0"),
    "degradation-a": ("tp2-dp2-pp2", 2, "gpu:rank=6@150+150x2.0"),
    "cpu-a": ("tp2-dp2-pp2", 2, "cpu:host=1@150+150x2.0"),
    "cpu-b": ("tp1-dp4-pp2", 2, "cpu:host=2@150+150x2.0"),
    "congestion-a": ("tp2-dp2-pp2", 2, "congestion:link=0-1@150+150x3.0"),
    "congestion-b": ("tp2-dp2-pp2", 4, "congestion:link=0-1@150+150x3.0"),
    "congestion-ring": ("tp2-dp4-pp1", 2, "congestion:link=0-3@150+150x3.0"),
    "compound-a": ("tp2-dp2-pp2", 2, "thermal:rank=3+congestion:link=0-1@150+150x2.0"),
    "clean": ("tp2-dp2-pp2", 2, None),
}


def _synth(root: Path, name: str) -> tuple[Path, pl.DataFrame]:
    layout, per_host, injection = JOBS[name]
    spec = JobSpec(Layout.parse(layout, gpus_per_host=per_host), ITERATIONS, 5,
                   (Injection.parse(injection),) if injection else (), job=name)
    result = generate_job(root / name, spec)
    dataset = root / f"{name}.ds"
    ingest([root / name / "ranks"], dataset, job=name)
    return dataset, result.labels


def _episodes_from_labels(job: str, labels: pl.DataFrame) -> pl.DataFrame:
    """Episodes over the labeled fail-slow windows (clean jobs: one window mid-run), so the
    test judges attribution, not detection."""
    spans = labels.filter("fail_slow").select("t_start_ns", "t_end_ns", "start_iteration",
                                              "end_iteration")
    if spans.is_empty():
        noise = labels.filter(pl.col("cause") == "logging").sort("t_start_ns")
        middle = noise.slice(noise.height // 2, 10)
        spans = pl.DataFrame({"t_start_ns": [middle["t_start_ns"][0]],
                              "t_end_ns": [middle["t_end_ns"][-1]],
                              "start_iteration": [middle["start_iteration"][0]],
                              "end_iteration": [middle["end_iteration"][-1]]})
    frame = spans.with_columns(
        pl.lit(job).alias("job"), pl.lit("labels").alias("detector"),
        pl.int_range(1, pl.len() + 1, dtype=pl.Int32).alias("episode"),
        pl.lit(0.1).alias("baseline_s"), pl.lit(1.0).alias("lost_s"),
        pl.lit(0.01).alias("jct_slowdown"))
    return schema.conform("episodes", frame)


def _monitoring(dataset: Path, labels: pl.DataFrame, hosts: list[str], per_host: int,
                thermal: bool = True, beyond_ns: int = 0) -> None:
    """DCGM, host CPU and RNIC counters as exporters would show the labeled faults: a
    thermally throttled GPU (hw_thermal, clocks 1410 -> 1100 MHz), a degraded GPU (normal
    clocks), a saturated CPU, CNP surges on the congested link's NICs; 1 s samples, from
    ``beyond_ns`` before the job to ``beyond_ns`` after it."""
    ds = open_dataset(dataset)
    t0, t1 = labels["t_start_ns"].min(), labels["t_end_ns"].max()
    ts = np.arange(t0 - beyond_ns, t1 + beyond_ns, 10**9, dtype=np.int64)
    rows_gpu, rows_host, rows_nic = [], [], []
    faults = labels.filter("fail_slow").row(0, named=True) if labels["fail_slow"].any() else None
    for host in hosts:
        sent = 0  # the counter: what the 1 s rates add up to
        for t in ts:
            inside = faults is not None and faults["t_start_ns"] <= t < faults["t_end_ns"]
            causes = faults["cause"].split("+") if inside else []
            cpu = 97.0 if "cpu-contention" in causes and faults["target_host"] == host else 35.0
            rows_host.append((int(t), host, "node-exporter", "cpu_util_pct", cpu, "%", None))
            link = (faults or {}).get("target_link") or ""
            cnp = 5000.0 if "network-congestion" in causes and host in (link_hosts(link) or ()) \
                else 10.0
            sent += int(cnp)
            rows_nic.append((int(t), host, "mlx5_0", 1, "np_cnp_sent", sent, cnp))
            for gpu in range(per_host):
                hot = (inside and faults["target_host"] == host and faults["target_gpu"] == gpu
                       and "gpu-thermal" in causes and thermal)
                rows_gpu += [
                    (int(t), host, gpu, "sm_clock_mhz", 1100.0 if hot else 1410.0),
                    (int(t), host, gpu, "gpu_temp_c", 88.0 if hot else 64.0),
                    (int(t), host, gpu, "clock_event_hw_thermal", 1.0 if hot else 0.0)]
    gpu = pl.DataFrame(rows_gpu, orient="row", schema=["ts_ns", "host", "gpu", "metric", "value"],
                       schema_overrides={"gpu": pl.Int32})
    host = pl.DataFrame(rows_host, orient="row", schema=list(schema.HOST_METRICS.schema)[:7])
    nic = pl.DataFrame(rows_nic, orient="row", schema=list(schema.NIC_COUNTERS.schema),
                       schema_overrides={"port": pl.Int32})
    ds.write_table("gpu_metrics", schema.conform("gpu_metrics", gpu))
    ds.write_table("host_metrics", schema.conform("host_metrics", host.cast(
        dict(schema.HOST_METRICS.schema))))
    ds.write_table("nic_counters", nic.cast(dict(schema.NIC_COUNTERS.schema)))
    ds.save_manifest()


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory) -> dict[str, tuple[dict, pl.DataFrame]]:
    """Every job attributed with monitoring, plus thermal-a again without any."""
    root = tmp_path_factory.mktemp("attribute")
    out = {}
    for name, (_, per_host, _) in JOBS.items():
        dataset, labels = _synth(root, name)
        hosts = sorted(open_dataset(dataset).table("collectives").select("host").unique()
                       .collect()["host"].to_list())
        _monitoring(dataset, labels, hosts, per_host, thermal=not name.startswith("degradation"))
        with open_dataset(dataset).updating() as written:
            written.write_table("episodes", _episodes_from_labels(name, labels))
        out[name] = (attribute_dataset(dataset).episodes.row(0, named=True), labels)
    dataset, labels = _synth(root / "bare", "thermal-a")
    with open_dataset(dataset).updating() as written:
        written.write_table("episodes", _episodes_from_labels("thermal-a", labels))
    out["bare"] = (attribute_dataset(dataset).episodes.row(0, named=True), labels)
    return out


@pytest.mark.parametrize("name", ["thermal-a", "thermal-b", "degradation-a", "cpu-a", "cpu-b",
                                  "congestion-a", "congestion-b", "congestion-ring"])
def test_each_cause_names_the_labeled_culprit_and_cause(verdicts, name):
    verdict, labels = verdicts[name]
    label = labels.filter("fail_slow").row(0, named=True)
    assert verdict["target"] == label["target"]
    assert verdict["cause"] == label["cause"]
    assert verdict["kind"] == label["kind"]
    # the test's degraded GPU keeps normal clocks: its cause is concluded by elimination;
    # the ring's tied links are told apart by the CNP signal, which localised it
    inferred = label["cause"] == "gpu-degradation"
    assert (verdict["confidence"], verdict["inferred"]) == (
        (CONFIDENCE_INFERRED, True) if inferred else
        (CONFIDENCE_SIGNAL, False) if name == "congestion-ring" else
        (CONFIDENCE_TIMING_AND_SIGNAL, False))


def test_compound_names_both_culprits_and_causes(verdicts):
    verdict, _ = verdicts["compound-a"]
    assert verdict["kind"] == "compound"
    assert verdict["cause"] == "gpu-thermal+network-congestion"
    assert verdict["target"] == "rank:3+link:gpu01<->gpu02"
    assert "hw_thermal set in 100% of samples" in verdict["evidence"]
    assert "gpu01 CNP 10 -> 5,000/s" in verdict["evidence"]


def test_ring_links_told_apart_by_congestion_notifications(verdicts):
    evidence = verdicts["congestion-ring"][0]["evidence"]
    assert ("link:gpu01<->gpu02, link:gpu01<->gpu04, link:gpu02<->gpu03, link:gpu03<->gpu04 "
            "explain the 3 slow groups equally well") in evidence
    assert "only link:gpu01<->gpu04 has congestion notifications at both ends" in evidence


def test_thermal_evidence_gives_the_numbers(verdicts):
    evidence = verdicts["thermal-a"][0]["evidence"]
    assert "rank 3 (gpu02/1)" in evidence
    assert "SM clock 1410 -> 1100 MHz (peers 1410 MHz)" in evidence
    assert "temperature 64 -> 88 C" in evidence


def test_clean_job_names_no_culprit(verdicts):
    verdict, labels = verdicts["clean"]
    assert not labels["fail_slow"].any()
    assert verdict["target"] is None
    assert verdict["kind"] == "unknown"
    assert verdict["cause"] == "unknown"


def test_missing_monitoring_is_insufficient_evidence_with_the_reason(verdicts):
    verdict, _ = verdicts["bare"]
    assert verdict["target"] == "rank:3"
    assert verdict["cause"] == "insufficient-evidence"
    assert "no DCGM samples (gpu_metrics) for GPU gpu02/1" in verdict["evidence"]
    assert verdict["confidence"] == CONFIDENCE_TIMING


@pytest.mark.parametrize(("collectives", "injection", "cause"), [
    ("hook", "thermal:rank=3@150+150x2.0", "gpu-thermal"),
    ("hook", "congestion:link=0-1@150+150x3.0", "network-congestion"),
    ("nccl", "thermal:rank=3@150+150x2.0", "gpu-thermal"),
    ("nccl", "cpu:host=1@150+150x2.0", "cpu-contention"),
])
def test_verdicts_read_only_their_slice_of_monitoring(tmp_path, monkeypatch, collectives,
                                                      injection, cause):
    """Monitoring from 40 job lengths before the job to 40 after it: each episode reads a
    slice of it, and its verdict is the one from the whole tables, for an episode and for a
    tenth of it (timing with call ends, and telemetry alone with issue times only)."""
    spec = JobSpec(Layout.parse("tp2-dp2-pp2", gpus_per_host=2), ITERATIONS, 5,
                   (Injection.parse(injection),), collectives=collectives, job="slice")
    labels = generate_job(tmp_path / "job", spec).labels
    ingest([tmp_path / "job" / "ranks"], tmp_path / "ds", job="slice")
    ds = open_dataset(tmp_path / "ds")
    hosts = sorted(ds.table("collectives").select("host").unique().collect()["host"])
    span = labels["t_end_ns"].max() - labels["t_start_ns"].min()
    _monitoring(tmp_path / "ds", labels, hosts, 2, beyond_ns=40 * span)
    labeled = _episodes_from_labels("slice", labels)
    tenth = labeled.with_columns(
        pl.col("t_start_ns") + (pl.col("t_end_ns") - pl.col("t_start_ns")) * 9 // 10,
        pl.lit(2, dtype=pl.Int32).alias("episode"))
    episodes = pl.concat([labeled, tenth])
    ds = open_dataset(tmp_path / "ds")
    sliced = attribute_episodes(ds, episodes)
    whole = [ds.table(name).collect() for name in MONITORING_TABLES]
    monkeypatch.setattr(attribute, "episode_monitoring", lambda dataset, window: whole)
    assert sliced.equals(attribute_episodes(ds, episodes))
    assert sliced["cause"][0] == cause
    row = labeled.row(0, named=True)
    window = Window(row["t_start_ns"], row["t_end_ns"], row["t_start_ns"], row["t_start_ns"])
    monkeypatch.undo()
    read = attribute.episode_monitoring(ds, window)
    assert all(f.height < w.height // 5 for f, w in zip(read, whole, strict=True))
    assert read[0]["ts_ns"].min() > whole[0]["ts_ns"].min() + 30 * span


def test_no_collectives_is_insufficient_evidence(tmp_path):
    ds = create_dataset(tmp_path / "empty", job="empty")
    episode = schema.conform("episodes", pl.DataFrame({
        "job": ["empty"], "episode": pl.Series([1], dtype=pl.Int32), "detector": ["x"],
        "t_start_ns": [10**18], "t_end_ns": [10**18 + 10**9]}))
    ds.write_table("episodes", episode)
    ds.save_manifest()
    row = attribute_dataset(ds).episodes.row(0, named=True)
    assert row["cause"] == "insufficient-evidence"
    assert "no collective calls with timestamps" in row["evidence"]


def test_a_run_with_no_episode_brings_attribute_up_to_date(tmp_path):
    """A detect run that finds nothing marks the earlier attribution stale; attributing its
    empty episodes records the run, so no report says the attribution is out of date."""
    ds = create_dataset(tmp_path / "quiet", job="quiet")
    for stage in ("iterations", "detect", "attribute", "detect"):
        ds.record_build(stage, {"engine": "local"})
    ds.save_manifest()
    assert list(stale_stages(open_dataset(ds.path))) == ["attribute"]
    assert attribute_dataset(ds.path).episodes.is_empty()
    reopened = open_dataset(ds.path)
    assert (stale_stages(reopened), reopened.manifest["build"]["attribute"]["episodes"]) == ({}, 0)


def test_detected_episode_end_to_end(tmp_path):
    dataset, labels = _synth(tmp_path, "thermal-b")
    reconstruct_dataset(open_dataset(dataset))
    detect_dataset(dataset, ["bocd+v"])
    episodes = attribute_dataset(dataset).episodes
    assert episodes.height >= 1
    assert episodes["target"].to_list()[0] == "rank:5"
    stored = open_dataset(dataset).table("episodes").collect()
    assert stored["target"].to_list() == episodes["target"].to_list()
    assert stored["lost_s"][0] > 0 and 0 < stored["jct_slowdown"][0] < 1


def test_the_local_loop_spills_its_parts_to_a_hidden_folder_it_removes(tmp_path, monkeypatch):
    """Without a cluster the instances and own times go to Arrow IPC parts in a hidden folder
    of the dataset, as a worker's do, not frames kept in memory; the folder is gone after."""
    dataset, _ = _synth(tmp_path, "thermal-b")
    reconstruct_dataset(open_dataset(dataset))
    detect_dataset(dataset, ["bocd+v"])
    seen = []

    def recorded(ds, windows, executor, scratch):
        job = signals_in_windows(ds, windows, executor, scratch)
        seen.append((scratch, job.instance_parts + job.gap_parts))
        return job

    monkeypatch.setattr(attribute, "signals_in_windows", recorded)
    assert attribute_dataset(dataset).episodes["target"].to_list()[0] == "rank:5"
    [(scratch, parts)] = seen
    assert scratch.parent == dataset and scratch.name.startswith(".attribute-")
    assert parts and all(isinstance(p, str) and Path(p).parent == scratch for p in parts)
    assert not scratch.exists()


def test_link_localisation_prefers_a_link_then_a_nic():
    hosts = {0: "a", 1: "b", 2: "c", 3: "d"}
    groups = pl.DataFrame({"members": [[0, 1], [0, 2], [2, 3], [1, 3]],
                           "suspect": [True, False, False, False]})
    assert localise(groups, hosts).target == "link:a<->b"
    nic = groups.with_columns(suspect=pl.Series([True, True, False, False]))
    assert localise(nic, hosts).target == "nic:a"
    nothing = groups.with_columns(suspect=pl.Series([True, False, True, False]))
    verdict = localise(nothing, hosts)
    assert verdict.target is None and verdict.slow_groups == 2


def test_real_whatif_trace_points_at_the_last_stage(real_dir, tmp_path):
    folder = real_dir / "bytedance-whatif"
    ingest([folder / "trace-ST.parquet", folder / "meta-ST.yaml"], tmp_path / "ds")
    verdict = attribute_dataset(tmp_path / "ds").stages
    authors = json.loads((folder / "result-ST.json").read_text())["blocking_decompose_by_stage"]
    slowest = max(authors, key=authors.get)
    assert slowest == "3"
    assert verdict.target == f"stage:{slowest}"
    assert verdict.cause == "pipeline-imbalance"
    assert verdict.ranks == [6, 7]
    ratios = dict(zip(verdict.per_stage["pp_stage"], verdict.per_stage["ratio"], strict=True))
    assert ratios[3] == pytest.approx(1.6245, abs=1e-4)
    assert max(ratios, key=ratios.get) == 3


def test_groups_from_nccl_init_lines(formats_dir, tmp_path):
    ingest([formats_dir / "nccl_debug_coll.log", formats_dir / "nccl_init.log"], tmp_path / "ds")
    ds = open_dataset(tmp_path / "ds")
    groups = handle_groups(ds.table("collectives"), ds.table("comms").collect())
    by_group = dict(groups.filter(pl.col("group_source") == "comms")
                    .group_by("group").agg(pl.col("rank").sort()).iter_rows())
    assert by_group == {"0x0d6b3f8e21ca9a47/2": [0, 8], "0x41d2e9c07ab35f18/8": [0, 1],
                        "0x7c3e5b2f9a1d4e60/16": [0, 1, 8], "0x9e04a1c3b7d26f55/8": [8]}
    assert groups.filter(pl.col("group_source") == "inferred").height == 2


@pytest.mark.parametrize(("injection", "cause", "target"), [
    ("thermal:rank=3@150+150x2.0", "gpu-thermal", "rank:3"),
    ("cpu:host=1@150+150x2.0", "cpu-contention", "host:gpu02"),
    ("degradation:rank=5@150+150x2.0", "gpu-degradation", "rank:5"),
])
def test_nccl_debug_logs_and_synthesized_monitoring(tmp_path, injection, cause, target):
    """NCCL COLL lines carry issue times only: the synthesizer's own DCGM and node_exporter
    exports name the GPU whose thermal reasons and the host whose CPU moved with the slowdown."""
    spec = JobSpec(Layout.parse("tp2-dp2-pp2", gpus_per_host=2), ITERATIONS, 5,
                   (Injection.parse(injection),), collectives="nccl", job="nccl")
    result = generate_job(tmp_path / "job", spec)
    ingest([tmp_path / "job" / "ranks", tmp_path / "job" / "monitoring"], tmp_path / "ds")
    with open_dataset(tmp_path / "ds").updating() as written:
        written.write_table("episodes", _episodes_from_labels("nccl", result.labels))
    verdict = attribute_dataset(tmp_path / "ds").episodes.row(0, named=True)
    assert (verdict["cause"], verdict["target"]) == (cause, target)
    if cause == "gpu-degradation":  # no telemetry moved: the wait it imposed names it
        assert "made its peers wait" in verdict["evidence"]
    else:
        assert "issue times only" in verdict["evidence"]
    if cause == "gpu-thermal":
        assert "arrived last in 95% of its collectives vs 62% before" in verdict["evidence"]
        assert "hw_thermal/sw_thermal set in 2 of 2 readings" in verdict["evidence"]


def test_cpu_contention_from_the_synthesizers_node_exporter(tmp_path):
    """15 s scrapes leave no sample before a short episode: the peers decide."""
    spec = JobSpec(Layout.parse("tp2-dp2-pp2", gpus_per_host=2), ITERATIONS, 5,
                   (Injection.parse("cpu:host=1@150+150x2.0"),), job="cpu")
    result = generate_job(tmp_path / "job", spec)
    ingest([tmp_path / "job" / "ranks", tmp_path / "job" / "monitoring"], tmp_path / "ds")
    with open_dataset(tmp_path / "ds").updating() as written:
        written.write_table("episodes", _episodes_from_labels("cpu", result.labels))
    verdict = attribute_dataset(tmp_path / "ds").episodes.row(0, named=True)
    assert (verdict["cause"], verdict["target"]) == ("cpu-contention", "host:gpu02")
    assert "host gpu02: CPU (no sample before) 77 % (peers 3 %)" in verdict["evidence"]


@pytest.mark.parametrize(("collectives", "injection", "cause", "target"), [
    ("hook", "thermal:rank=3@21+120x2.0", "gpu-thermal", "rank:3"),
    ("nccl", "cpu:host=1@22+120x2.0", "cpu-contention", "host:gpu02"),
])
def test_a_fail_slow_right_after_the_warm_up_is_judged_against_the_time_after_it(
        tmp_path, collectives, injection, cause, target):
    """One or two iterations of healthy time lie between the warm-up and the episode: too few
    collectives and no scrape to compare with, so the verdict was "too few matched
    collectives" (call ends) or nothing moved (issue times); the healthy time after it is the
    baseline."""
    spec = JobSpec(Layout.parse("tp2-dp2-pp2", gpus_per_host=2), ITERATIONS, 5,
                   (Injection.parse(injection),), collectives=collectives, job="early")
    result = generate_job(tmp_path / "job", spec)
    ingest([tmp_path / "job" / "ranks", tmp_path / "job" / "monitoring"], tmp_path / "ds")
    reconstruct_dataset(open_dataset(tmp_path / "ds"))  # where the warm-up ends
    with open_dataset(tmp_path / "ds").updating() as written:
        written.write_table("episodes", _episodes_from_labels("early", result.labels))
    verdict = attribute_dataset(tmp_path / "ds").episodes.row(0, named=True)
    assert (verdict["cause"], verdict["target"]) == (cause, target), verdict["evidence"]
    assert "s after the episode: too little healthy time past the warm-up" in verdict["evidence"]

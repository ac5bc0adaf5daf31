"""Attribution of jobs whose NCCL logs have no call times (NCCL before 2.26): the culprit
from monitoring alone, over the episode's window on the training log's clock."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tests.attribute.test_attribute import JOBS, _episodes_from_labels, _monitoring
from tracekit import attribute
from tracekit.attribute import attribute_dataset
from tracekit.attribute.verdict import CONFIDENCE_SIGNAL, INSUFFICIENT
from tracekit.core import schema
from tracekit.core.dataset import create_dataset, open_dataset
from tracekit.ingest.pipeline import ingest
from tracekit.synth.faults import Injection
from tracekit.synth.job import JobSpec, generate_job
from tracekit.synth.layout import Layout

S = 10**9


def _untimed(root: Path, name: str, monitoring: bool = True) -> tuple[dict, pl.DataFrame]:
    """``JOBS[name]`` with NCCL logs without timestamps and the training log, attributed over
    its labels, with the test monitoring or none."""
    layout, per_host, injection = JOBS[name]
    spec = JobSpec(Layout.parse(layout, gpus_per_host=per_host), 300, 5,
                   (Injection.parse(injection),), collectives="nccl", monitoring=False,
                   nccl_timestamps=False, job=name)
    labels = generate_job(root / name, spec).labels
    dataset = root / f"{name}.ds"
    ingest([root / name / "ranks", root / name / "megatron"], dataset, job=name)
    ds = open_dataset(dataset)
    assert ds.table("collectives").filter(pl.col("t_start_ns").is_not_null()).collect().is_empty()
    if monitoring:
        hosts = sorted(ds.table("comms").select("host").unique().collect()["host"].to_list())
        _monitoring(dataset, labels, hosts, per_host)
    with open_dataset(dataset).updating() as written:
        written.write_table("episodes", _episodes_from_labels(name, labels))
    return attribute_dataset(dataset).episodes.row(0, named=True), labels


@pytest.mark.parametrize("name", ["thermal-b", "cpu-a", "congestion-ring"])
def test_monitoring_alone_names_the_labeled_culprit(tmp_path, name):
    verdict, labels = _untimed(tmp_path, name)
    label = labels.filter("fail_slow").row(0, named=True)
    assert (verdict["kind"], verdict["target"], verdict["cause"], verdict["confidence"]) == (
        label["kind"], label["target"], label["cause"], CONFIDENCE_SIGNAL)
    assert verdict["evidence"].endswith("(no timed collective calls: from monitoring alone)")


def test_without_monitoring_it_stays_insufficient_with_the_reason(tmp_path):
    verdict, _ = _untimed(tmp_path, "thermal-b", monitoring=False)
    assert (verdict["kind"], verdict["cause"], verdict["target"]) == (
        "unknown", INSUFFICIENT, None)
    assert verdict["evidence"].startswith("no collective calls with timestamps")
    assert "the dump has no DCGM samples (gpu_metrics), no host CPU samples" in verdict["evidence"]


def test_the_warm_up_is_counted_in_iterations_on_a_log_of_every_tenth(tmp_path):
    """Iterations 10, 20, ... 300 at 1 s each: the baseline may start at iteration 30 (the
    first 20 iterations after the first logged), not at the 21st logged line (iteration 210)."""
    ds = create_dataset(tmp_path / "sampled", job="sampled")
    numbers = list(range(10, 310, 10))
    ds.write_table("iterations", schema.conform("iterations", pl.DataFrame({
        "job": "sampled", "iteration": numbers, "t_start_ns": [n * S for n in numbers],
        "t_end_ns": [(n + 1) * S for n in numbers], "duration_s": 1.0})))
    ds.save_manifest()
    assert attribute._trace_span(ds, (0, 400 * S), attribute._warmup_end(ds)) == (30 * S,
                                                                            400 * S + 1)


def test_a_sampled_logs_baseline_ends_a_logged_point_before_the_episodes_first(
        tmp_path):
    """Iterations 10, 20, ... 300, each logged with its last iteration's 1 s: the point at 150
    averages iterations 141-150, a slowdown from 148 under the threshold, so an episode dated
    at 160 may have begun right after 140's end, and its baseline stops there; on a dense log
    nothing is set apart."""
    def job(numbers: list[int]) -> list[int | None]:
        ds = create_dataset(tmp_path / f"every{numbers[1] - numbers[0]}", job="j")
        ds.write_table("iterations", schema.conform("iterations", pl.DataFrame({
            "job": "j", "iteration": numbers, "t_start_ns": [n * S for n in numbers],
            "t_end_ns": [(n + 1) * S for n in numbers], "duration_s": 1.0,
            "source": "framework"})))
        ds.save_manifest()
        episodes = pl.DataFrame({"start_iteration": [160, None], "t_start_ns": [160 * S, 5 * S]})
        return attribute._logged_since(ds, episodes)

    assert job(list(range(10, 310, 10))) == [141 * S, None]
    assert job(list(range(1, 301))) == [None, None]

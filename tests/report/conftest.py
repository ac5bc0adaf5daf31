"""A small hand-built dataset with every table a job report reads: 4 ranks, 120 iterations of
1.0 s, rank 2's GPU throttled (iterations 60-89 take 1.5 s), one detected and attributed
episode, SM clock and temperature of the 4 GPUs, CNP counters, and the ground-truth label."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from tracekit.core import schema
from tracekit.core.dataset import create_dataset

T0 = 1_700_000_000 * 10**9
S = 10**9


def _frame(name: str, data: dict) -> pl.DataFrame:
    spec = schema.table(name).schema
    return schema.conform(name, pl.DataFrame(data, schema={k: spec[k] for k in data}))


def build_job(path, job="j1", category="compute", fail_slow=True):
    slow = 1.5 if fail_slow else 1.0
    durations = np.where((np.arange(120) >= 60) & (np.arange(120) < 90), slow, 1.0)
    starts = T0 + (np.concatenate([[0], np.cumsum(durations)[:-1]]) * S).astype(np.int64)
    ends = starts + (durations * S).astype(np.int64)
    iterations = pl.concat([_frame("iterations", {
        "job": ["j1"] * 120, "rank": [rank] * 120, "iteration": list(range(120)),
        "t_start_ns": starts, "t_end_ns": ends, "duration_s": durations,
        "source": ["acf"] * 120, "quality": ["ok"] * 120}) for rank in range(4)])
    onset, recovery = int(starts[60]), int(starts[90])
    events = _frame("events", {
        "job": ["j1", "j1"], "rank": [None, None], "detector": ["bocd+b", "bocd+b"],
        "iteration": [62, 90], "ts_ns": [int(starts[62]), recovery], "before_s": [1.0, 1.5],
        "after_s": [1.5, 1.0], "ratio": [1.5, 0.667]})
    episodes = _frame("episodes", {
        "job": ["j1"], "episode": [0], "detector": ["bocd+b"], "t_start_ns": [int(starts[62])],
        "t_end_ns": [recovery], "start_iteration": [62], "end_iteration": [89],
        "iterations": [28], "duration_s": [42.0], "baseline_s": [1.0], "slowdown": [1.5],
        "lost_s": [14.0], "jct_slowdown": [0.1167], "ranks": ["0,1,2,3"], "kind": ["compute"],
        "cause": ["gpu-thermal"], "target": ["rank:2"], "confidence": [0.9],
        "evidence": ["SM clock of gpu h0/2 1410 -> 990 MHz"]})
    ts = T0 + np.arange(0, 140, 5) * S
    gpu = pl.concat([_frame("gpu_metrics", {
        "ts_ns": ts, "host": ["h0"] * len(ts), "gpu": [g] * len(ts),
        "metric": [metric] * len(ts),
        "value": np.where((g == 2) & (ts >= onset) & (ts < recovery), hot, cold).astype(float),
        "source": ["dcgm-exporter"] * len(ts)})
        for g in range(4) for metric, cold, hot in (("sm_clock_mhz", 1410, 990),
                                                    ("gpu_temp_c", 60, 88))])
    nic = _frame("nic_counters", {
        "ts_ns": ts, "host": ["h0"] * len(ts), "device": ["mlx5_0"] * len(ts),
        "port": [1] * len(ts), "counter": ["rp_cnp_handled"] * len(ts),
        "value": np.arange(len(ts), dtype=np.int64) * 10, "rate_per_s": [2.0] * len(ts)})
    labels = _frame("labels", {
        "job": ["j1"], "episode": [0], "fail_slow": [True], "kind": ["compute"],
        "cause": ["gpu-thermal"], "target": ["gpu:h0/2"], "target_rank": [2],
        "target_host": ["h0"], "target_gpu": [2], "t_start_ns": [onset], "t_end_ns": [recovery],
        "start_iteration": [60], "end_iteration": [89], "severity": [1.5]})
    dataset = create_dataset(path, job=job)
    dataset.manifest["category"] = category
    tables = {"iterations": iterations, "gpu_metrics": gpu, "nic_counters": nic}
    if fail_slow:
        tables.update(events=events, episodes=episodes, labels=labels)
    for name, frame in tables.items():
        dataset.write_table(name, frame.with_columns(pl.lit(job).alias("job"))
                            if "job" in frame.columns else frame)
    dataset.save_manifest()
    return dataset


@pytest.fixture(scope="session")
def job_dataset(tmp_path_factory):
    return build_job(tmp_path_factory.mktemp("datasets") / "j1")


@pytest.fixture(scope="session")
def corpus_datasets(tmp_path_factory):
    """Three jobs: c1 (compute, throttled GPU), c2 (compute, healthy), n1 (communication,
    healthy)."""
    root = tmp_path_factory.mktemp("corpus")
    return [build_job(root / "c1", "c1", "compute").path,
            build_job(root / "c2", "c2", "compute", fail_slow=False).path,
            build_job(root / "n1", "n1", "communication", fail_slow=False).path]

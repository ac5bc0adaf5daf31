"""Host exports of a synthetic job (node_exporter CPU scrapes, ipmitool sensor snapshots) agree
with the injected faults and read back through tracekit's own readers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tracekit.core.dataset import open_dataset
from tracekit.ingest.pipeline import ingest
from tracekit.synth.faults import Injection
from tracekit.synth.job import JobSpec, generate_job
from tracekit.synth.layout import Layout, Model
from tracekit.synth.writers.host import _sensor_line, go_float_centi

MODEL = Model("probe", layers=4, hidden=4096, seq_len=2048, micro_batch_size=8, fp16=True)
"""Compute-bound enough that 300 iterations last ~7 minutes (28 scrapes, 7 IPMI snapshots)."""


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> tuple[Path, object, object]:
    root = tmp_path_factory.mktemp("host")
    spec = JobSpec(Layout.parse("tp2-dp4-pp1", gpus_per_host=4, model=MODEL), 300, seed=11,
                   injections=(Injection.parse("cpu:host=1@40+110x2"),
                               Injection.parse("thermal:rank=1@170+110x1.5")),
                   collectives="none")
    result = generate_job(root / "job", spec)
    summary = ingest([root / "job" / "monitoring"], root / "ds")
    assert not summary.failed
    return root / "job", result, open_dataset(root / "ds")


def _during(metrics: pl.DataFrame, labels: pl.DataFrame, cause: str, metric: str) -> dict:
    row = labels.filter(pl.col("cause") == cause).row(0, named=True)
    inside = metrics.filter(pl.col("metric") == metric,
                            pl.col("ts_ns").is_between(row["t_start_ns"], row["t_end_ns"]))
    return dict(inside.group_by("host").agg(pl.col("value").median()).iter_rows())


def test_cpu_contention_shows_on_the_culprit_host_only(job):
    _, result, ds = job
    host = ds.table("host_metrics").collect()
    busy = _during(host, result.labels, "cpu-contention", "cpu_util_pct")
    assert busy["gpu02"] > 60 and busy["gpu01"] < 10
    calm = _during(host, result.labels, "gpu-thermal", "cpu_util_pct")
    assert calm["gpu02"] < 10  # back to its own level after the episode
    load = _during(host, result.labels, "cpu-contention", "load1")
    assert load["gpu02"] > 10 * load["gpu01"]


def test_thermal_episode_heats_inlet_and_gpu(job):
    _, result, ds = job
    host = ds.table("host_metrics").filter(pl.col("source") == "ipmitool").collect()
    inlet = _during(host, result.labels, "gpu-thermal", "inlet_temp_c")
    assert inlet["gpu01"] >= 29 and inlet["gpu02"] <= 25
    # rank 1 is GPU index 1 of gpu01, which the BMC calls GPU2
    gpu = _during(host, result.labels, "gpu-thermal", "gpu2_temp_c")
    assert gpu["gpu01"] >= 84 and gpu["gpu02"] < 60
    dcgm = ds.table("gpu_metrics").filter(pl.col("metric") == "gpu_temp_c", pl.col("gpu") == 1,
                                          pl.col("host") == "gpu01").collect()
    both = host.filter(pl.col("metric") == "gpu2_temp_c", pl.col("host") == "gpu01").join(
        dcgm, on="ts_ns")
    assert both.height >= 5 and (both["value"] == both["value_right"]).all()


def test_node_exporter_counters_add_up(job):
    folder, _, _ = job
    text = (folder / "monitoring" / "gpu01" / "node_exporter.prom").read_text().splitlines()
    samples = [line for line in text if line.startswith("node_cpu_seconds_total")]
    assert len(samples) % (256 * 8) == 0
    first = samples[:256 * 8]
    assert first[0].startswith('node_cpu_seconds_total{cpu="0",mode="idle"} ')
    assert first[8].startswith('node_cpu_seconds_total{cpu="1",mode="idle"} ')
    assert first[16].startswith('node_cpu_seconds_total{cpu="10",mode="idle"} ')
    values = np.array([float(s.split()[1]) for s in samples]).reshape(-1, 256, 8)
    stamps = np.array([int(s.split()[2]) for s in samples[::256 * 8]])
    # every CPU accounts for the wall time between scrapes in 10 ms ticks
    elapsed = np.diff(values.sum(axis=2), axis=0)
    expected = np.diff(stamps)[:, None] / 1e3
    assert np.abs(elapsed - expected).max() <= 0.05
    assert text[0].startswith("# ts=") and text[0].endswith(" host=gpu01")
    assert "node_load1 " in "\n".join(text) and "# TYPE node_load1 gauge" in text


def test_ipmitool_lines_are_printed_like_ipmitool(formats_dir):
    sample = (formats_dir / "ipmitool_sensor.txt").read_text().splitlines()
    assert _sensor_line("Inlet Temp", "degrees C", 24.0,
                        (None, -7.0, 3.0, 42.0, 47.0, None)) == sample[1]
    assert _sensor_line("GPU3 Temp", "degrees C", 88.0,
                        (None, None, None, 85.0, 92.0, None)) == sample[4]
    assert _sensor_line("PS1 Status", "discrete", ("0x1", "0x0100"), (None,) * 6) == sample[12]


@pytest.mark.parametrize(("centi", "text"), [
    (0, "0"), (1250, "12.5"), (24514807, "245148.07"), (123456789, "1.23456789e+06"),
    (100000000, "1e+06"), (123456700, "1.234567e+06"), (99999999, "999999.99"),
])
def test_values_print_as_go_does(centi, text):
    assert pl.select(go_float_centi(pl.lit(centi, pl.Int64))).item() == text

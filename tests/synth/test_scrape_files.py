"""Monitoring written as collectors leave it: one file per scrape, named by exporter, host and
time, read back with every row on its host and time."""

from __future__ import annotations

import polars as pl

from tracekit.core.dataset import open_dataset
from tracekit.ingest.pipeline import ingest
from tracekit.synth.job import generate_job
from tracekit.synth.layout import Layout
from tracekit.synth.run import JobSpec


def test_one_file_per_scrape_named_by_exporter_host_and_time(tmp_path):
    spec = JobSpec(Layout.parse("tp2-dp2-pp1", gpus_per_host=2), 120, 3, collectives="none",
                   monitoring_files="scrapes", job="scrapes")
    generate_job(tmp_path / "job", spec)
    folder = tmp_path / "job" / "monitoring" / "gpu01"
    names = sorted(p.name for p in folder.iterdir())
    scrapes = {kind: [n for n in names if n.startswith(f"{kind}.gpu01.")]
               for kind in ("dcgm", "node", "hwc")}
    assert len(scrapes["dcgm"]) == len(scrapes["node"]) == len(scrapes["hwc"]) > 1
    assert set(names) == {*sum(scrapes.values(), []), "ipmitool_sensor.txt"}
    node = (folder / scrapes["node"][0]).read_text()
    assert "# ts=" not in node and "host=" not in node  # the host is only in the file name
    assert all(len(line.split()) == 2 for line in node.splitlines() if not line.startswith("#"))

    ingest([tmp_path / "job" / "monitoring"], tmp_path / "ds")
    dataset = open_dataset(tmp_path / "ds")
    written = [p for p in (tmp_path / "job" / "monitoring").rglob("*") if p.is_file()]
    assert len(dataset.manifest["sources"]) == len(written)  # identical scrapes kept apart
    for table in ("gpu_metrics", "host_metrics", "nic_counters"):
        frame = dataset[table].collect()
        assert frame["host"].null_count() == 0 and set(frame["host"]) == {"gpu01", "gpu02"}
    times = dataset["host_metrics"].collect().filter(pl.col("host") == "gpu01")["ts_ns"]
    assert times.n_unique() == len(scrapes["node"])
    busy = dataset["host_metrics"].collect().filter(pl.col("metric") == "cpu_busy_seconds_total")
    assert busy.height == 2 * len(scrapes["node"])

"""Time and host of monitoring files from their names: the conventions dumps use."""

from __future__ import annotations

import pytest

from tracekit.core.dataset import open_dataset
from tracekit.ingest.base import Source
from tracekit.ingest.pipeline import ingest
from tracekit.ingest.snapshots import (
    file_host,
    file_name_ts_ns,
    folder_host_readings,
    name_host_readings,
)

TS = 1782736574


@pytest.mark.parametrize(("name", "host"), [
    (f"dump.tar.xz!job-4822163/dcgm.gpu-i34.{TS}.prom", "gpu-i34"),
    (f"hwc.gpu-p55.{TS}.txt", "gpu-p55"),
    (f"node_gpu-a17_{TS}.prom", "gpu-a17"),
    (f"dcgm-gpu-a17-{TS}.prom", "gpu-a17"),
    (f"dcgm_exporter_gpu-a17_{TS}.prom", "gpu-a17"),
    (f"node.gpu-a17.dc1.corp.{TS}.prom", "gpu-a17.dc1.corp"),
    (f"gpu-a17_dcgm_{TS}.prom", "gpu-a17"),
    (f"gpu-a17-{TS}.prom", "gpu-a17"),
    (f"ipmi_{TS}.txt", None),
    ("dcgm-2025-10-14T09:20:00Z.prom", None),
    ("node.gpu-a17.prom", None),
    (f"hw_counters-{TS}.txt", None),  # the sysfs folder's own name
    (f"mlx5_0-{TS}.txt", None),
    (f"sys_class_infiniband_mlx5_0_ports_1_hw_counters.{TS}.txt", None),
    (f"node-exporter-{TS}.prom", None),
    (f"eth0_{TS}.txt", None),
    (f"gpu-a17_mlx5_0_{TS}.txt", "gpu-a17"),
    (f"node.node-1.{TS}.prom", "node-1"),  # "1" alone is a number, not a host
    (f"node.10.20.3.17.{TS}.prom", "10.20.3.17"),  # an identity map may name it
])
def test_host_and_time_from_the_file_name(name, host):
    source = Source(name, 0, lambda: None)
    assert file_host(source) == (host, None)
    if str(TS) in name:
        assert file_name_ts_ns(source) == TS * 10**9


def test_a_collector_only_name_takes_its_folder_with_a_note():
    found, note = file_host(Source(f"dump/gpu-a17/node-{TS}.prom", 0, lambda: None))
    assert found == "gpu-a17"
    assert "taken from the folder name" in note and "--option host=" in note


def test_a_host_taken_from_the_folder_is_noted_in_the_manifest(tmp_path):
    folder = tmp_path / "dump" / "gpu-a17"
    folder.mkdir(parents=True)
    (folder / f"node-{TS}.prom").write_text("node_load1 2.5\n")
    ingest([tmp_path / "dump"], tmp_path / "ds")
    dataset = open_dataset(tmp_path / "ds")
    assert dataset["host_metrics"].collect()["host"].to_list() == ["gpu-a17"]
    [source] = dataset.manifest["sources"]
    assert any("host 'gpu-a17' taken from the folder name" in n for n in source["notes"])


def test_identical_scrapes_under_two_names_are_two_samples(tmp_path):
    """dcgm-exporter's 30 s collect interval serves the same bytes to two 15 s scrapes: both
    are samples (their times differ), not one file seen twice; re-ingesting adds nothing."""
    scrape = ('DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-1",Hostname="gpu-i34"} 1410\n'
              'node_load1 2.5\n')
    dump = tmp_path / "dump"
    dump.mkdir()
    for ts in (TS, TS + 15):
        (dump / f"dcgm.gpu-i34.{ts}.prom").write_text(scrape)
    for _ in range(2):
        ingest([dump], tmp_path / "ds")
        dataset = open_dataset(tmp_path / "ds")
        gpu = dataset["gpu_metrics"].collect()
        assert sorted(gpu["ts_ns"].to_list()) == [TS * 10**9, (TS + 15) * 10**9]
        host = dataset["host_metrics"].collect()
        assert host["host"].to_list() == ["gpu-i34", "gpu-i34"]
        assert len(dataset.manifest["sources"]) == 2


@pytest.mark.parametrize(("name", "readings"), [
    (f"foo.gpu-a17.{TS}.prom", ["gpu-a17", "foo.gpu-a17"]),
    (f"dcgm.node-exporter.gpu01.{TS}.prom", ["gpu01", "exporter.gpu01", "node-exporter.gpu01"]),
    (f"roce_mon-{TS}.txt", ["mon", "roce_mon"]),
    (f"hw_counters-{TS}.txt", []),
    ("hw_counters.txt", []),
    (f"sys-gpu-01_{TS}.txt", ["gpu-01", "sys-gpu-01"]),  # a host led by a collector word
    (f"data-node-3_{TS}.txt", ["node-3", "data-node-3"]),
    (f"log-07-{TS}.txt", ["log-07"]),
    (f"a100-rack3-n07-hwc-{TS}.txt", ["a100-rack3-n07-hwc", "a100-rack3-n07"]),
    (f"10.20.0.7-hwc-{TS}.txt", ["10.20.0.7"]),
    (f"node-exporter-{TS}.prom", []),
    (f"hw-counters-{TS}.txt", []),
])
def test_every_reading_of_a_name_likeliest_first(name, readings):
    assert name_host_readings(name) == readings


def test_folders_that_may_name_a_host_nearest_first():
    path = "dump.tar.xz!job-4822163/2025-10-14/gpu-a17/mlx5_0/hw_counters/x.txt"
    assert folder_host_readings(path) == ["gpu-a17", "job-4822163"]
    assert folder_host_readings("monitoring/hw_counters/node_exporter/x.prom") == []
    found, note = file_host(Source(f"dump/gpu-a17/hw_counters-{TS}.txt", 0, lambda: None))
    assert (found, "taken from the folder name" in note) == ("gpu-a17", True)

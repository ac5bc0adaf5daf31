"""Dump layouts: the same job's monitoring laid out as sites lay it out, read back with every
row on its host, and the congested link found whatever the files are called."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tracekit.core.dataset import open_dataset
from tracekit.core.errors import TracekitError
from tracekit.ingest.pipeline import ingest
from tracekit.pipeline.analyze import analyze
from tracekit.synth.faults import Injection
from tracekit.synth.job import JobSpec, generate_job
from tracekit.synth.layout import Layout
from tracekit.synth.writers.dump_layout import DUMP_LAYOUTS

FIRST_FILES = {
    "per-host": "gpu01/dcgm_exporter.prom",
    "flat": "dcgm.gpu01.1760432400.prom",
    "per-exporter": "dcgm_exporter/gpu01_1760432400.prom",
    "per-day": "2025-10-14/gpu01/dcgm-1760432400.prom",
    "sysfs-names": "gpu01/dcgm-exporter-1760432400.prom",
    "site-names": "gpu01/cpumon-1760432400.prom",
    "prometheus-job": "ipmitool/gpu01.txt",
    "federate": "federate/dcgm-1760432400.prom",
}
"""The first monitoring file of each layout, in sorted order."""


def _spec(dump_layout: str, iterations: int = 40, inject: tuple[str, ...] = (),
          prefix: str = "gpu") -> JobSpec:
    return JobSpec(Layout.parse("tp2-dp2-pp1", gpus_per_host=2), iterations, seed=3,
                   injections=tuple(Injection.parse(i) for i in inject), job="layout",
                   dump_layout=dump_layout, host_prefix=prefix)


@pytest.mark.parametrize("layout", DUMP_LAYOUTS)
def test_every_layout_reads_back_on_the_job_hosts(tmp_path, layout):
    generate_job(tmp_path / "job", _spec(layout))
    files = sorted(p.relative_to(tmp_path / "job" / "monitoring").as_posix()
                   for p in (tmp_path / "job" / "monitoring").rglob("*") if p.is_file())
    assert files[0] == FIRST_FILES[layout]
    assert not ingest([tmp_path / "job"], tmp_path / "ds").failed
    dataset = open_dataset(tmp_path / "ds")
    for table in ("gpu_metrics", "nic_counters", "host_metrics"):
        hosts = dataset[table].select(pl.col("host").unique()).collect()["host"]
        assert sorted(hosts.to_list(), key=str) == ["gpu01", "gpu02"], table


def test_an_unknown_layout_is_refused():
    with pytest.raises(TracekitError, match="dump layout 'nested' is not one of per-host"):
        _spec("nested").check()


@pytest.mark.parametrize(("layout", "prefix"), [("site-names", "gpu"), ("flat", "node-")])
def test_the_congested_link_is_found_whatever_the_files_are_called(tmp_path, layout, prefix):
    """Site collector names (``roce_mon-<unix>.txt`` read as host ``mon``) and hosts named
    like a collector (``hwc.node-01.<unix>.txt`` read as ``01``) left the link without
    congestion notifications: the verdict was insufficient evidence."""
    generate_job(tmp_path / "job", _spec(layout, 200, ("congestion:link=0-1@60+100x2",), prefix))
    analyze([tmp_path / "job"], tmp_path / "ds", write_job_report=False)
    verdicts = open_dataset(tmp_path / "ds")["episodes"].filter(
        pl.col("target").is_not_null()).collect()
    names = {f"{prefix}01", f"{prefix}02"}
    assert f"link:{min(names)}<->{max(names)}" in verdicts["target"].to_list()
    assert set(verdicts.filter(pl.col("target").str.starts_with("link:"))["cause"]) == {
        "network-congestion"}


def test_scrape_files_of_a_layout_keep_no_marker(tmp_path):
    generate_job(tmp_path / "job", _spec("sysfs-names"))
    text = (tmp_path / "job" / "monitoring" / "gpu02" / "hw_counters-1760432400.txt").read_text()
    assert not text.startswith("#") and "mlx5_0/ports/1/hw_counters/np_cnp_sent:" in text
    assert Path(tmp_path / "job" / "monitoring" / "gpu02" / "ipmitool_sensor.txt").is_file()

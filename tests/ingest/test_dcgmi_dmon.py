"""dcgmi dmon text with and without collector timestamps."""

from __future__ import annotations

import polars as pl
import pytest

from tracekit.core import schema
from tracekit.core.errors import InputError
from tracekit.ingest import registry
from tracekit.ingest.base import Source
from tracekit.ingest.dcgmi_dmon import DcgmiDmonReader

T0 = 1_760_433_600 * 10**9


def test_sample_with_start_and_interval(formats_dir):
    source = Source.from_bytes("dmon.txt", (formats_dir / "dcgmi_dmon.txt").read_bytes())
    assert registry.sniff(source).format == "dcgmi-dmon"
    with pytest.raises(InputError, match="--option start=.*--option interval="):
        list(DcgmiDmonReader().read(source, {}))
    [chunk] = list(DcgmiDmonReader().read(
        source, {"start": "1760433600", "interval": "1000", "host": "gpu-a17"}))
    gpu = chunk.tables["gpu_metrics"]
    schema.validate("gpu_metrics", gpu)
    assert gpu.height == 17 * 4 * 8 - 4  # four N/A cells of GPU 3's first sample
    assert chunk.skipped == 5 and chunk.quarantine.height == 0
    first = gpu.filter((pl.col("gpu") == 2) & (pl.col("ts_ns") == T0))
    assert dict(first.select("metric", "value").iter_rows()) == {
        "sm_clock_mhz": 1410.0, "gpu_temp_c": 83.0, "power_w": 396.006, "gpu_util_pct": 100.0,
        "sm_active_ratio": 0.629, "tensor_active_ratio": 0.294, "dram_active_ratio": 0.194,
        "nvlink_tx_bytes_per_s": 64945125034.0}
    last = gpu.filter(pl.col("gpu") == 0)["ts_ns"].max()
    assert last == T0 + 16 * 10**9
    assert gpu.filter((pl.col("gpu") == 0) & (pl.col("ts_ns") == last)
                      & (pl.col("metric") == "power_w"))["value"].item() == 606.554


def test_timestamp_prefix_mig_entities_and_bad_rows():
    text = (b"#Entity   SMCLK        TMPTR\n"
            b"ID                      C\n"
            b"2025-10-14T09:20:00Z GPU 0     1980         47\n"
            b"2025-10-14T09:20:00Z GPU-I 3   1755         N/A\n"
            b"2025-10-14T09:20:00Z GPU-CI 1  1755         51\n"
            b"1760433601.5 GPU 0     1980\n"
            b"1760433601.5 GPU 0     12345...     48\n"
            b"\n\ndmon was stopped do to receiving a signal\n")
    [chunk] = list(DcgmiDmonReader().read(Source.from_bytes("d.txt", text), {"host": "b03"}))
    gpu = chunk.tables["gpu_metrics"].sort("ts_ns", "gpu_instance", "metric")
    assert gpu.select("ts_ns", "gpu", "gpu_instance", "metric", "value").rows() == [
        (T0, 0, None, "gpu_temp_c", 47.0), (T0, 0, None, "sm_clock_mhz", 1980.0),
        (T0, None, "ci1", "gpu_temp_c", 51.0), (T0, None, "ci1", "sm_clock_mhz", 1755.0),
        (T0, None, "gi3", "sm_clock_mhz", 1755.0),
        (T0 + 1_500_000_000, 0, None, "gpu_temp_c", 48.0)]
    assert chunk.quarantine["reason"].to_list() == ["expected 2 values, found 1"]
    assert chunk.notes == ["1 values cut short by dmon ('...') were left out"]

"""AcmeTrace wide CSVs."""

from __future__ import annotations

import polars as pl
import pytest

from tracekit.core.errors import InputError
from tracekit.ingest import registry
from tracekit.ingest.acmetrace import AcmeTraceReader
from tracekit.ingest.base import Source


def test_ib_send_sample(formats_dir):
    path = formats_dir / "acmetrace_NODE_IB_SEND_raw.csv"
    source = Source.from_bytes(str(path), path.read_bytes())
    assert registry.sniff(source).format == "acmetrace"
    [chunk] = list(AcmeTraceReader().read(source, {}))
    nic = chunk.tables["nic_counters"]
    assert nic.height == 8  # 3 + 3 + 2 (an empty cell), the repeated row collapsed
    first = nic.filter(pl.col("host") == "10.140.1.10").sort("ts_ns")
    assert first["rate_per_s"].to_list() == [1203311204.5, 1204001987.2, 1203877012.9]
    assert set(nic["device"]) == {"mlx5_0"} and set(nic["counter"]) == {"ib_send_bytes"}
    assert chunk.notes == ["1 repeated timestamps collapsed"]


def test_gpu_and_cpu_metrics_and_host_mapping(tmp_path):
    mapping = tmp_path / "hosts.csv"
    mapping.write_text("kind,alias,canonical\nhost,10.0.0.1,gpu-a17\n")
    gpu = Source.from_bytes("GPU_TEMP-2023-07-01.csv",
                            b"Time,10.0.0.1-GPU0,10.0.0.1-GPU1\n1688169600,55,60\n")
    [chunk] = list(AcmeTraceReader().read(gpu, {"identity_map": str(mapping)}))
    rows = chunk.tables["gpu_metrics"]
    assert rows.select("host", "gpu", "metric", "value").rows() == [
        ("gpu-a17", 0, "gpu_temp_c", 55.0), ("gpu-a17", 1, "gpu_temp_c", 60.0)]
    cpu = Source.from_bytes("NODE_CPU_UTILIZATION.csv", b"Time,10.0.0.2\n1688169600,0.25\n")
    [chunk] = list(AcmeTraceReader().read(cpu, {}))
    assert chunk.tables["host_metrics"].select("metric", "value", "unit").rows() == [
        ("cpu_util_pct", 25.0, "%")]
    with pytest.raises(InputError, match="--option metric="):
        list(AcmeTraceReader().read(Source.from_bytes("x.csv", b"Time,10.0.0.2\n1,2\n"), {}))


def test_a_cell_without_a_finite_number_is_quarantined_and_its_line_read():
    """A stray quote, a stray byte or NaN in one cell quarantines its line, named by the first
    such cell; the line's other cells and the other lines are read (the cell was dropped
    silently). An empty cell is a missing sample."""
    csv = (b"Time,10.0.0.1,10.0.0.2\n"
           b"1688169600,1.5,2.5\n"
           b'1688169615,1"5,2.5\n'
           b"1688169630,\xff,nan\n"
           b"1688169645,,3.5\n")
    [chunk] = list(AcmeTraceReader().read(Source.from_bytes("NODE_IB_SEND.csv", csv), {}))
    rates = chunk.tables["nic_counters"].sort("ts_ns", "host")
    assert rates.select("host", "rate_per_s").rows() == [
        ("10.0.0.1", 1.5), ("10.0.0.2", 2.5), ("10.0.0.2", 2.5), ("10.0.0.2", 3.5)]
    assert chunk.quarantine.select("line_no", "reason", "raw").rows() == [
        (3, '10.0.0.1: 1"5 is not a finite number', '1688169615,1"5,2.5'),
        (4, "10.0.0.1: \ufffd is not a finite number", "1688169630,\ufffd,nan")]


@pytest.mark.parametrize("header", [b"\x00Time,10.0.0.1", b"Time"])
def test_a_header_without_time_or_servers_is_one_error_naming_the_line(header):
    source = Source.from_bytes("NODE_IB_SEND.csv", header + b"\n1688169600,1.5\n")
    with pytest.raises(InputError, match=r"^NODE_IB_SEND.csv:1: the header is not Time and a "
                                         "column per server$"):
        list(AcmeTraceReader().read(source, {}))

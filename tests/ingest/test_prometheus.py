"""Prometheus text exposition, range-query JSON and long CSV, on the real-format samples."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from tests.ingest.collective_helpers import read_all
from tracekit.core import schema
from tracekit.core.dataset import open_dataset
from tracekit.core.errors import InputError
from tracekit.ingest import registry
from tracekit.ingest.base import Source
from tracekit.ingest.pipeline import ingest
from tracekit.ingest.prometheus import (
    PrometheusCsvReader,
    PrometheusJsonReader,
    PrometheusTextReader,
    parse_exposition,
)

TS = "1760433600"
TS_NS = 1_760_433_600 * 10**9


def _source(path: Path, name: str | None = None) -> Source:
    return Source.from_bytes(name or str(path), path.read_bytes())


def _read(reader, source: Source, options: dict[str, str] | None = None):
    chunks = list(reader.read(source, options or {}))
    assert len(chunks) == 1
    return chunks[0]


def _lines(text: str) -> pl.DataFrame:
    return pl.DataFrame({"line": text.split("\n")}).with_row_index("line_no", offset=1) \
        .with_columns(pl.col("line_no").cast(pl.Int64))


def test_parse_exposition_values_labels_and_timestamps():
    parsed = parse_exposition(_lines(
        "# TYPE a_total counter\n"
        'a_total{x="1",y="q\\"uo,te=\\"d"} 1.281553e+06 1760433600123\n'
        "b NaN\n"
        'c{z="",} +Inf\n'
        "d -Inf\n"
        "\n"
        '{__name__="e", k="v"} 2 1760433600000\n'
        'f{gpu="0"} ERROR - FAILED TO CONVERT TO STRING\n'
        'g{bad label} 1\n'
    ))
    rows = parsed.samples
    assert rows["name"].to_list() == ["a_total", "b", "c", "d", "e"]
    assert rows["value"][0] == 1281553.0 and rows["value"][2] == float("inf")
    assert rows["value"][1] != rows["value"][1]  # NaN
    assert rows["value"][3] == float("-inf")
    assert rows["ts_ms"].to_list() == [1760433600123, None, None, None, 1760433600000]
    assert rows["labels"].struct.field("y")[0] == 'q"uo,te="d'
    assert rows["labels"].struct.field("k")[4] == "v"
    assert rows["type"][0] == "counter"
    assert parsed.bad["line_no"].to_list() == [8, 9]
    assert parsed.bad["reason"].to_list() == ["not a sample line", "malformed label set"]
    assert parsed.skipped == 3  # TYPE line, blank line, empty last line


def test_lines_split_by_hand_and_by_the_regex_agree_and_keep_their_order():
    parsed = parse_exposition(_lines(
        'a{k="x} y",j="2"} 1 5\n'
        "b\t2\t6\n"
        'c{k="v"} 3\n'
        "  d 4 7  \n"
        "{__name__=\"e\"} 5\n"
        "f 6 8 9\n"
    ))
    rows = parsed.samples
    assert rows.select("line_no", "name", "value", "ts_ms").rows() == [
        (1, "a", 1.0, 5), (2, "b", 2.0, 6), (3, "c", 3.0, None), (4, "d", 4.0, 7),
        (5, "e", 5.0, None)]
    assert rows["labels"].struct.field("k").to_list() == ["x} y", None, "v", None, None]
    assert parsed.bad.select("line_no", "reason").rows() == [(6, "not a sample line")]


def test_dcgm_exporter_sample_exact_rows(formats_dir):
    chunk = _read(PrometheusTextReader(), _source(formats_dir / "dcgm_exporter.prom"), {"ts": TS})
    gpu = chunk.tables["gpu_metrics"]
    schema.validate("gpu_metrics", gpu)
    assert gpu.height == 123
    assert set(gpu["ts_ns"].unique()) == {TS_NS}
    assert set(gpu["host"].unique()) == {"gpu-a17"}

    def value(gpu_index: int, metric: str) -> float:
        return gpu.filter((pl.col("gpu") == gpu_index) & (pl.col("metric") == metric))["value"]\
            .item()

    assert value(0, "power_w") == 612.381
    assert value(2, "sm_clock_mhz") == 1410
    assert value(2, "gpu_temp_c") == 83
    assert value(3, "fb_free_mib") == 81004
    assert value(2, "pcie_replays") == 17
    assert value(2, "clocks_event_reasons") == 0x60
    assert value(2, "clock_event_sw_thermal") == 1 and value(2, "clock_event_hw_thermal") == 1
    assert value(2, "clock_event_gpu_idle") == 0
    assert value(3, "clock_event_gpu_idle") == 1
    assert value(2, "xid_79_errors_count") == 1
    assert value(2, "clock_events_sw_thermal_count") == 12
    row = gpu.filter(pl.col("gpu") == 2).row(0, named=True)
    assert row["gpu_uuid"] == "GPU-0a7e3b94-1c2d-48f0-a3e5-7d9b6c4f2e18"
    assert row["bus_id"] == "0000:3a:00.0"
    assert chunk.quarantine is None or chunk.quarantine.height == 0


def test_both_dcgm_naming_generations_give_identical_rows(formats_dir):
    classic = (formats_dir / "dcgm_exporter.prom").read_text()
    renamed = (
        classic.replace("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_TEMP_CELSIUS")
        .replace("DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS")
        .replace("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_BOARD_POWER_WATTS")
        .replace("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL_RATIO")
        .replace("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_XID_ERROR")
        .replace("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_UTIL_RATIO")
        .replace("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_TENSOR_UTIL_RATIO")
        .replace("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")
        .replace('Hostname="', 'hostname="')
    )
    assert renamed != classic
    reader = PrometheusTextReader()
    old = _read(reader, Source.from_bytes("old.prom", classic.encode()), {"ts": TS})
    new = _read(reader, Source.from_bytes("new.prom", renamed.encode()), {"ts": TS})
    key = ["gpu", "metric"]
    assert old.tables["gpu_metrics"].sort(key).equals(new.tables["gpu_metrics"].sort(key))


def test_prom_without_timestamps_names_the_file_and_the_fix(formats_dir):
    source = _source(formats_dir / "dcgm_exporter.prom")
    with pytest.raises(InputError) as error:
        list(PrometheusTextReader().read(source, {}))
    message = str(error.value)
    assert message.startswith(str(formats_dir / "dcgm_exporter.prom"))
    assert "--option ts=" in message and "file name" in message


def test_timestamp_from_file_name_and_from_samples(formats_dir):
    text = (formats_dir / "node_exporter_infiniband.prom").read_bytes()
    chunk = _read(PrometheusTextReader(), Source.from_bytes("ib-20251014T092000.prom", text),
                  {"host": "gpu-a17"})
    assert set(chunk.tables["nic_counters"]["ts_ns"].unique()) == {TS_NS}
    own = b'DCGM_FI_DEV_GPU_TEMP{gpu="1",Hostname="b03"} 50 1760433600250\n'
    rows = _read(PrometheusTextReader(), Source.from_bytes("x_1700000000.prom", own))\
        .tables["gpu_metrics"]
    assert rows["ts_ns"].to_list() == [TS_NS + 250_000_000]


def test_node_exporter_infiniband_go_float_and_sysfs_names(formats_dir):
    chunk = _read(PrometheusTextReader(), _source(formats_dir / "node_exporter_infiniband.prom"),
                  {"ts": TS, "host": "gpu-a17"})
    nic = chunk.tables["nic_counters"]
    schema.validate("nic_counters", nic)
    values = {(d, c): v for d, c, v in nic.select("device", "counter", "value").iter_rows()}
    assert values[("mlx5_0", "np_cnp_sent")] == 1_281_553
    assert values[("mlx5_0", "np_ecn_marked_roce_packets")] == 1_288_923
    assert values[("mlx5_0", "rp_cnp_handled")] == 2_512_327
    assert values[("mlx5_0", "port_rcv_data")] == 913_721_220_109  # bytes / 4, as sysfs counts
    assert nic.height == 14
    assert chunk.skipped == 16 + 2  # HELP/TYPE comments + state_id gauges


def test_node_exporter_cpu_becomes_host_utilisation():
    scrape = "\n".join(
        f'node_cpu_seconds_total{{cpu="{cpu}",mode="{mode}"}} {value} {ts}'
        for ts, values in ((1760433600000, (100, 300, 10, 5)), (1760433610000, (106, 302, 11, 6)))
        for cpu in ("0", "1")
        for mode, value in zip(("user", "idle", "iowait", "steal"), values, strict=True)
    ) + "\nnode_load1 3.5 1760433610000\n"
    chunk = _read(PrometheusTextReader(), Source.from_bytes("cpu.prom", scrape.encode()),
                  {"host": "gpu-b03.cluster.local"})
    host = chunk.tables["host_metrics"]
    schema.validate("host_metrics", host)
    cumulative = host.filter(pl.col("unit") == "s")
    shares = host.filter(pl.col("unit") != "s")
    got = {m: v for m, v in shares.select("metric", "value").iter_rows()}
    # per cpu: busy = user + steal = +7, total = +10 -> 70 %
    assert got == {"cpu_util_pct": 70.0, "cpu_iowait_pct": 10.0, "cpu_steal_pct": 10.0,
                   "load1": 3.5}
    assert set(host["host"]) == {"gpu-b03"}
    assert set(shares["ts_ns"]) == {TS_NS + 10 * 10**9}
    # the running totals of both scrapes, for shares across one-scrape files: 2 CPUs
    assert sorted(cumulative.select("ts_ns", "metric", "value").rows()) == [
        (TS_NS, "cpu_busy_seconds_total", 210.0), (TS_NS, "cpu_seconds_total", 830.0),
        (TS_NS + 10 * 10**9, "cpu_busy_seconds_total", 224.0),
        (TS_NS + 10 * 10**9, "cpu_seconds_total", 850.0)]


def test_ipmi_exporter_values_and_states(formats_dir):
    host = _read(PrometheusTextReader(), _source(formats_dir / "ipmi_exporter.prom"),
                 {"ts": TS, "host": "gpu-a17"}).tables["host_metrics"]
    got = {m: (v, u, s) for m, v, u, s in host.select("metric", "value", "unit", "status")
           .iter_rows()}
    assert got["inlet_temp_c"] == (24.0, "C", "ok")
    assert got["gpu3_temp_c"] == (88.0, "C", "nc")
    assert got["fan2a_rpm"] == (0.0, "RPM", "cr")
    assert got["fan3a_rpm"] == (None, "RPM", "ns")
    assert got["ps2_status"] == (None, "", "cr")
    assert got["dcmi_power_w"] == (3598.0, "W", None)
    assert got["vcore_cpu1_v"] == (1.794, "V", "ok")
    assert host.height == 15


def test_range_json_and_long_csv_agree_with_resets_and_gaps(formats_dir):
    from_json = _read(PrometheusJsonReader(), _source(formats_dir / "prometheus_range.json"))
    from_csv = _read(PrometheusCsvReader(), _source(formats_dir / "prometheus_range_long.csv"))
    json_rows = from_json.tables["gpu_metrics"].drop("source")
    csv_rows = from_csv.tables["gpu_metrics"].drop("source")
    key = ["gpu", "metric", "ts_ns"]
    assert json_rows.sort(key).equals(csv_rows.sort(key))
    energy = json_rows.filter(pl.col("metric") == "energy_mj").sort("ts_ns")
    # 171998213003 -> 172004251887 in 15 s; the reset at +45 s gives no rate, never a negative
    assert energy["rate_per_s"].to_list()[:4] == [None, 6038884 / 15, 6038884 / 15, None]
    assert energy["rate_per_s"].drop_nulls().min() > 0
    sm = json_rows.filter((pl.col("metric") == "sm_active_ratio") & (pl.col("gpu") == 2))
    assert sm["ts_ns"].to_list() == [TS_NS + s * 10**9 for s in (0, 15, 30, 60)]  # gap kept
    assert sm["value"].to_list() == [0.911812, 0.633211, 0.633211, 0.631877]


DUPLICATED_SCRAPES = "".join(
    f'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu="0",Hostname="h"}} {energy} {ts}\n'
    f'DCGM_FI_DEV_GPU_TEMP{{gpu="0",Hostname="h"}} 60 {ts}\n'
    for energy, ts in ((1000, 1760433600000), (1000, 1760433600000),
                       (31000, 1760433630000), (31000, 1760433630000))
)
"""Two scrapes of a counter and a gauge, each served twice with the same timestamp (a
Prometheus dump that overlaps itself)."""


def test_timestamped_duplicate_scrapes_collapse_and_counters_rate():
    rows = _read(PrometheusTextReader(), Source.from_bytes("s.prom", DUPLICATED_SCRAPES.encode()))\
        .tables["gpu_metrics"]
    energy = rows.filter(pl.col("metric") == "energy_mj")
    assert energy["rate_per_s"].to_list() == [None, 1000.0]
    assert rows.filter(pl.col("metric") == "gpu_temp_c").height == 2


def test_sniffing_prefers_the_right_reader_and_leaves_nccl_inspector(formats_dir):
    expected = {
        "dcgm_exporter.prom": "prometheus-text",
        "node_exporter_infiniband.prom": "prometheus-text",
        "ipmi_exporter.prom": "prometheus-text",
        "prometheus_range.json": "prometheus-json",
        "prometheus_range_long.csv": "prometheus-csv",
    }
    for name, fmt in expected.items():
        assert registry.sniff(_source(formats_dir / name)).format == fmt
    inspector = next(formats_dir.glob("nccl_inspector_metrics_*.prom"))
    assert not PrometheusTextReader().sniff(_source(inspector))


def test_ingest_is_idempotent(formats_dir, tmp_path):
    out = tmp_path / "ds"
    for _ in range(2):
        summary = ingest([formats_dir / "prometheus_range.json"], out)
        assert not summary.failed
    assert open_dataset(out).table("gpu_metrics").collect().height == 16


CSV_HEADER = "timestamp,__name__,Hostname,gpu,value"


def _csv_chunk(data: bytes):
    [chunk] = PrometheusCsvReader().read(Source.from_bytes("dump.csv", data), {})
    return chunk


@pytest.mark.parametrize("damage", ["crlf", "cr", "bom", "bad-utf8", "stray-quote"])
def test_one_bad_spot_in_a_prometheus_csv_costs_at_most_its_line(damage):
    """CRLF, CR-only, a BOM, an invalid byte or a stray quote: every row still read (the
    quoted cell becomes unknown), where each rejected the whole file before."""
    rows = [f"{1_760_433_600 + 15 * i},DCGM_FI_DEV_GPU_TEMP,gpu-a17,0,{40 + i}" for i in range(4)]
    if damage == "bad-utf8":
        rows[1] = rows[1].replace("gpu-a17", "gpu-a1\udcff7")
    if damage == "stray-quote":
        rows[2] = rows[2].replace(",0,", ',"0,')
    text = "\n".join([CSV_HEADER, *rows]) + "\n"
    data = text.encode("utf-8", errors="surrogateescape")
    data = {"crlf": data.replace(b"\n", b"\r\n"), "cr": data.replace(b"\n", b"\r"),
            "bom": b"\xef\xbb\xbf" + data}.get(damage, data)
    chunk = _csv_chunk(data)
    rows_read = sum(frame.height for frame in chunk.tables.values())
    quarantined = 0 if chunk.quarantine is None else chunk.quarantine.height
    assert chunk.lines == 5
    assert rows_read + chunk.skipped + quarantined == 5
    assert rows_read == 4
    gpus = chunk.tables["gpu_metrics"].sort("ts_ns")["gpu"].to_list()
    assert gpus == ([0, 0, None, 0] if damage == "stray-quote" else [0, 0, 0, 0])


def test_a_prometheus_csv_without_its_columns_is_one_line():
    with pytest.raises(InputError, match=r"^dump.csv:1: the CSV header lacks __name__, value$"):
        _csv_chunk(b"timestamp,x\n1,2\n")
    with pytest.raises(InputError, match=r"^dump.csv:1: no CSV header"):
        _csv_chunk(b"\xef\xbb\xbf")


def test_a_label_set_polars_cannot_read_is_quarantined_alone():
    text = ('DCGM_FI_DEV_GPU_TEMP{Hostname="gpu-a17",gpu="0"} 40\n'
            'DCGM_FI_DEV_GPU_TEMP{Hostname="gpu-a17",gpu="1\\x"} 41\n'
            'DCGM_FI_DEV_GPU_TEMP{Hostname="gpu-a17",gpu="2"} 42\n')
    parsed = parse_exposition(_lines(text))
    assert parsed.samples["line_no"].to_list() == [1, 3]
    assert parsed.bad.select("line_no", "reason").rows() == [(2, "malformed label set")]


def test_repeated_samples_are_skipped_and_clock_event_flags_counted_apart():
    scrapes = (DUPLICATED_SCRAPES
               + 'DCGM_FI_DEV_CLOCKS_EVENT_REASONS{gpu="0",Hostname="h"} 4 1760433600000\n')
    chunk = _read(PrometheusTextReader(), Source.from_bytes("s.prom", scrapes.encode()))
    rows = chunk.tables["gpu_metrics"]
    assert (chunk.lines, rows.height, chunk.derived, chunk.skipped) == (9, 14, 9, 4)
    assert rows.height - chunk.derived + chunk.skipped == chunk.lines
    assert "skipped 4 repeated samples (same series and time, or a counter's unchanged " \
           "value)" in chunk.notes


NON_FINITE_TEXT = (
    'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="h"} NaN 1760433600000\n'
    'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="h"} +Inf 1760433615000\n'
    'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="h"} 61 1760433630000\n'
    'node_infiniband_port_data_received_bytes_total{device="mlx5_0",port="1",instance="h"} '
    '18446744073709551616 1760433600000\n'
    'node_infiniband_port_data_received_bytes_total{device="mlx5_0",port="1",instance="h"} '
    '-5 1760433615000\n'
    'node_infiniband_port_data_received_bytes_total{device="mlx5_0",port="1",instance="h"} '
    '400 1760433630000\n'
)


def test_values_no_table_can_hold_are_quarantined_with_their_line_in_text():
    result = read_all(PrometheusTextReader(), Source.from_bytes("s.prom", NON_FINITE_TEXT.encode()))
    assert result.quarantine["line_no"].to_list() == [1, 2, 4, 5]
    assert result.quarantine["reason"].to_list() == [
        "value NaN is not a finite number", "value inf is not a finite number",
        "counter reads 1.8446744073709552e+19, past what a 64-bit counter holds",
        "counter reads -5.0, below zero"]
    assert result.tables["gpu_metrics"]["value"].to_list() == [61.0]
    assert result.tables["nic_counters"]["value"].to_list() == [100]  # 400 bytes = 100 words
    assert (result.lines, result.rows(), result.skipped) == (6, 2, 0)


def test_a_bad_read_between_two_counter_samples_is_quarantined_and_the_rates_kept():
    """node_exporter infiniband at 1e12 bytes reading 0 once: the sample after it rated its
    whole value over one interval (1.67e10 words/s, 670x the 2.5e7 of the others); as the
    mlx5 and ethtool readers do, the bad read is quarantined and the rates hold."""
    name = "node_infiniband_port_data_transmitted_bytes_total"
    values = [10**12, 10**12 + 1.5e9, 0, 10**12 + 4.5e9, 10**12 + 6e9]
    text = "".join(f'{name}{{device="mlx5_0",port="1",instance="h"}} {v:.0f} '
                   f"{1760433600000 + 15000 * i}\n" for i, v in enumerate(values))
    result = read_all(PrometheusTextReader(), Source.from_bytes("s.prom", text.encode()))
    assert result.quarantine.select("line_no", "reason").rows() == [
        (3, "counter reads below its neighbours (a bad read, not a reset)")]
    rates = result.tables["nic_counters"].sort("ts_ns")["rate_per_s"].to_list()
    assert rates == [None, 2.5e7, 2.5e7, 2.5e7]
    assert (result.lines, result.rows(), result.skipped) == (5, 4, 0)


def test_values_no_table_can_hold_are_quarantined_in_json_and_csv():
    series = [({"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "0", "Hostname": "h"},
               [[1760433600, "NaN"], [1760433615, "-Inf"], [1760433630, "60"]]),
              ({"__name__": "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "gpu": "0", "Hostname": "h"},
               [[1760433600, "-5"], [1760433630, "9"]])]
    document = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": labels, "values": values} for labels, values in series]}}
    text = json.dumps(document, indent=1)  # pretty-printed: a pair's "[" on a line of its own
    result = read_all(PrometheusJsonReader(), Source.from_bytes("s.json", text.encode()))
    lines = text.splitlines()
    assert [lines[n - 1].strip() for n in result.quarantine["line_no"]] == ["["] * 3
    assert [lines[n].strip() for n in result.quarantine["line_no"]] == [
        "1760433600,", "1760433615,", "1760433600,"]  # the line a user finds each pair on
    assert result.quarantine.select("line_no", "reason", "raw").rows() == [
        (13, "value NaN is not a finite number", "[1760433600, NaN]"),
        (17, "value -inf is not a finite number", "[1760433615, -Inf]"),
        (34, "counter reads -5.0, below zero", "[1760433600, -5]")]
    one_line = read_all(PrometheusJsonReader(),
                        Source.from_bytes("s.json", json.dumps(document).encode()))
    assert one_line.quarantine["line_no"].to_list() == [1, 1, 1]
    # a label holding lists puts other arrays at a pair's depth: numbered by the first line
    series[0][0]["odd"] = [[1]]
    odd = read_all(PrometheusJsonReader(), Source.from_bytes("s.json", json.dumps(
        document, indent=1).encode()))
    assert odd.quarantine["line_no"].to_list() == [1, 1, 1]
    assert (result.lines, result.rows(), result.skipped) == (5, 2, 0)
    csv = ("timestamp,__name__,Hostname,gpu,value\n1760433600,DCGM_FI_DEV_GPU_TEMP,h,0,NaN\n"
           "1760433615,DCGM_FI_DEV_GPU_TEMP,h,0,inf\n1760433630,DCGM_FI_DEV_GPU_TEMP,h,0,60\n")
    result = read_all(PrometheusCsvReader(), Source.from_bytes("s.csv", csv.encode()))
    assert result.quarantine["line_no"].to_list() == [2, 3]
    assert (result.lines, result.rows(), result.skipped) == (4, 1, 1)


def test_ipmi_nan_stays_a_not_available_reading():
    text = 'ipmi_temperature_celsius{id="1",name="CPU Temp",instance="h"} NaN 1760433600000\n'
    result = read_all(PrometheusTextReader(), Source.from_bytes("i.prom", text.encode()))
    assert result.quarantine.height == 0
    assert result.tables["host_metrics"]["status"].to_list() == ["ns"]


def test_a_query_without_its_result_is_one_line():
    document = b'{"status":"success","data":{"resultType":"matrix","resInfult":[]}}'
    with pytest.raises(InputError, match="^q.json: the query's data has no result; re-export it$"):
        read_all(PrometheusJsonReader(), Source.from_bytes("q.json", document))

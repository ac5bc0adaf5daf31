"""ipmitool sdr list / elist / sensor / -c sensor snapshots."""

from __future__ import annotations

import pytest

from tracekit.core import schema
from tracekit.core.errors import InputError
from tracekit.ingest import registry
from tracekit.ingest.base import Source
from tracekit.ingest.ipmitool import IpmitoolReader


def _rows(source, options):
    [chunk] = list(IpmitoolReader().read(source, options))
    schema.validate("host_metrics", chunk.tables["host_metrics"])
    return chunk, {m: (v, u, s) for m, v, u, s in chunk.tables["host_metrics"]
                   .select("metric", "value", "unit", "status").iter_rows()}


@pytest.mark.parametrize("name", ["ipmitool_sdr.txt", "ipmitool_sdr_elist.txt",
                                  "ipmitool_sensor.txt"])
def test_every_variant_reads_the_same_sensors(formats_dir, name):
    source = Source.from_bytes(name, (formats_dir / name).read_bytes())
    assert registry.sniff(source).format == "ipmitool"
    chunk, got = _rows(source, {"ts": "1760433600", "host": "gpu-a17"})
    assert len(got) == 14 and chunk.skipped == 1 and chunk.quarantine.height == 0
    assert got["inlet_temp_c"] == (24.0, "C", "ok")
    assert got["gpu3_temp_c"] == (88.0, "C", "nc")
    assert got["fan2a_rpm"][0] == 0.0 and got["fan2a_rpm"][2] == "cr"
    assert got["current_1_a"] == (11.2, "A", "ok")
    assert got["pwr_consumption_w"] == (3612.0, "W", "ok")
    assert got["vcore_cpu1_v"][0] == (1.794 if name == "ipmitool_sensor.txt" else 1.79)


def test_elist_keeps_discrete_states(formats_dir):
    source = Source.from_bytes("e.txt", (formats_dir / "ipmitool_sdr_elist.txt").read_bytes())
    _, got = _rows(source, {"ts": "1760433600"})
    assert got["ps2_status"] == (None, "", "ok: Presence detected, Failure detected")
    assert got["fan3a"] == (None, "", "ns")


def test_csv_variant_duplicate_names_and_snapshots():
    text = (b"2025-10-14T09:20:00Z\nTemp,30.000,degrees C,ok,na,na,na,na,na,na\n"
            b"Temp,41.000,degrees C,ok,na,na,na,na,na,na\n"
            b"Fan1,na,RPM,na,na,na,na,na,na,na\n"
            b"2025-10-14T09:20:15Z\nTemp,31.000,degrees C,ok,na,na,na,na,na,na\n")
    chunk, _ = _rows(Source.from_bytes("ipmi.csv", text), {"host": "node7"})
    rows = chunk.tables["host_metrics"]
    assert rows.select("metric", "value").rows() == [
        ("temp_c", 30.0), ("temp_c_2", 41.0), ("fan1_rpm", None), ("temp_c", 31.0)]
    assert rows["ts_ns"].to_list()[-1] - rows["ts_ns"][0] == 15 * 10**9
    assert set(rows["host"]) == {"node7"}


def test_snapshot_without_time_is_a_clear_error(formats_dir):
    source = Source.from_bytes("sdr.txt", (formats_dir / "ipmitool_sdr.txt").read_bytes())
    with pytest.raises(InputError, match=r"sdr\.txt: .*--option ts="):
        list(IpmitoolReader().read(source, {}))


def _bare_sensor(formats_dir) -> bytes:
    """The sensor sample without its ``$ ipmitool sensor`` line, as a collector that does not
    echo the command saves it."""
    text = (formats_dir / "ipmitool_sensor.txt").read_bytes()
    assert text.startswith(b"$ ipmitool sensor\n")
    return text.split(b"\n", 1)[1]


def test_bare_sensor_output_is_recognised_by_its_shape(formats_dir):
    snapshots = b"".join(b"# ts=%d host=gpu-a17.cluster\n" % ts + _bare_sensor(formats_dir)
                         for ts in (1760433600, 1760433660))
    for name, data in (("sensor.txt", _bare_sensor(formats_dir)), ("bmc.log", snapshots)):
        assert registry.sniff(Source.from_bytes(name, data)).format == "ipmitool"
    chunk, got = _rows(Source.from_bytes("bmc.log", snapshots), {})
    rows = chunk.tables["host_metrics"]
    assert rows.height == 28 and chunk.skipped == 2 and chunk.quarantine.height == 0
    assert set(rows["host"]) == {"gpu-a17"}
    assert rows["ts_ns"].unique().sort().to_list() == [1760433600 * 10**9, 1760433660 * 10**9]
    assert got["gpu3_temp_c"] == (88.0, "C", "nc")
    assert got["ps2_status"] == (3.0, "", "0x0300")


def test_bare_csv_sensor_output_is_recognised():
    text = (b"Inlet Temp,24.000,degrees C,ok,na,-7.000,3.000,42.000,47.000,na\n"
            b"Fan2A,0.000,RPM,cr,na,720.000,1080.000,na,na,na\n"
            b"Fan3A,na,,na,na,na,na,na,na,na\n"
            b"PS1 Status,0x1,discrete,0x0100,na,na,na,na,na,na\n")
    source = Source.from_bytes("sensor.csv", text)
    assert IpmitoolReader().sniff(source)
    _, got = _rows(source, {"ts": "1760433600", "host": "n1"})
    assert got["inlet_temp_c"] == (24.0, "C", "ok") and got["fan2a_rpm"] == (0.0, "RPM", "cr")


@pytest.mark.parametrize("text", [
    # ten pipe fields whose third holds digits: a table, not ipmitool sensor
    b"a | 1 | 2 | ok | 1 | 2 | 3 | 4 | 5 | 6\n" * 3,
    # a plain CSV with ten numeric columns
    b"time,a,b,c,d,e,f,g,h,i\n" + b"1,2,3,4,5,6,7,8,9,10\n" * 3,
])
def test_other_ten_field_tables_are_not_ipmitool(text):
    assert not IpmitoolReader().sniff(Source.from_bytes("t.txt", text))

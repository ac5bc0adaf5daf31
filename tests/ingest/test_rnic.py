"""mlx5 hw_counters and ethtool -S snapshots: exact counters, wraps, resets."""

from __future__ import annotations

import polars as pl
import pytest

from tracekit.core import schema
from tracekit.core.errors import InputError
from tracekit.ingest import registry
from tracekit.ingest.base import Source
from tracekit.ingest.rnic import EthtoolStatsReader, Mlx5HwCountersReader

T0 = 1_760_433_600 * 10**9


def _source(path):
    return Source.from_bytes(str(path), path.read_bytes())


def test_hw_counters_wrap_and_reset(formats_dir):
    source = _source(formats_dir / "mlx5_hw_counters.txt")
    assert registry.sniff(source).format == "mlx5-hw-counters"
    [chunk] = list(Mlx5HwCountersReader().read(source, {}))
    nic = chunk.tables["nic_counters"]
    schema.validate("nic_counters", nic)
    assert nic.height == 120 and chunk.lines == 126 and chunk.skipped == 6  # markers + lifespan
    assert set(nic["host"]) == {"gpu-a17"}

    def rates(device, counter):
        return nic.filter((pl.col("device") == device) & (pl.col("counter") == counter))\
            .sort("ts_ns")["rate_per_s"].to_list()

    assert rates("mlx5_0", "out_of_sequence") == [None, (1004 + 2**32 - 4294967010) / 15]
    assert rates("mlx5_0", "np_cnp_sent") == [None, (1281553 - 1183342) / 15]
    assert rates("mlx5_3", "rx_write_requests") == [None, None]  # driver reload: a reset
    assert rates("mlx5_3", "np_cnp_sent") == [None, None]  # 64-bit counter drop: a reset
    assert nic["rate_per_s"].drop_nulls().min() >= 0
    assert set(nic["ts_ns"]) == {T0, T0 + 15 * 10**9}


def test_ethtool_snapshot_needs_a_time_and_names_its_device(formats_dir):
    source = _source(formats_dir / "ethtool_S_mlx5.txt")
    assert registry.sniff(source).format == "ethtool-stats"
    with pytest.raises(InputError, match="--option ts="):
        list(EthtoolStatsReader().read(source, {}))
    [chunk] = list(EthtoolStatsReader().read(source, {"ts": "1760433600", "host": "gpu-a17"}))
    nic = chunk.tables["nic_counters"]
    values = dict(nic.select("counter", "value").iter_rows())
    assert len(values) == 26 and chunk.skipped == 2
    assert values["rx_prio3_pause"] == 88213
    assert values["rx_vport_rdma_unicast_bytes"] == 3647322019268881
    assert set(nic["device"]) == {"ens1f0np0"} and set(nic["ts_ns"]) == {T0}


def test_ethtool_two_snapshots_give_pause_rates():
    text = (b"# ts=1760433600 host=b03\n$ ethtool -S eth2\nNIC statistics:\n"
            b"     rx_prio3_pause: 100\n     rx_discards_phy: bad\n"
            b"# ts=1760433610 host=b03\n$ ethtool -S eth2\nNIC statistics:\n"
            b"     rx_prio3_pause: 600\n")
    [chunk] = list(EthtoolStatsReader().read(Source.from_bytes("e.txt", text), {}))
    pause = chunk.tables["nic_counters"].filter(pl.col("counter") == "rx_prio3_pause")
    assert pause["rate_per_s"].to_list() == [None, 50.0]
    assert chunk.quarantine["line_no"].to_list() == [5]

"""Hosts by agreement: a host read from a file's name stands only when the job knows it."""

from __future__ import annotations

import polars as pl
import pytest
from typer.testing import CliRunner

from tracekit.cli import app
from tracekit.core import schema
from tracekit.core.dataset import create_dataset, open_dataset
from tracekit.ingest.hosts import hosts_without_ranks
from tracekit.ingest.pipeline import ingest

TS = 1782736574
DCGM = 'DCGM_FI_DEV_SM_CLOCK{{gpu="0",UUID="GPU-1",Hostname="{host}"}} 1410\n'
"""A dcgm-exporter scrape: its Hostname label is a host the job knows."""


def _hw_counters(cnp: int) -> str:
    return f"/sys/class/infiniband/mlx5_0/ports/1/hw_counters/np_cnp_sent:{cnp}\n"


def _write(root, files: dict[str, str]):
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def _nic_hosts(path) -> list:
    return sorted(open_dataset(path)["nic_counters"].collect()["host"].to_list(),
                  key=lambda h: h or "")


def test_sysfs_names_in_a_host_folder_take_the_folder(tmp_path):
    """``gpu-a17/hw_counters-<unix>.txt`` once read as host ``hw``."""
    _write(tmp_path / "dump", {f"gpu-a17/hw_counters-{TS}.txt": _hw_counters(10),
                               f"gpu-a17/hw_counters-{TS + 15}.txt": _hw_counters(40),
                               f"gpu-a17/dcgm-exporter-{TS}.prom": DCGM.format(host="gpu-a17")})
    ingest([tmp_path / "dump"], tmp_path / "ds")
    assert _nic_hosts(tmp_path / "ds") == ["gpu-a17", "gpu-a17"]


def test_a_site_collector_name_gives_way_to_the_folder_the_job_knows(tmp_path):
    _write(tmp_path / "dump", {f"gpu-a17/roce_mon-{TS}.txt": _hw_counters(10),
                               f"gpu-a18/roce_mon-{TS}.txt": _hw_counters(20),
                               f"gpu-a17/gpumon-{TS}.prom": DCGM.format(host="gpu-a17"),
                               f"gpu-a18/gpumon-{TS}.prom": DCGM.format(host="gpu-a18")})
    summary = ingest([tmp_path / "dump"], tmp_path / "ds")
    assert _nic_hosts(tmp_path / "ds") == ["gpu-a17", "gpu-a18"]
    [source] = [s for s in summary.sources if s.path.endswith(f"gpu-a17/roce_mon-{TS}.txt")]
    assert source.notes[-1] == ("host 'mon' read from the file's name is none of the job's "
                                "hosts; 'gpu-a17', from its path, is")
    dataset = open_dataset(tmp_path / "ds")
    parts = sorted(dataset.manifest["parts"]["nic_counters"])
    again = ingest([tmp_path / "dump"], tmp_path / "ds")
    assert {s.status for s in again.sources} == {"unchanged"}
    assert sorted(open_dataset(tmp_path / "ds").manifest["parts"]["nic_counters"]) == parts
    assert _nic_hosts(tmp_path / "ds") == ["gpu-a17", "gpu-a18"]


def test_a_name_no_source_of_the_job_knows_gives_no_host(tmp_path):
    _write(tmp_path / "dump", {f"roce_mon-{TS}.txt": _hw_counters(10),
                               f"dcgm.gpu-a17.{TS}.prom": DCGM.format(host="gpu-a17")})
    summary = ingest([tmp_path / "dump"], tmp_path / "ds")
    assert _nic_hosts(tmp_path / "ds") == [None]
    [source] = [s for s in summary.sources if "roce_mon" in s.path]
    assert source.notes[-1] == ("host 'mon' read from the file's name is none of the job's "
                                "hosts (gpu-a17): its rows have no host; pass --option host=NAME")


def test_the_name_stands_when_it_is_the_only_candidate(tmp_path):
    """No content names a host: the name's reading is all there is."""
    _write(tmp_path / "dump", {f"roce_mon-{TS}.txt": _hw_counters(10)})
    ingest([tmp_path / "dump"], tmp_path / "ds")
    assert _nic_hosts(tmp_path / "ds") == ["mon"]


def test_the_host_option_is_never_second_guessed(tmp_path):
    _write(tmp_path / "dump", {f"roce_mon-{TS}.txt": _hw_counters(10),
                               f"dcgm.gpu-a17.{TS}.prom": DCGM.format(host="gpu-a17")})
    ingest([tmp_path / "dump" / f"roce_mon-{TS}.txt"], tmp_path / "ds",
           options={"host": "gpu-b01"})
    assert _nic_hosts(tmp_path / "ds") == ["gpu-b01"]


def test_a_reading_the_job_knows_wins_over_the_first(tmp_path):
    """``node.node-1.<unix>`` reads ``node-1`` (the host) once ``1``, a number, is refused;
    ``hwc.node-1`` too, where collector words were stripped down to ``1`` before."""
    _write(tmp_path / "dump", {f"hwc.node-1.{TS}.txt": _hw_counters(10),
                               f"dcgm.node-1.{TS}.prom": DCGM.format(host="node-1")})
    ingest([tmp_path / "dump"], tmp_path / "ds")
    assert _nic_hosts(tmp_path / "ds") == ["node-1"]


@pytest.mark.parametrize(("monitoring_hosts", "warnings"), [
    (["gpu01", "gpu02"], []),
    (["gpu01", "hw"], ["nic_counters has hosts on which no rank runs: hw (ranks run on gpu01, "
                       "gpu02); check the file names or pass --option host=NAME"]),
])
def test_info_warns_of_monitoring_hosts_without_ranks(tmp_path, monitoring_hosts, warnings):
    dataset = create_dataset(tmp_path / "ds", "j")
    dataset.write_table("comms", schema.conform("comms", pl.DataFrame(
        {"job": ["j", "j"], "rank": [0, 1], "host": ["gpu01", "gpu02"]},
        schema_overrides={"rank": pl.Int32})))
    dataset.write_table("nic_counters", schema.conform("nic_counters", pl.DataFrame(
        {"ts_ns": [1, 1], "host": monitoring_hosts, "device": ["mlx5_0"] * 2,
         "counter": ["np_cnp_sent"] * 2, "value": [1, 2]})))
    dataset.save_manifest()
    assert hosts_without_ranks(open_dataset(tmp_path / "ds")) == warnings
    shown = CliRunner().invoke(app, ["info", str(tmp_path / "ds")], terminal_width=400)
    assert shown.exit_code == 0
    assert [line.removeprefix("warning: ") for line in shown.output.splitlines()
            if line.startswith("warning:")] == warnings


DOMAIN = "cluster.example.com"
FQDN = f"a100-rack3-n07.{DOMAIN}"
IB = ('node_infiniband_np_cnp_packets_sent_total{{device="mlx5_0",port="1",'
      'instance="{instance}",job="node"}} {value} {ms}\n')


def _federate(address: str, names: list[str]) -> dict[str, str]:
    """``/federate`` pulls: DCGM's samples pair the ``instance`` address with a ``Hostname``,
    node_exporter's carry the address only."""
    ms = TS * 1000
    files = {f"federate/node-{TS + s}.prom": IB.format(instance=f"{address}:9100",
                                                          value=100 + 50 * s, ms=ms + 1000 * s)
             for s in (0, 15)}
    for n, name in enumerate(names):
        files[f"federate/dcgm{n}-{TS}.prom"] = (
            f'DCGM_FI_DEV_SM_CLOCK{{gpu="0",UUID="GPU-{n}",Hostname="{name}",'
            f'instance="{address}:9400",job="dcgm"}} 1410 {ms}\n')
    return files


def test_a_scrape_address_takes_the_host_another_file_pairs_it_with(tmp_path):
    """node_exporter's federate pull names its target by address only; DCGM's, in another
    file, pairs the address with the host: the counters were on host ``10.20.0.7``, no rank's,
    and the congested link had no notifications."""
    _write(tmp_path / "dump", _federate("10.20.0.7", [FQDN]))
    ingest([tmp_path / "dump"], tmp_path / "ds")
    assert _nic_hosts(tmp_path / "ds") == ["a100-rack3-n07", "a100-rack3-n07"]
    gpus = open_dataset(tmp_path / "ds")["gpu_metrics"].collect()
    assert gpus["host"].unique().to_list() == ["a100-rack3-n07"]


def test_an_address_paired_with_two_hosts_is_left_as_it_is(tmp_path):
    _write(tmp_path / "dump", _federate("10.20.0.7", [FQDN, "a100-rack3-n08"]))
    ingest([tmp_path / "dump"], tmp_path / "ds")
    assert _nic_hosts(tmp_path / "ds") == ["10.20.0.7", "10.20.0.7"]


@pytest.mark.parametrize("instance", [f"{FQDN}:9100", "A100-RACK3-N07:9100",
                                      "A100-Rack3-N07.Cluster.Example.Com", f"[{FQDN}]:9100"])
def test_an_instance_names_its_host_whatever_its_spelling(tmp_path, instance):
    _write(tmp_path / "dump", {f"node-{TS}.prom": IB.format(instance=instance, value=1,
                                                             ms=TS * 1000)})
    ingest([tmp_path / "dump"], tmp_path / "ds")
    assert _nic_hosts(tmp_path / "ds") == ["a100-rack3-n07"]


@pytest.mark.parametrize(("name", "host"), [
    (f"sys-gpu-01_{TS}.txt", "sys-gpu-01"), (f"hwc.data-node-3.{TS}.txt", "data-node-3"),
    (f"a100-rack3-n07-hwc-{TS}.txt", "a100-rack3-n07"),
    (f"A100-RACK3-N07.{DOMAIN}-hwc-{TS}.txt", "a100-rack3-n07")])
def test_a_host_named_with_collector_words_takes_the_job_s_spelling(tmp_path, name, host):
    """A host whose first word names a collector (``sys-``, ``data-``) once read as its tail
    (``gpu-01``); a collector word after a dash stayed in the host (``...-n07-hwc``)."""
    _write(tmp_path / "dump", {name: _hw_counters(10),
                               f"dcgm.{host}.{TS}.prom": DCGM.format(host=host)})
    ingest([tmp_path / "dump"], tmp_path / "ds")
    assert _nic_hosts(tmp_path / "ds") == [host]


def test_files_named_by_address_take_the_host_dcgm_s_file_of_that_address_names(tmp_path):
    """Collectors that name files by the scrape target's address: the hw_counters of
    ``10.20.0.7`` had no host the job knows; DCGM's file of the same address says which."""
    _write(tmp_path / "dump", {f"hw_counters/10.20.0.7_{TS}.txt": _hw_counters(10),
                               f"hw_counters/10.20.0.7_{TS + 15}.txt": _hw_counters(40),
                               f"hw_counters/10.20.0.8_{TS}.txt": _hw_counters(10),
                               f"dcgm_exporter/10.20.0.7_{TS}.prom": DCGM.format(host=FQDN)})
    ingest([tmp_path / "dump"], tmp_path / "ds")
    assert _nic_hosts(tmp_path / "ds") == [None, "a100-rack3-n07", "a100-rack3-n07"]

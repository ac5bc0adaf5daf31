"""Host and GPU identity normalisation."""

from __future__ import annotations

import polars as pl
import pytest

from tracekit.core.errors import InputError
from tracekit.core.identity import (
    IdentityMap,
    canonical_host,
    canonical_link_targets,
    gpu_directory,
    link_hosts,
    link_name,
    link_target,
    normalise_bus_id,
    resolve_gpus,
    short_host,
)


def test_short_host_and_bus_id():
    names = pl.Series(["GPU-A17.dc1.corp", "10.20.3.17:9400", "b03:9100", " ", "[::1]:80"])
    assert pl.select(short_host(pl.lit(names))).to_series().to_list() == [
        "gpu-a17", "10.20.3.17", "b03", None, "::1"]
    buses = pl.Series(["00000000:3A:00.0", "0000:1b:00.0"])
    assert pl.select(normalise_bus_id(pl.lit(buses))).to_series().to_list() == [
        "0000:3a:00.0", "0000:1b:00.0"]


@pytest.mark.parametrize(("name", "host"), [
    ("A100-Rack3-N07.cluster.example.com", "a100-rack3-n07"), ("DGX-H100-01", "dgx-h100-01"),
    ("10.20.0.7", "10.20.0.7"), ("gpu-b01:9400", "gpu-b01"), ("", "")])
def test_one_name_is_spelled_as_the_tables_spell_it(name, host):
    assert canonical_host(name) == host


def test_mapping_file_and_gpu_resolution(tmp_path):
    path = tmp_path / "map.csv"
    path.write_text("kind,alias,canonical\nhost,10.20.3.17,gpu-a17\n")
    mapping = IdentityMap.load(path)
    assert pl.select(mapping.host(pl.lit("10.20.3.17:9400"))).item() == "gpu-a17"
    metrics = pl.DataFrame({"host": ["gpu-a17"], "gpu": [2], "gpu_uuid": ["GPU-0a7e"],
                            "bus_id": ["0000:3a:00.0"]}, schema_overrides={"gpu": pl.Int32})
    comms = pl.DataFrame({"host": ["gpu-a17"], "rank": [5], "bus_id": ["0000:3A:00.0"]})
    resolved = resolve_gpus(comms, gpu_directory(metrics))
    assert resolved["gpu_index"].to_list() == [2]
    path.write_text("kind,alias,canonical\nrack,x,y\n")
    with pytest.raises(InputError, match="map.csv:2"):
        IdentityMap.load(path)


def test_rank_gpus_come_from_bus_ids_not_the_process_local_cuda_device():
    """Under CUDA_VISIBLE_DEVICES every process prints cudaDev 0: the GPU is the DCGM index of
    its bus id, else NVML's index; DCGM's index wins where the two differ."""
    from tracekit.core.identity import rank_gpus

    comms = pl.DataFrame({
        "rank": [0, 1, 2, 0], "host": ["h1", "h1", "h1", "h1"], "cuda_dev": [0, 0, 0, 0],
        "nvml_dev": [0, 1, 2, 0], "bus_id": ["0000:07:00.0", "0000:47:00.0", "0000:87:00.0",
                                             "0000:07:00.0"]},
        schema_overrides={"rank": pl.Int32, "cuda_dev": pl.Int32, "nvml_dev": pl.Int32})
    gpu_metrics = pl.DataFrame({
        "host": ["h1", "h1"], "gpu": [5, 4], "gpu_uuid": ["GPU-a", "GPU-b"],
        "bus_id": ["00000000:07:00.0", "00000000:47:00.0"]},
        schema_overrides={"gpu": pl.Int32})
    found = rank_gpus(comms, gpu_metrics)
    assert found.select("rank", "gpu", "gpu_uuid", "gpu_from").rows() == [
        (0, 5, "GPU-a", "bus id in DCGM"), (1, 4, "GPU-b", "bus id in DCGM"),
        (2, 2, None, "nvmlDev")]



def test_gpu_directory_keeps_each_gpus_first_names():
    """A GPU's UUID and bus id are the first the table gives, also when its first rows lack
    them or later rows differ; rows without a host or GPU index are left out."""
    metrics = pl.DataFrame({
        "host": ["h", "h", "h", "h", "g", None], "gpu": [1, 1, 2, 1, 0, 3],
        "gpu_uuid": [None, "GPU-1", "GPU-2", "GPU-9", None, "GPU-x"],
        "bus_id": ["0000:01:00.0", None, None, "0000:09:00.0", "0000:00:00.0", None]},
        schema_overrides={"gpu": pl.Int32})
    assert gpu_directory(metrics).rows() == [
        ("g", 0, None, "0000:00:00.0"), ("h", 1, "GPU-1", "0000:01:00.0"), ("h", 2, "GPU-2", None)]


def test_a_link_target_splits_back_into_its_hosts_whatever_they_hold():
    assert link_target("rack2-n1", "rack1-n2") == "link:rack1-n2<->rack2-n1"
    assert link_name("gpu-b21.dc1", "gpu-b20") == "gpu-b20<->gpu-b21.dc1"
    assert link_hosts("link:rack2-n1<->rack1-n2") == ("rack1-n2", "rack2-n1")
    assert link_hosts("gpu02-gpu01") == ("gpu01", "gpu02")  # the old spelling, one '-'
    assert link_hosts("link:rack1-n2-rack2-n1") is None  # three ways to split
    assert link_hosts("link:rack1-n2-rack2-n1", {"rack1-n2", "rack2-n1"}) == (
        "rack1-n2", "rack2-n1")
    assert link_hosts("link:a<->") is None


def test_canonical_link_targets_spell_each_link_once():
    parts = pl.Series(["link:b<->a", "link:gpu02-gpu01", "link:rack1-n2-rack2-n1", " rank:3",
                       "nic:gpu01/mlx5_0"])
    assert pl.select(canonical_link_targets(pl.lit(parts))).to_series().to_list() == [
        "link:a<->b", "link:gpu01<->gpu02", "link:rack1-n2-rack2-n1", "rank:3",
        "nic:gpu01/mlx5_0"]

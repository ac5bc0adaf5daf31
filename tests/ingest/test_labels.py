"""Ground-truth labels: link targets spelled ``link:A<->B`` whatever wrote them."""

from __future__ import annotations

import io
import json

import polars as pl

from tracekit.ingest.base import Source
from tracekit.ingest.labels import LabelsJsonReader, LabelsReader


def _entry(target: dict) -> dict:
    return {"episode": "E1", "kind": "communication", "cause": "network_congestion",
            "target": target, "t_start_ns": 10, "t_end_ns": 20, "counts_as_failslow": True}


def test_a_labeled_dump_link_keeps_its_hyphenated_hosts_whole():
    text = json.dumps([_entry({"link": ["gpu-b21", "gpu-b20"]}), _entry({"rank": 3})])
    [chunk] = LabelsJsonReader().read(Source.from_bytes("labels.json", text.encode()), {})
    labels = chunk.tables["labels"]
    assert labels.select("target", "target_link").rows() == [
        ("link:gpu-b20<->gpu-b21", "gpu-b20<->gpu-b21"), ("rank:3", None)]


def test_a_labeled_dump_names_hosts_as_the_tables_do():
    """A generator's FQDN and upper-case hosts: verdicts name ``a100-rack3-n07`` (NCCL
    truncates at the first dot; the tables hold lower case), so the label must too."""
    text = json.dumps([
        _entry({"link": ["A100-RACK3-N08.cluster.example.com", "a100-rack3-n07.cluster"]}),
        _entry({"host": "A100-Rack3-N07.cluster.example.com"}),
        _entry({"rank": 3, "host": "A100-RACK3-N07", "gpu": 1})])
    [chunk] = LabelsJsonReader().read(Source.from_bytes("labels.json", text.encode()), {})
    assert chunk.tables["labels"].select("target", "target_host", "target_link").rows() == [
        ("link:a100-rack3-n07<->a100-rack3-n08", None, "a100-rack3-n07<->a100-rack3-n08"),
        ("host:a100-rack3-n07", "a100-rack3-n07", None),
        ("rank:3", "a100-rack3-n07", None)]


def test_old_link_labels_are_respelled_where_they_split_one_way():
    old = pl.DataFrame({
        "episode": [0, 1, 2], "fail_slow": [True] * 3, "kind": ["communication"] * 3,
        "cause": ["network-congestion"] * 3,
        "target": ["link:gpu02-gpu01", "link:rack1-n2-rack2-n1", "rank:1+link:a-b"],
        "target_link": ["gpu02-gpu01", "rack1-n2-rack2-n1", None],
        "t_start_ns": [0, 0, 0], "t_end_ns": [1, 1, 1]},
        schema_overrides={"episode": pl.Int32})
    buffer = io.BytesIO()
    old.write_parquet(buffer)
    [chunk] = LabelsReader().read(Source.from_bytes("labels.parquet", buffer.getvalue()), {})
    assert chunk.tables["labels"].select("target", "target_link").rows() == [
        ("link:gpu01<->gpu02", "gpu01<->gpu02"),
        ("link:rack1-n2-rack2-n1", "rack1-n2-rack2-n1"),  # two links read so: kept as written
        ("rank:1+link:a<->b", None)]
    assert chunk.notes == ["links rack1-n2-rack2-n1 cannot be split into their two hosts (host "
                           "names hold '-'); write them as link:A<->B"]


def test_labels_parquet_names_hosts_as_the_tables_do():
    written = pl.DataFrame({
        "episode": [0, 1, 2], "fail_slow": [True] * 3, "kind": ["compute", "host", "compound"],
        "cause": ["gpu-thermal", "cpu-contention", "network-congestion+gpu-thermal"],
        "target": ["gpu:DGX-A-01.cluster.example.com/3", "host:DGX-A-02",
                   "rank:5+link:DGX-A-02<->dgx-a-01.cluster.example.com"],
        "target_host": ["DGX-A-01.cluster.example.com", "DGX-A-02", None],
        "target_link": [None, None, "DGX-A-02<->dgx-a-01.cluster.example.com"],
        "t_start_ns": [0, 0, 0], "t_end_ns": [1, 1, 1]},
        schema_overrides={"episode": pl.Int32})
    buffer = io.BytesIO()
    written.write_parquet(buffer)
    [chunk] = LabelsReader().read(Source.from_bytes("labels.parquet", buffer.getvalue()), {})
    assert chunk.tables["labels"].select("target", "target_host", "target_link").rows() == [
        ("gpu:dgx-a-01/3", "dgx-a-01", None), ("host:dgx-a-02", "dgx-a-02", None),
        ("rank:5+link:dgx-a-01<->dgx-a-02", None, "dgx-a-01<->dgx-a-02")]

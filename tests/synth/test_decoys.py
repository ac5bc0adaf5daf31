"""Decoy CNP surges: benign congestion notifications from traffic that is not the job's. They
change the NIC counters and the labels, nothing else, and attribution must not take them for a
culprit (Greyhound: a CNP surge on a shared link need not slow this job)."""

from __future__ import annotations

import filecmp
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tracekit.attribute import attribute_dataset
from tracekit.core import schema
from tracekit.core.dataset import open_dataset
from tracekit.core.errors import TracekitError
from tracekit.ingest.pipeline import ingest
from tracekit.synth.corpus import generate_corpus
from tracekit.synth.faults import Injection
from tracekit.synth.job import JobSpec, generate_job
from tracekit.synth.layout import Layout

ITERATIONS = 300


def _job(out: Path, layout: str, per_host: int, *inject: str):
    spec = JobSpec(Layout.parse(layout, gpus_per_host=per_host), ITERATIONS, 5,
                   tuple(Injection.parse(i) for i in inject), job="decoy")
    return generate_job(out, spec)


def _cnp_sent(path: Path) -> pl.DataFrame:
    """np_cnp_sent per snapshot and NIC of one host's mlx5 export."""
    lines = pl.Series(path.read_text().splitlines())
    groups = lines.str.extract_groups(r"mlx5_(\d+)/ports/1/hw_counters/np_cnp_sent:(\d+)$")
    return groups.struct.unnest().drop_nulls().select(
        pl.col("1").cast(pl.Int32).alias("nic"), pl.col("2").cast(pl.Int64).alias("value"))


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """The same job without and with a decoy on a link its rings do not cross (4 hosts)."""
    root = tmp_path_factory.mktemp("decoy")
    plain = _job(root / "plain", "tp2-dp4-pp1", 2, "thermal:rank=1@100+100x1.5")
    decoy = _job(root / "decoy", "tp2-dp4-pp1", 2, "thermal:rank=1@100+100x1.5",
                 "decoy@50+200x3")
    return root, plain, decoy


def test_a_decoy_changes_only_the_nic_counters_and_the_labels(pair):
    root, plain, decoy = pair
    differ = []
    for path in sorted(p for p in (root / "plain").rglob("*") if p.is_file()):
        twin = root / "decoy" / path.relative_to(root / "plain")
        if not filecmp.cmp(path, twin, shallow=False):
            differ.append(path.relative_to(root / "plain").as_posix())
    # the default target is a link the DP ring 0-1-2-3-0 does not use
    assert differ == ["labels.parquet", "monitoring/gpu01/mlx5_hw_counters.txt",
                      "monitoring/gpu03/mlx5_hw_counters.txt", "synth.json", "truth.parquet"]
    assert decoy.truth.drop("noise").equals(plain.truth.drop("noise"))


def test_a_decoy_is_labeled_benign_noise(pair):
    _, _, decoy = pair
    [row] = decoy.labels.filter(pl.col("cause") == "cnp-surge").rows(named=True)
    assert (row["kind"], row["fail_slow"], row["target"], row["target_link"]) == (
        "noise", False, "link:gpu01<->gpu03", "gpu01<->gpu03")
    assert (row["episode"], row["start_iteration"], row["end_iteration"]) == (1, 51, 250)
    inside = decoy.truth.filter(pl.col("iteration").is_between(51, 250))
    assert inside["noise"].str.contains("cnp-surge").all()
    # the thermal episode is still the only fail-slow, and only its iterations are slow
    assert decoy.labels.filter("fail_slow")["cause"].to_list() == ["gpu-thermal"]
    assert decoy.truth.filter("slow")["iteration"].to_list() == list(range(101, 201))


def test_decoy_counters_surge_on_the_link_hosts_only(pair):
    root, _, _ = pair
    rates = {}
    for host in ("gpu01", "gpu02", "gpu03", "gpu04"):
        sent = _cnp_sent(root / "decoy" / "monitoring" / host / "mlx5_hw_counters.txt")
        per_nic = sent.group_by("nic", maintain_order=True).agg(pl.col("value").diff().max())
        rates[host] = per_nic["value"].min() / 15
    # 40,000 CNP/s per unit of severity - 1 on every NIC of both ends; a few per second elsewhere
    assert rates["gpu01"] > 75_000 and rates["gpu03"] > 75_000
    assert rates["gpu02"] < 10 and rates["gpu04"] < 10


def test_a_decoy_on_one_nic_when_every_link_is_used(tmp_path):
    """Two hosts: the only link carries the job, so the decoy is a burst on one NIC."""
    result = _job(tmp_path / "job", "tp2-dp2-pp1", 2, "decoy:nic=1@20+260x2")
    [row] = result.labels.filter(pl.col("cause") == "cnp-surge").rows(named=True)
    assert row["target"].startswith("nic:gpu02/mlx5_") and row["target_host"] == "gpu02"
    nic = int(row["target"].rsplit("_", 1)[1])
    sent = _cnp_sent(tmp_path / "job" / "monitoring" / "gpu02" / "mlx5_hw_counters.txt")
    peak = sent.group_by("nic").agg(pl.col("value").diff().max() / 15).sort("nic")
    surged = np.flatnonzero(peak["value"].to_numpy() > 20_000).tolist()
    assert surged == [nic]
    assert result.labels.filter("fail_slow").is_empty() and not result.truth["slow"].any()


def test_a_decoy_is_not_part_of_a_compound_episode():
    with pytest.raises(TracekitError, match="decoy CNP surge is an episode of its own"):
        Injection.parse("thermal:rank=1+decoy@10+20x2")


def test_attribution_is_not_fooled_by_a_surge_during_a_thermal_episode(tmp_path):
    """A CNP surge on the throttled GPU's own host, over the whole episode: the straggler and
    its thermal evidence decide, not the network counters."""
    result = _job(tmp_path / "job", "tp2-dp2-pp2", 2, "thermal:rank=3@150+150x2.0",
                  "decoy:nic=1@100+200x3")
    ingest([tmp_path / "job" / "ranks", tmp_path / "job" / "monitoring"], tmp_path / "ds")
    episode = result.labels.filter("fail_slow").select(
        pl.lit("decoy").alias("job"), pl.lit(0, pl.Int32).alias("episode"),
        "t_start_ns", "t_end_ns", "start_iteration", "end_iteration")
    with open_dataset(tmp_path / "ds").updating() as written:
        written.write_table("episodes", schema.conform("episodes", episode))
    verdict = attribute_dataset(tmp_path / "ds").episodes.row(0, named=True)
    assert (verdict["cause"], verdict["target"]) == ("gpu-thermal", "rank:3")


def test_corpus_decoys_leave_the_rest_of_the_corpus_unchanged(tmp_path):
    plain = generate_corpus(tmp_path / "plain", "ci", 3, seed=1, iterations=60)
    decoyed = generate_corpus(tmp_path / "decoy", "ci", 3, seed=1, iterations=60, decoys=1)
    assert plain.equals(decoyed)
    for job in decoyed["job"]:
        labels = pl.read_parquet(tmp_path / "decoy" / job / "labels.parquet")
        before = pl.read_parquet(tmp_path / "plain" / job / "labels.parquet")
        assert labels.filter(pl.col("cause") == "cnp-surge").height == 1
        assert labels.filter("fail_slow").drop("episode").equals(
            before.filter("fail_slow").drop("episode"))
        assert filecmp.cmp(tmp_path / "plain" / job / "megatron" / "train.log",
                           tmp_path / "decoy" / job / "megatron" / "train.log", shallow=False)

"""Verdicts on dumps that nobody here wrote: NCCL_DEBUG logs with issue times only, a
Megatron log and exporter scrapes named by host and time (``../shared/devset``).

Each labeled fail-slow must get its culprit and cause; healthy jobs, near-misses and decoys
(a hot GPU that does not slow, power-cap blips, CNP bursts of other tenants) none.
"""

from __future__ import annotations

import tarfile

import polars as pl
import pytest

from tracekit.core.dataset import open_dataset
from tracekit.detect.verdict import VERDICT_DETECTOR
from tracekit.pipeline.corpus import evaluate_corpus

EXPECTED = {
    "4690175": [("network-congestion", "link:gpu-p55<->gpu-p56")],
    "4822163": [("cpu-contention", "host:gpu-i34"),
                ("gpu-thermal+network-congestion", "rank:2+link:gpu-i34<->gpu-i35")],
    "5014163": [("cpu-contention", "host:gpu-l37"), ("gpu-thermal", "rank:1")],
    "5071793": [],
    "6230882": [("network-congestion", "link:gpu-g42<->gpu-g43")],
    "6419707": [],
    "8536444": [],
    "8886318": [("gpu-thermal", "rank:7")],
}
"""One (cause, culprit) per episode of the verdict detector, in time order: the labels'
(``truth/<job>/labels.json``); 4822163's second is one compound fail-slow."""


@pytest.fixture(scope="module")
def devset(devset_dir, tmp_path_factory):
    return evaluate_corpus(devset_dir, tmp_path_factory.mktemp("devset"))


def test_every_monitoring_file_is_read_and_has_a_host(devset, devset_dir):
    corpus, _ = devset
    for job, path in corpus.jobs.select("job", "dataset").iter_rows():
        with tarfile.open(devset_dir / "dumps" / f"{job}.tar.xz") as archive:
            scrapes = {m.name.rsplit("/", 1)[-1] for m in archive.getmembers()
                       if m.isfile() and m.name.rsplit("/", 1)[-1].split(".")[0]
                       in ("dcgm", "hwc", "node")}
        dataset = open_dataset(path)
        read = {s["path"].rsplit("/", 1)[-1] for s in dataset.manifest["sources"]
                if s["format"] in ("prometheus-text", "mlx5-hw-counters")}
        assert read == scrapes, job
        for table in ("gpu_metrics", "host_metrics", "nic_counters"):
            frame = dataset[table].collect()
            assert frame.height > 0 and frame["host"].null_count() == 0, (path, table)


@pytest.mark.parametrize("job", sorted(EXPECTED))
def test_verdicts(devset, job):
    corpus, _ = devset
    episodes = (corpus.episodes.filter(pl.col("job") == job,
                                       pl.col("detector") == VERDICT_DETECTOR)
                .sort("t_start_ns"))
    assert list(episodes.select("cause", "target").iter_rows()) == EXPECTED[job]


def test_culprit_and_cause_right_for_every_fail_slow(devset):
    _, evaluation = devset
    row = evaluation.episode_table.filter(pl.col("detector") == VERDICT_DETECTOR,
                                          pl.col("category") == "all").row(0, named=True)
    assert (row["recall_text"], row["precision_text"]) == ("100.0 (8/8)", "100.0 (7/7)")
    assert (row["localisation_text"], row["cause_accuracy_text"]) == ("100.0 (8/8)",
                                                                       "100.0 (8/8)")


def test_accuracy_per_labeled_cause(devset):
    _, evaluation = devset
    table = evaluation.cause_table.filter(pl.col("detector") == VERDICT_DETECTOR)
    assert table.select("cause", "recall_text", "culprit_text", "cause_right_text").rows() == [
        ("cpu-contention", "100.0 (2/2)", "100.0 (2/2)", "100.0 (2/2)"),
        ("gpu-thermal", "100.0 (3/3)", "100.0 (3/3)", "100.0 (3/3)"),
        ("network-congestion", "100.0 (3/3)", "100.0 (3/3)", "100.0 (3/3)")]

"""The dev set (``../shared/devset``: NCCL_DEBUG logs with issue times only, a Megatron log
and exporter scrapes named by host and time) runs through the whole pipeline without a
traceback, every monitoring file is read with its host, and every verdict is well formed.

The dev set is dev data, looked at to find failures: no test pins its accuracy (that would
tune tracekit to eight dumps of at most two hosts, where a link or host culprit is nearly
forced). Accuracy is measured on fresh seeds (``python -m benchmarks accuracy``) and gated
on the committed corpus (``tests/test_accuracy_regression.py``).
"""

from __future__ import annotations

import tarfile

import polars as pl
import pytest

from tracekit.core import schema
from tracekit.core.dataset import open_dataset
from tracekit.pipeline.corpus import evaluate_corpus

CAUSES = {"gpu-thermal", "gpu-degradation", "cpu-contention", "network-congestion", "unknown",
          "insufficient-evidence"}


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


def test_every_verdict_is_well_formed(devset):
    corpus, _ = devset
    episodes = corpus.episodes.filter(pl.col("detector") != "labels")
    assert episodes.height > 0
    schema.validate("episodes", episodes.select(schema.EPISODES.column_names))
    for row in episodes.iter_rows(named=True):
        assert set(row["cause"].split("+")) <= CAUSES, row
        assert 0.0 <= row["confidence"] <= 1.0 and row["inferred"] is not None, row
        assert row["evidence"], row

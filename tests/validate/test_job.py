"""What a dataset says about the job: suspects, communicator groups, placement, model shape."""

from __future__ import annotations

import json

import polars as pl
import pytest

from tracekit.core import schema
from tracekit.core.dataset import create_dataset
from tracekit.core.errors import InputError
from tracekit.validate.job import (
    communicator_groups,
    episode_suspects,
    model_shape,
    rank_hosts,
)

HOSTS = ["gpu-b03", "gpu-b03", "gpu-b07", "gpu-b07"]


def comms_rows() -> pl.DataFrame:
    """A 4-rank job on two hosts: the world communicator, two TP pairs, one comm without id."""
    rows = []
    for rank in range(4):
        common = {"job": "j", "rank": rank, "host": HOSTS[rank], "cuda_dev": rank % 2,
                  "nvml_dev": rank % 2, "bus_id": f"0000:{0x18 + rank % 2:02x}:00.0"}
        rows.append({**common, "comm": f"0x{rank}a", "comm_id": "0xworld", "comm_rank": rank,
                     "nranks": 4})
        rows.append({**common, "comm": f"0x{rank}b", "comm_id": f"0xtp{rank // 2}",
                     "comm_rank": rank % 2, "nranks": 2})
        rows.append({**common, "comm": f"0x{rank}c", "comm_id": None, "comm_rank": rank,
                     "nranks": 4})
    frame = pl.DataFrame(rows, schema_overrides={"rank": pl.Int32, "cuda_dev": pl.Int32,
                                                 "nvml_dev": pl.Int32, "comm_rank": pl.Int32,
                                                 "nranks": pl.Int32, "comm_id": pl.String})
    return schema.conform("comms", frame)


@pytest.fixture
def dataset(tmp_path):
    ds = create_dataset(tmp_path / "job", job="j")
    ds.write_table("comms", comms_rows())
    episodes = pl.DataFrame(
        {"job": ["j"] * 4, "episode": [1, 2, 3, 4], "detector": ["bocd+v"] * 4,
         "target": ["gpu:gpu-b07/1", "link:gpu-b03-gpu-b07", None, "rank:9+host:gpu-b03"],
         "ranks": ["0,1,2,3", None, "1,2", None]},
        schema_overrides={"episode": pl.Int32})
    ds.write_table("episodes", schema.conform("episodes", episodes))
    layout = pl.DataFrame({"job": ["j"], "source": ["megatron"], "tp_size": [2],
                           "extra_json": [json.dumps({"hidden_size": 4096, "seq_length": 2048,
                                                      "micro_batch_size": 1})]},
                          schema_overrides={"tp_size": pl.Int32})
    ds.write_table("parallel_layout", schema.conform("parallel_layout", layout))
    ds.save_manifest()
    return ds


def test_gpu_target_blames_its_rank(dataset):
    suspects = episode_suspects(dataset, 1)
    assert suspects.target == "gpu:gpu-b07/1"
    assert suspects.gpus == {("gpu-b07", 1)}
    assert suspects.ranks == {3}
    assert suspects.bus_ids == {("gpu-b07", "0000:19:00.0")}


def test_link_target_with_hyphenated_host_names(dataset):
    suspects = episode_suspects(dataset, 2)
    assert suspects.host_links == {frozenset({"gpu-b03", "gpu-b07"})}
    assert suspects.ranks == set()


def test_untargeted_episode_blames_its_ranks_and_compound_targets(dataset):
    assert episode_suspects(dataset, 3).ranks == {1, 2}
    compound = episode_suspects(dataset, 4)
    assert compound.ranks == {0, 1, 9}
    assert compound.gpus == {("gpu-b03", 0), ("gpu-b03", 1)}


def test_unknown_episode_is_a_clear_error(dataset):
    with pytest.raises(InputError, match="no episode 7 in the dataset's episodes table"):
        episode_suspects(dataset, 7)


def test_communicator_groups(dataset):
    groups = communicator_groups(dataset, "tree")
    assert [(g.name, g.ranks, g.topology) for g in groups] == [
        ("0xtp0", (0, 1), "tree"), ("0xtp1", (2, 3), "tree"), ("0xworld", (0, 1, 2, 3), "tree")]
    holding_3 = communicator_groups(dataset, ranks=frozenset({3}))
    assert [g.name for g in holding_3] == ["0xtp1", "0xworld"]
    with pytest.raises(InputError, match="no complete communicator holding the suspect ranks"):
        communicator_groups(dataset, ranks=frozenset({42}))
    assert rank_hosts(dataset) == dict(enumerate(HOSTS))


def test_model_shape_from_layout_and_overrides(dataset):
    shape = model_shape(dataset)
    assert (shape.hidden_size, shape.seq_length, shape.micro_batch_size,
            shape.tensor_parallel) == (4096, 2048, 1, 2)
    assert model_shape(dataset, micro_batch_size=4, tensor_parallel=None).micro_batch_size == 4


def test_model_shape_missing_says_which_flags(tmp_path):
    empty = create_dataset(tmp_path / "empty")
    with pytest.raises(InputError, match="pass --hidden-size, --seq-length, --micro-batch-size"):
        model_shape(empty)

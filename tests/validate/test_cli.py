"""``tracekit validate``: the missing-torch message, a P2P run recorded in a dataset, the
self-test and flag errors."""

from __future__ import annotations

import sys

import polars as pl
import pytest
from typer.testing import CliRunner

from tracekit.cli import app
from tracekit.core import schema
from tracekit.core.dataset import create_dataset, open_dataset

runner = CliRunner()


@pytest.mark.parametrize("check", ["gemm", "p2p --group 0,1"])
def test_missing_torch_says_how_to_install_it(monkeypatch, check):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    result = runner.invoke(app, ["validate", *check.split()])
    assert result.exit_code == 2
    message = " ".join(result.output.split())
    assert "error: the validators need PyTorch, the optional `gpu` extra" in message
    assert "pip install 'tracekit[gpu]'" in message
    assert "pip install torch==2.13.0" in message


def test_episode_without_dataset_is_a_clear_error():
    pytest.importorskip("torch")
    result = runner.invoke(app, ["validate", "p2p", "--episode", "3", "--group", "0,1"])
    assert result.exit_code == 2
    assert "--episode needs --from DATASET" in result.output


def test_p2p_from_dataset_records_verdicts_for_the_episode(tmp_path):
    pytest.importorskip("torch")
    dataset = create_dataset(tmp_path / "job", job="j")
    comms = pl.DataFrame(
        {"job": ["j"] * 3, "comm": ["0xa", "0xb", "0xc"], "comm_id": ["0xdp"] * 3,
         "rank": [0, 1, 2], "comm_rank": [0, 1, 2], "nranks": [3] * 3,
         "host": ["n1", "n1", "n2"]},
        schema_overrides={"rank": pl.Int32, "comm_rank": pl.Int32, "nranks": pl.Int32})
    dataset.write_table("comms", schema.conform("comms", comms))
    episodes = pl.DataFrame({"job": ["j"], "episode": [1], "detector": ["bocd+v"],
                             "target": ["link:n1-n2"]}, schema_overrides={"episode": pl.Int32})
    dataset.write_table("episodes", schema.conform("episodes", episodes))
    dataset.save_manifest()
    result = runner.invoke(app, ["validate", "p2p", "--from", str(dataset.path), "--episode",
                                 "1", "--size-mb", "4", "--backend", "gloo", "--budget-s", "5",
                                 "--inject-delay", "1-2=0.05", "--threshold", "1.0"])
    assert result.exit_code == 0, result.output
    assert "recorded 6 verdicts" in result.output
    verdicts = open_dataset(dataset.path).table("validations").collect()
    # the n1 - n2 links are the suspects; 0->1 and 1->0 are each other's intra-host peers. On
    # a busy machine a healthy link may stay undecided, but none but 1->2 is named slow.
    rows = verdicts.select("target", "verdict").rows()
    assert [target for target, _ in rows] == ["link:0->2", "link:1->2", "link:2->0",
                                              "link:2->1", "link:0->1", "link:1->0"]
    found = dict(rows)
    assert found.pop("link:1->2") == "confirmed"
    assert {found.pop(t) for t in ("link:0->2", "link:2->0", "link:2->1")} <= {
        "refuted", "inconclusive"}
    assert set(found.values()) <= {"healthy", "inconclusive"}
    assert verdicts["episode"].to_list() == [1] * 6


def test_gemm_self_test_needs_no_other_flag():
    pytest.importorskip("torch")
    result = runner.invoke(app, ["validate", "gemm", "--self-test", "--budget-s", "2"])
    assert result.exit_code == 0, result.output
    summary = " ".join(result.output.split())
    assert "gemm self-test passed: with nothing slowed it named nothing (" in summary
    assert "GEMM check" in summary and ": nothing slowed" in summary


def test_flags_name_what_to_test():
    pytest.importorskip("torch")
    result = runner.invoke(app, ["validate", "gemm", "--slow-device", "cpu:9=2"])
    assert result.exit_code == 2
    assert ("--slow-device names cpu:9; the devices tested are cpu:0, cpu:1, cpu:2, cpu:3"
            in " ".join(result.output.split()))
    result = runner.invoke(app, ["validate", "p2p"])
    assert result.exit_code == 2
    assert "--self-test needs neither" in " ".join(result.output.split())

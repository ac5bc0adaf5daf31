"""Verdicts joined to an episode's suspects and written back to the dataset."""

from __future__ import annotations

import polars as pl

from tracekit.core import schema
from tracekit.core.dataset import create_dataset, open_dataset
from tracekit.validate.gemm import GemmReport
from tracekit.validate.job import Suspects
from tracekit.validate.p2p import P2PReport
from tracekit.validate.verdict import gemm_validations, p2p_validations, record_validations


def gemm_report() -> GemmReport:
    devices = pl.DataFrame(
        {"host": ["b07"] * 3, "device": ["cuda:0", "cuda:1", "cuda:2"], "gpu": [0, 1, 2],
         "bus_id": ["0000:18:00.0", "0000:19:00.0", "0000:1a:00.0"],
         "slowdown": [1.01, 1.42, 0.97], "low": [0.98, 1.31, 0.95], "high": [1.04, 1.5, 0.99],
         "samples": [24] * 3, "mean_tflops": [610.0, 430.0, 640.0], "tests": [3] * 3,
         "verdict": ["healthy", "slow", "healthy"], "slow": [False, True, False]},
        schema_overrides={"gpu": pl.Int32, "tests": pl.UInt32})
    return GemmReport(pl.DataFrame(), devices, 0.10, ["b07 cuda:0: NVIDIA H200"])


def p2p_report() -> P2PReport:
    links = pl.DataFrame(
        {"group": ["w"] * 4, "topology": ["ring"] * 4, "pass": [0, 0, 1, 1],
         "src_rank": [0, 2, 1, 3], "dst_rank": [1, 3, 2, 0],
         "src_host": ["b03", "b07", "b03", "b07"], "dst_host": ["b03", "b07", "b07", "b03"],
         "reach": ["intra-host", "intra-host", "inter-host", "inter-host"],
         "bandwidth_gb_s": [300.0, 310.0, 11.0, 24.0], "slowdown": [1.0, 1.08, 2.2, 0.45],
         "low": [0.97, 0.9, 2.0, 0.41], "high": [1.03, 1.3, 2.4, 0.5], "samples": [18] * 4,
         "peers": [1, 1, 1, 1], "verdict": ["healthy", "inconclusive", "slow", "healthy"],
         "slow": [False, None, True, False]},
        schema_overrides={"pass": pl.Int32, "src_rank": pl.Int32, "dst_rank": pl.Int32,
                          "peers": pl.Int32})
    return P2PReport(pl.DataFrame(), links, 0.10, "nccl", ["nccl: NVIDIA H200"])


def test_gemm_verdicts_for_suspects_and_others():
    suspects = Suspects(episode=5, gpus=frozenset({("b07", 1), ("b11", 4)}))
    frame = gemm_validations(gemm_report(), "job-a", suspects)
    schema.validate("validations", frame)
    assert frame.select("target", "suspect", "verdict").rows() == [
        ("gpu:b07/1", True, "confirmed"),
        ("gpu:b11/4", True, "not-testable"),
        ("gpu:b07/0", False, "healthy"),
        ("gpu:b07/2", False, "healthy"),
    ]
    confirmed = frame.row(0, named=True)
    assert confirmed["episode"] == 5 and confirmed["job"] == "job-a"
    assert confirmed["rate"] == 430.0 and confirmed["rate_unit"] == "TFLOP/s"
    assert confirmed["evidence"] == ("cuda:1 on b07: 430.0 TFLOP/s mean over 3 tests; slow: "
                                     "1.42x the peers, interval 1.31x-1.5x over 24 samples "
                                     "(threshold 1.10x)")
    assert frame.row(1, named=True)["evidence"].endswith("run the check on b11")


def test_gemm_matches_a_suspect_by_bus_id():
    suspects = Suspects(episode=1, bus_ids=frozenset({("b07", "0000:1a:00.0")}))
    frame = gemm_validations(gemm_report(), "j", suspects)
    assert frame.filter("suspect").select("target", "verdict").rows() == [
        ("gpu:b07/2", "refuted")]


def test_p2p_verdicts_for_a_suspect_host_link():
    suspects = Suspects(episode=2, host_links=frozenset({frozenset({"b03", "b07"})}))
    frame = p2p_validations(p2p_report(), "j", suspects)
    schema.validate("validations", frame)
    assert frame.select("target", "suspect", "verdict").rows() == [
        ("link:1->2", True, "confirmed"),
        ("link:3->0", True, "refuted"),
        ("link:0->1", False, "healthy"),
        ("link:2->3", False, "inconclusive"),
    ]
    assert frame.row(0, named=True)["evidence"] == (
        "ring link 1->2 (inter-host, b03 -> b07), pass 1 of group w: 11.0 GB/s, 1 peer "
        "links; slow: 2.2x the peers, interval 2.0x-2.4x over 18 samples (threshold 1.10x)")
    assert frame.row(3, named=True)["evidence"].endswith(
        "inconclusive: too noisy (spread 1.08x the peers, interval 0.9x-1.3x over 18 samples, "
        "straddles 1.10x); a longer --budget-s, a larger workload or a quieter machine would "
        "help")


def test_an_undecided_suspect_is_inconclusive_and_one_without_peers_not_testable():
    report = p2p_report()
    report.links = report.links.with_columns(
        pl.Series("verdict", ["no peers", "inconclusive", "slow", "healthy"]))
    suspects = Suspects(episode=3, ranks=frozenset({0, 2}))
    frame = p2p_validations(report, "j", suspects)
    assert dict(frame.select("target", "verdict").rows()) == {
        "link:0->1": "not-testable", "link:2->3": "inconclusive", "link:3->0": "refuted",
        "link:1->2": "confirmed"}


def test_record_replaces_the_same_check_and_keeps_the_rest(tmp_path):
    dataset = create_dataset(tmp_path / "job", job="j")
    suspects = Suspects(episode=2, ranks=frozenset({1}))
    record_validations(dataset, gemm_validations(gemm_report(), "j", suspects))
    record_validations(dataset, p2p_validations(p2p_report(), "j", suspects))
    record_validations(dataset, p2p_validations(p2p_report(), "j", suspects))
    reopened = open_dataset(dataset.path)
    table = reopened.table("validations").collect()
    assert table.group_by("check").len().sort("check").rows() == [("gemm", 3), ("p2p", 4)]
    assert reopened.manifest["tables"]["validations"]["rows"] == 7
    assert table.filter(pl.col("verdict") == "refuted")["target"].to_list() == ["link:0->1"]

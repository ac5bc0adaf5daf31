"""P2P check: 4 gloo processes on the CPU, one link slowed in the transport, exactly it flagged."""

from __future__ import annotations

import pytest

from tracekit.errors import TracekitError

pytest.importorskip("torch")

from tracekit.validate.p2p import P2PGroup, P2PPlan, run_p2p_check  # noqa: E402

SLOW_LINK = (1, 2)
INJECTED_DELAY_S = 0.05
"""Tens of times a 1-4 MiB loopback transfer. The test's threshold (4x the peers' median) sits
far above the scheduling noise of 4 processes on 2 busy cores, and far below the delay."""


def test_four_gloo_ranks_flag_exactly_the_slowed_link():
    plan = P2PPlan([P2PGroup("tp0", (0, 1, 2, 3), "ring")],
                   hosts={0: "n1", 1: "n1", 2: "n1", 3: "n1"},
                   delays_s={SLOW_LINK: INJECTED_DELAY_S}, threshold=3.0)
    report = run_p2p_check(plan, backend="gloo", timeout_s=60)
    links = report.links
    assert links.select("pass", "src_rank", "dst_rank").rows() == [
        (0, 0, 1), (0, 2, 3), (1, 1, 2), (1, 3, 0)]
    assert links["reach"].to_list() == ["intra-host"] * 4
    assert links.filter("slow").select("src_rank", "dst_rank").rows() == [SLOW_LINK]
    slowed = links.filter(src_rank=1).row(0, named=True)
    assert slowed["peers"] == 3
    assert slowed["slowdown"] > 5
    results = report.results
    assert results.height == 12
    assert sorted(set(results["size_bytes"])) == [1 << 20, 2 << 20, 4 << 20]
    assert results["repetition_s"].list.len().to_list() == [3] * 12
    slow_rows = results.filter(src_rank=1)
    # the receiver may leave the barrier a little after the sender starts its delay
    assert (slow_rows["mean_s"] >= 0.8 * INJECTED_DELAY_S).all()
    assert report.backend == "gloo"
    assert report.environment[0].startswith("gloo: ")


def test_plan_errors_are_clear():
    with pytest.raises(TracekitError, match="uses ranks 0..5 but the run has 4 ranks"):
        P2PPlan([P2PGroup("dp", (0, 5))]).check(4)
    with pytest.raises(TracekitError, match="every group needs at least 2 ranks"):
        P2PPlan([P2PGroup("solo", (0,))]).check(4)
    with pytest.raises(TracekitError, match="lists a rank twice"):
        P2PPlan([P2PGroup("dup", (0, 1, 1))]).check(4)


def test_launch_errors_are_clear_before_any_process_starts():
    plan = P2PPlan([P2PGroup("g", (0, 1))], sizes_bytes=(1024,))
    with pytest.raises(TracekitError, match="uses ranks 0..1 but the run has 1 ranks"):
        run_p2p_check(plan, nprocs=1, backend="gloo")
    with pytest.raises(TracekitError, match="backend 'smoke' is not available here"):
        run_p2p_check(plan, backend="smoke")

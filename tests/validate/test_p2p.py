"""P2P check: 4 gloo processes on the CPU, one direction of one link slowed in the transport,
exactly it flagged; link classes and directions on injected timings."""

from __future__ import annotations

import polars as pl
import pytest

from tracekit.core.errors import TracekitError

pytest.importorskip("torch")

from tracekit.validate.p2p import (  # noqa: E402 - after the torch skip
    TIMINGS_SCHEMA,
    P2PGroup,
    P2PPlan,
    run_p2p_check,
    summarise,
)
from tracekit.validate.peers import MIN_ROUNDS  # noqa: E402

SLOW_LINK = (1, 2)
INJECTED_DELAY_S = 0.02
"""Several times a 4 MiB loopback transfer, so the delayed direction is slow however busy the
machine; the reverse direction 2 -> 1 is not delayed."""


def test_four_gloo_ranks_flag_exactly_the_slowed_direction():
    plan = P2PPlan([P2PGroup("tp0", (0, 1, 2, 3), "ring")], sizes_bytes=(4 << 20,),
                   hosts={0: "n1", 1: "n1", 2: "n1", 3: "n1"},
                   delays_s={SLOW_LINK: INJECTED_DELAY_S}, budget_s=3)
    report = run_p2p_check(plan, backend="gloo", timeout_s=60)
    links = report.links
    assert links.select("pass", "src_rank", "dst_rank").rows() == [
        (0, 0, 1), (0, 2, 3), (1, 1, 2), (1, 3, 0), (2, 1, 0), (2, 3, 2), (3, 0, 3), (3, 2, 1)]
    assert links["reach"].to_list() == ["intra-host"] * 8
    assert links.filter("slow").select("src_rank", "dst_rank").rows() == [SLOW_LINK]
    slowed = links.filter(src_rank=1, dst_rank=2).row(0, named=True)
    assert slowed["peers"] == 7 and slowed["low"] > 1.1
    assert report.rounds >= MIN_ROUNDS
    results = report.results
    assert results.height == 8 and results["rounds"].to_list() == [report.rounds] * 8
    # the receiver may leave the barrier a little after the sender starts its delay
    assert results.filter(src_rank=1, dst_rank=2)["mean_s"][0] >= 0.8 * INJECTED_DELAY_S
    assert report.backend == "gloo"
    assert report.environment[0].startswith("gloo: ")


def injected(seconds: dict[tuple[int, int], float], rounds: int = 8) -> pl.DataFrame:
    """Receiver timings of a ring's 8 directed links, 1 % apart from round to round."""
    rows = [("w", "ring", 0, src, dst, 1 << 20, r, base * (1 + 0.01 * ((r + src) % 3 - 1)))
            for (src, dst), base in seconds.items() for r in range(rounds)]
    return pl.DataFrame(rows, schema=TIMINGS_SCHEMA, orient="row")


def test_links_compared_within_their_class_and_direction():
    # ranks 0, 1 on host a and 2, 3 on b: 1->2 and 3->0 cross hosts (a NIC, 10x slower than
    # the intra-host links); only 1->2 is slower than its inter-host peers, not its reverse.
    intra, inter = 1e-3, 1e-2
    seconds = {(0, 1): intra, (2, 3): intra, (1, 0): intra, (3, 2): intra,
               (1, 2): 3 * inter, (2, 1): inter, (3, 0): inter, (0, 3): inter}
    plan = P2PPlan([P2PGroup("w", (0, 1, 2, 3))], hosts={0: "a", 1: "a", 2: "b", 3: "b"})
    links = summarise(injected(seconds), plan, "gloo").links
    found = {(r["src_rank"], r["dst_rank"]): (r["reach"], r["verdict"], r["peers"])
             for r in links.iter_rows(named=True)}
    assert found == {
        (0, 1): ("intra-host", "healthy", 3), (2, 3): ("intra-host", "healthy", 3),
        (1, 0): ("intra-host", "healthy", 3), (3, 2): ("intra-host", "healthy", 3),
        (1, 2): ("inter-host", "slow", 3), (2, 1): ("inter-host", "healthy", 3),
        (3, 0): ("inter-host", "healthy", 3), (0, 3): ("inter-host", "healthy", 3)}
    assert links.filter(src_rank=1, dst_rank=2)["slowdown"][0] == pytest.approx(3, rel=0.03)


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

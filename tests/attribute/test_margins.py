"""The timing margins of the fresh-seed benchmark (``benchmarks/accuracy_margins.py``): which
ranks and groups a label makes faulty for each timing threshold."""

from __future__ import annotations

from dataclasses import replace

import polars as pl

from benchmarks.accuracy_margins import _culprits, _timing_rows
from tests.attribute.cases import HOSTS, episode_signals

UNITS = {rank: (host, 0) for rank, host in HOSTS.items()}


def test_a_congested_links_groups_are_faulty_and_a_culprits_groups_left_out():
    """Groups h1-h2 (crossing the labeled link), h3-h4 and the ring over all four (crossing
    it too); rank 2's GPU is the compound label's other part, so its groups are neither."""
    timing = episode_signals([([0, 1], 2.0), ([2, 3], 1.3), ([0, 1, 2, 3], 1.05)], {},
                             relative={2: 1.4}).timing
    faulty = _culprits("network-congestion+gpu-thermal", "link:h1<->h2+rank:2", UNITS)
    rows = _timing_rows(timing, faulty, UNITS)
    assert [r for r in rows if r[0] == "transfer ratio"] == [("transfer ratio", 2.0, True)]
    assert [r for r in rows if r[0] == "own-time ratio"] == [
        ("own-time ratio", 1.0, False), ("own-time ratio", 1.0, False),
        ("own-time ratio", 1.4, True), ("own-time ratio", 1.0, False)]


def test_without_call_ends_the_imposed_wait_is_measured():
    timing = replace(episode_signals([([0, 1], 1.0)], {}).timing, own=None)
    timing = replace(timing, skew=timing.skew.with_columns(
        excess_rate=pl.Series([0.0, 0.25, 0.5, 0.75])))
    rows = _timing_rows(timing, _culprits("cpu-contention", "host:h4", UNITS), UNITS)
    assert rows == [("wait rise", 0.0, False), ("wait rise", 0.25, False),
                    ("wait rise", 0.5, False), ("wait rise", 0.75, True)]

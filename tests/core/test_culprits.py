"""The one reading of an episode's culprit ranks, shared by attribution and the report."""

from __future__ import annotations

import polars as pl

from tracekit.core.culprits import LOCALISING_DETECTORS, PEERS_DETECTOR, named_ranks
from tracekit.detect import peers


def test_named_ranks_reads_rank_parts_of_every_target_once():
    episodes = pl.DataFrame({"target": ["rank:10+rank:2", None, "link:gpu01<->gpu02",
                                        "rank:2+gpu:gpu01/3", "host:rank:7-node"]})
    assert named_ranks(episodes) == [2, 10]


def test_named_ranks_of_no_target():
    assert named_ranks(pl.DataFrame({"target": [None]}, schema={"target": pl.String})) == []


def test_the_localising_detector_is_the_peer_comparison():
    assert peers.NAME == PEERS_DETECTOR and LOCALISING_DETECTORS == (PEERS_DETECTOR,)

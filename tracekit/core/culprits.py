"""How an episode names its culprit, read by detection, attribution, reports and the CLI alike:
the ``rank:N`` parts of its target, and the detector whose episodes carry their culprit ranks
themselves. Stages cannot import each other, so what two of them read is named here once."""

from __future__ import annotations

import polars as pl

PEERS_DETECTOR = "peers"
"""The detector name of peer-comparison episodes (:mod:`tracekit.detect.peers`): a rank slower
than its peers, so its ``ranks`` are the culprit even where nothing else can be timed."""

LOCALISING_DETECTORS = (PEERS_DETECTOR,)
"""Detectors whose episodes name their culprit ranks (``ranks``)."""


def named_ranks(episodes: pl.DataFrame) -> list[int]:
    """The ranks the episodes' targets name (``rank:N`` parts of ``rank:6+link:a<->b``),
    sorted, each once."""
    parts = episodes["target"].drop_nulls().str.split("+").explode().drop_nulls()
    return sorted({int(part.removeprefix("rank:")) for part in parts.to_list()
                   if part.startswith("rank:")})

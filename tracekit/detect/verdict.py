"""The job's verdict: which episodes ``analyze``, ``report`` and ``eval`` show by default.

One policy, here only. The verdict is :data:`VERDICT_DETECTOR`: the episodes of
:data:`JOB_LEVEL_DETECTOR` (changes of the job-level series; ``bocd+b`` keeps 0 false alarms on
independent healthy jobs where the sliding window raises several) together with the straggler
episodes of the peer comparison (:mod:`tracekit.detect.peers`) that no job-level episode
already covers: stragglers present from the first step and ranks the job median hides. A
persistent straggler (a steady offset all run, ``persistent``) is no change, so no job-level
episode covers it: it stays beside them. When
both are silent the verdict is "none"; it never falls back to another detector's episodes.
Every detector's episodes stay in the ``episodes`` table for comparison.
"""

from __future__ import annotations

import polars as pl

from tracekit.detect.peers import NAME as PEER_DETECTOR

JOB_LEVEL_DETECTOR = "bocd+b"
"""The change-point detector of the verdict (measured best, docs/detectors.md)."""

VERDICT_DETECTOR = f"{JOB_LEVEL_DETECTOR}+{PEER_DETECTOR}"
"""The verdict's name in reports and accuracy tables."""

VERDICT_SOURCES = (JOB_LEVEL_DETECTOR, PEER_DETECTOR)
"""Detectors whose episodes make up the verdict."""


def verdict_episodes(episodes: pl.DataFrame) -> pl.DataFrame:
    """The verdict's episodes of every job in ``episodes`` (any extra columns kept), numbered
    by start per job, with ``detector`` = :data:`VERDICT_DETECTOR`."""
    changes = episodes.filter(pl.col("detector") == JOB_LEVEL_DETECTOR)
    stragglers = episodes.filter(pl.col("detector") == PEER_DETECTOR)
    changes_of = stragglers.filter(~pl.col("persistent").fill_null(False)) \
        if "persistent" in stragglers.columns else stragglers  # tables written before it
    covered = changes_of.join(changes.select("job", pl.col("start_iteration").alias("_s"),
                                             pl.col("end_iteration").alias("_e")),
                              on="job", how="inner", nulls_equal=True).filter(
        (pl.col("start_iteration") <= pl.col("_e")) & (pl.col("_s") <= pl.col("end_iteration")))
    stragglers = stragglers.join(covered.select("job", "episode"), on=["job", "episode"],
                                 how="anti", nulls_equal=True)
    return (pl.concat([changes, stragglers]).sort("job", "start_iteration", "detector")
            .with_columns(pl.lit(VERDICT_DETECTOR).alias("detector"),
                          pl.int_range(1, pl.len() + 1, dtype=pl.Int32).over("job")
                          .alias("episode")))


def with_verdict(episodes: pl.DataFrame) -> pl.DataFrame:
    """``episodes`` plus the verdict's rows (replacing any earlier verdict rows)."""
    detected = episodes.filter(pl.col("detector") != VERDICT_DETECTOR)
    return pl.concat([detected, verdict_episodes(detected)])


def shown_episodes(episodes: pl.DataFrame, detector: str | None = None
                   ) -> tuple[str, pl.DataFrame]:
    """The detector a report shows (the one asked for, else the verdict) and its episodes."""
    name = detector or VERDICT_DETECTOR
    return name, with_verdict(episodes).filter(pl.col("detector") == name)


def change_point_detector(detector: str) -> str:
    """Whose change points (``events``) go with ``detector``'s episodes in a report."""
    return JOB_LEVEL_DETECTOR if detector == VERDICT_DETECTOR else detector

"""The job verdict: bocd+b's episodes plus the stragglers no job-level episode covers; never
another detector's."""

from __future__ import annotations

import polars as pl

from tracekit.core import schema
from tracekit.detect.verdict import VERDICT_DETECTOR, shown_episodes, with_verdict


def episodes(*rows: tuple[str, str, int, int, int]) -> pl.DataFrame:
    """Episode rows from (job, detector, episode, start_iteration, end_iteration)."""
    return schema.conform("episodes", pl.DataFrame(
        rows, schema=["job", "detector", "episode", "start_iteration", "end_iteration"],
        orient="row").with_columns(pl.col("episode").cast(pl.Int32)))


def test_verdict_joins_changes_and_uncovered_stragglers():
    found = episodes(("a", "bocd+b", 1, 100, 199), ("a", "peers", 1, 0, 49),
                     ("a", "peers", 2, 150, 260), ("a", "window", 1, 500, 520),
                     ("b", "peers", 1, 30, 80))
    name, verdict = shown_episodes(found)
    assert name == VERDICT_DETECTOR == "bocd+b+peers"
    assert verdict.select("job", "episode", "start_iteration").rows() == [
        ("a", 1, 0), ("a", 2, 100), ("b", 1, 30)]  # peers 2 overlaps bocd+b 1: shown once


def test_no_fallback_when_the_verdict_is_silent():
    found = episodes(("a", "window", 1, 500, 520), ("a", "bocd", 1, 500, 520))
    assert shown_episodes(found)[1].is_empty()
    name, window = shown_episodes(found, "window")
    assert (name, window["start_iteration"].to_list()) == ("window", [500])


def test_with_verdict_replaces_earlier_verdict_rows():
    found = with_verdict(episodes(("a", "bocd+b", 1, 100, 199)))
    again = with_verdict(found)
    assert again.sort("detector")["detector"].to_list() == ["bocd+b", VERDICT_DETECTOR]

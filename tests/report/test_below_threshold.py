"""Small persistent rises are reported below the threshold, with their cost; noise, speed-ups,
short rises and rises inside an episode are not."""

from __future__ import annotations

import polars as pl
import pytest

from tracekit.report.below_threshold import below_threshold_changes, below_threshold_sentence
from tracekit.report.series import series_axis
from tracekit.report.verdict import episode_sentence


def _series(levels: list[tuple[int, float]]) -> pl.DataFrame:
    durations = [value for count, value in levels for _ in range(count)]
    return pl.DataFrame({"rank": pl.Series([None] * len(durations), dtype=pl.Int32),
                         "iteration": range(len(durations)), "t_start_ns": None,
                         "t_end_ns": None, "duration_s": durations, "quality": "ok"},
                        schema_overrides={"t_start_ns": pl.Int64, "t_end_ns": pl.Int64})


def _events(rows: list[tuple[int, float, float]], detector: str = "bocd") -> pl.DataFrame:
    return pl.DataFrame([{"rank": None, "detector": detector, "iteration": i, "ts_ns": None,
                          "before_s": b, "after_s": a, "ratio": a / b} for i, b, a in rows],
                        schema_overrides={"rank": pl.Int32, "ts_ns": pl.Int64})


NO_EPISODES = pl.DataFrame(schema={"start_iteration": pl.Int64, "end_iteration": pl.Int64})


def test_a_four_percent_step_to_the_end_is_reported_with_its_cost():
    iterations = _series([(40, 100.0), (20, 104.0)])
    found = below_threshold_changes(_events([(40, 100.0, 104.0)]), iterations, NO_EPISODES,
                                    "bocd+b")
    assert found.select("iteration", "iterations", "to_end", "lost").row(0) == (
        40, 20, True, 80.0)
    assert below_threshold_sentence(found.row(0, named=True), series_axis(iterations)) == (
        "The job ran x1.04 from iteration 40 (20 iterations, to the end of the log), below the "
        "fail-slow threshold x1.10: not a fail-slow, but it cost 80.0 s (1.3 % of the job).")


def test_noise_speedups_short_rises_and_episodes_are_not_reported():
    iterations = _series([(40, 100.0), (5, 105.0), (20, 100.0), (20, 101.0), (20, 104.0)])
    events = _events([(40, 100.0, 105.0), (45, 105.0, 100.0), (65, 100.0, 101.0),
                      (85, 101.0, 104.0)])
    # the 5-iteration x1.05 is too short, the x1.01 inside the jitter, the return a speed-up
    assert below_threshold_changes(events, iterations, NO_EPISODES, "bocd+b")[
        "iteration"].to_list() == [85]
    inside = pl.DataFrame({"start_iteration": [80], "end_iteration": [104]})
    assert below_threshold_changes(events, iterations, inside, "bocd+b").is_empty()
    # another detector's events are not read for the verdict's
    assert below_threshold_changes(_events([(85, 101.0, 104.0)], "window"), iterations,
                                   NO_EPISODES, "bocd+b").is_empty()


@pytest.mark.parametrize(("quality", "cost"), [
    ("ok", "it cost 80.0 s over the logged iterations (1.3 % of the logged steps' time)"),
    ("normalised", "it cost 1.3 % of the logged steps' time"),
])
def test_a_sampled_or_normalised_change_costs_what_an_episode_would(quality, cost):
    """The below-threshold sentence and the episode sentence say a cost in one wording."""
    iterations = _series([(40, 100.0), (20, 104.0)]).with_columns(
        pl.col("iteration") * 10, quality=pl.lit(quality))
    found = below_threshold_changes(_events([(400, 100.0, 104.0)]), iterations, NO_EPISODES,
                                    "bocd+b")
    axis = series_axis(iterations)
    row = found.row(0, named=True)
    assert below_threshold_sentence(row, axis) == (
        "The job ran x1.04 from iteration 400 (20 logged iterations, to the end of the log), "
        f"below the fail-slow threshold x1.10: not a fail-slow, but {cost}.")
    episode = {"slowdown": 1.04, "start_iteration": 400, "end_iteration": 590, "points": 20,
               "iterations": 200, "lost_s": row["lost"], "jct_slowdown": row["share"]}
    assert episode_sentence(episode, axis).endswith(f"; {cost}.")

"""What a series' axis lets a report say: clock or steps, seconds or normalised, coverage."""

from __future__ import annotations

import polars as pl
import pytest

from tracekit.report.series import series_axis


def _iterations(iterations, quality="ok", ranks=(None,), timed=False) -> pl.DataFrame:
    rows = [{"rank": r, "iteration": i, "t_start_ns": i * 10**9 if timed else None,
             "t_end_ns": (i + 1) * 10**9 if timed else None, "duration_s": 1.0,
             "quality": quality} for r in ranks for i in iterations]
    return pl.DataFrame(rows, schema={"rank": pl.Int32, "iteration": pl.Int64,
                                      "t_start_ns": pl.Int64, "t_end_ns": pl.Int64,
                                      "duration_s": pl.Float64, "quality": pl.String})


def test_timed_every_iteration_is_a_whole_job():
    axis = series_axis(_iterations(range(5), ranks=(0, 1), timed=True))
    assert (axis.clock, axis.seconds, axis.sampled, axis.whole_job, axis.ranks) == (
        True, True, False, True, 2)
    assert axis.at(3, 3 * 10**9) == "00:00:03 UTC"
    assert axis.coverage_sentence() is None and axis.units_sentence() is None


def test_sampled_normalised_steps_say_what_they_cover():
    axis = series_axis(_iterations(range(1, 100, 10), quality="normalised", ranks=(0, 1)))
    assert (axis.clock, axis.seconds, axis.sampled, axis.whole_job) == (
        False, False, True, False)
    assert (axis.logged, axis.span, axis.coverage) == (10, 91, pytest.approx(10 / 91))
    assert axis.at(21, None) == "iteration 21"
    assert axis.value(831.4) == "831 on the normalised scale"
    assert axis.coverage_sentence().startswith(
        "The log holds 10 of the 91 iterations from 1 to 91 (11.0 % of them)")


def test_interval_means_cover_their_intervals():
    """Megatron prints the mean of every log interval: one line in ten covers all ten."""
    axis = series_axis(_iterations(range(10, 101, 10), quality="interval-mean"))
    assert (axis.logged, axis.covered, axis.span, axis.sampled) == (10, 91, 91, False)
    assert axis.ranks == 0

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


def test_sample_seconds_are_named_seconds_and_samples():
    """A step table numbered by sample time (Alibaba PAI) is told in seconds, not iterations."""
    axis = series_axis(_iterations(range(1, 100, 10), quality="normalised", ranks=(0, 1)),
                       sample_seconds=True)
    assert (axis.at(21, None), axis.at(None, None), axis.noun(), axis.span_name) == (
        "second 21", "an unknown second", "sample", "seconds")
    assert axis.coverage_sentence() == (
        "The log holds 10 samples over the 91 seconds from 1 to 91 (one every 9.1 seconds): "
        "slowdowns and the time they span are those sampled; what happened between the "
        "samples, and so the whole job's lost time, is not in the log.")


@pytest.mark.parametrize(("quality", "every", "sample_seconds", "clause"), [
    ("ok", 1, False, "it cost 12.5 s (2.0 % of the job)"),
    ("ok", 10, False, "it cost 12.5 s over the logged iterations (2.0 % of the logged steps' "
                      "time)"),
    ("ok", 10, True, "it cost 12.5 s over the logged samples (2.0 % of the logged steps' time)"),
    ("normalised", 10, False, "it cost 2.0 % of the logged steps' time"),
])
def test_cost_clause_in_the_series_unit(quality, every, sample_seconds, clause):
    axis = series_axis(_iterations(range(1, 100, every), quality=quality), sample_seconds)
    assert axis.cost(12.5, 0.02) == clause


def test_cost_clause_without_a_share_or_a_cost():
    normalised = series_axis(_iterations(range(1, 100, 10), quality="normalised"))
    assert normalised.cost(3.0, None) == "its cost in time is not known (normalised)"
    assert normalised.cost(None, 0.1) == "its cost was not measured"

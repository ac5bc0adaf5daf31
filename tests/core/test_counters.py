"""Counter rates: resets, 32-bit wraps, duplicates, never negative."""

from __future__ import annotations

import polars as pl
from hypothesis import given
from hypothesis import strategies as st

from tracekit.core.counters import (
    collapse_repeats,
    counter_rates,
    shares_of_increase,
    split_glitches,
)

S = 10**9


def _frame(values, width=None):
    return pl.DataFrame({"k": ["a"] * len(values), "ts_ns": [i * 10 * S for i in
                                                             range(len(values))],
                         "value": values, "w": [width] * len(values)})


def test_wrap_reset_and_first_sample():
    rates = counter_rates(_frame([2**32 - 100, 400, 500, 3], 32), ["k"],
                          width_bits=pl.col("w"))["rate_per_s"].to_list()
    assert rates == [None, 50.0, 10.0, None]


def test_32_bit_reset_from_high_is_not_read_as_a_wrap():
    """100/s, then a reset from ~3e9 to 0: the wrap it could be implies 1.29e8/s."""
    values = [3_000_000_000 + 1000 * i for i in range(4)] + [0, 1000, 2000]
    rates = counter_rates(_frame(values, 32), ["k"], width_bits=pl.col("w"))
    assert rates["rate_per_s"].to_list() == [None, 100.0, 100.0, 100.0, None, 100.0, 100.0]


def test_32_bit_wrap_at_the_series_rate_is_a_wrap():
    values = [2**32 - 1500, 2**32 - 500, 500, 1500]
    rates = counter_rates(_frame(values, 32), ["k"], width_bits=pl.col("w"))
    assert rates["rate_per_s"].to_list() == [None, 100.0, 100.0, 100.0]


def test_a_bad_read_is_split_off_and_its_neighbours_keep_their_rate():
    frame = _frame([1000, 2000, 0, 4000, -5, 6000, 7000])
    kept, glitches = split_glitches(frame, ["k"])
    assert glitches["value"].to_list() == [0, -5]
    assert counter_rates(kept, ["k"])["rate_per_s"].to_list() == [None, 100.0, 100.0, 100.0,
                                                                    100.0]


def test_a_reset_that_stays_low_is_not_a_glitch():
    kept, glitches = split_glitches(_frame([1000, 2000, 5, 15, 25]), ["k"])
    assert (kept.height, glitches.height) == (5, 0)


def test_64_bit_drop_is_a_reset():
    rates = counter_rates(_frame([2**32 - 100, 400], 64), ["k"],
                          width_bits=pl.col("w"))["rate_per_s"].to_list()
    assert rates == [None, None]


def test_repeats_collapse_to_the_exporter_interval():
    frame = _frame([0, 0, 300, 300, 600, 600])
    collapsed = collapse_repeats(frame, ["k"])
    assert collapsed["value"].to_list() == [0, 300, 600, 600]
    assert counter_rates(collapsed, ["k"])["rate_per_s"].to_list() == [None, 15.0, 15.0, 0.0]


@given(st.lists(st.integers(min_value=0, max_value=2**40), min_size=1, max_size=30))
def test_rates_are_never_negative(values):
    rates = counter_rates(_frame(values, 32), ["k"], width_bits=pl.col("w"))["rate_per_s"]
    assert (rates.drop_nulls() >= 0).all()


def test_shares_of_increase_per_host_and_none_across_a_reset():
    seconds = pl.DataFrame({
        "host": ["a", "a", "a", "a", "b", "b"],
        "busy": [10.0, 13.0, 1.0, 4.0, 0.0, 1.0],
        "total": [100.0, 110.0, 20.0, 40.0, 0.0, 4.0],
    })
    shares = seconds.select(*shares_of_increase({"busy_pct": "busy"}, "total", "host"))
    # host a: 3 of 10 s busy, then a reset (both fall), then 3 of 20 s; host b: 1 of 4 s
    assert shares["busy_pct"].to_list() == [None, 30.0, None, 15.0, None, 25.0]

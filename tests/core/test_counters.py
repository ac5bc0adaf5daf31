"""Counter rates: resets, 32-bit wraps, duplicates, never negative."""

from __future__ import annotations

import polars as pl
from hypothesis import given
from hypothesis import strategies as st

from tracekit.core.counters import collapse_repeats, counter_rates

S = 10**9


def _frame(values, width=None):
    return pl.DataFrame({"k": ["a"] * len(values), "ts_ns": [i * 10 * S for i in
                                                             range(len(values))],
                         "value": values, "w": [width] * len(values)})


def test_wrap_reset_and_first_sample():
    rates = counter_rates(_frame([2**32 - 100, 400, 500, 3], 32), ["k"],
                          width_bits=pl.col("w"))["rate_per_s"].to_list()
    assert rates == [None, 50.0, 10.0, None]


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

"""Monotonic counters to per-second rates, the way an operator reads them.

Hardware counters restart at 0 when a driver reloads or an HCA resets, and mlx5 queue counters
are read as 32-bit values (kernel ``drivers/infiniband/hw/mlx5/counters.c``, ``be32_to_cpu``)
so they wrap at 2^32. Exporters that sample slower than Prometheus scrapes repeat a value
(dcgm-exporter ``--collect-interval`` 30 s vs a 15 s scrape), which would read as a rate of 0
followed by a doubled rate. Rates here handle all three and are never negative. A sample
that reads below its neighbours while they agree (a counter read as 0 or -5 mid-run) is a bad
read, not a reset: :func:`split_glitches` takes it out, so it is quarantined and its neighbours
keep their rate instead of 1e8-1e11/s across it.
"""

from __future__ import annotations

import polars as pl

WRAP_32 = 2**32
"""Modulus of a 32-bit counter."""

WRAP_MAX_FRACTION = 0.5
"""A drop is read as a 32-bit wrap only when the wrapped increase is under this share of the
counter range; a larger one is a reset (the counter restarted low, e.g. after a driver reload)."""


WRAP_RATE_SLACK = 10.0
"""A drop of a 32-bit counter is a wrap only when the rate it implies is at most this many
times the series' median rate: traffic bursts between samples, but a reset read as a wrap
implies ~2^32 / interval (a 100/s counter reset from 3e9 to 0 read 1.29e8/s, 10^6 times its
rate). A series with no other increase falls back to :data:`WRAP_MAX_FRACTION` alone."""


QUEUE_COUNTERS_32BIT = frozenset({
    "rx_write_requests", "rx_read_requests", "rx_atomic_requests", "out_of_buffer",
    "out_of_sequence", "duplicate_request", "rnr_nak_retry_err", "packet_seq_err",
    "implied_nak_seq_err", "local_ack_timeout_err", "rx_dct_connect",
})
"""mlx5 Q counters, read from firmware as 32-bit values and so wrapping at 2^32 (kernel
``drivers/infiniband/hw/mlx5/counters.c``, ``be32_to_cpu``); congestion counters are 64-bit."""

NIC_SERIES = ["host", "device", "port", "counter"]
"""What names one RDMA NIC counter series."""


GLITCH_REASON = "counter reads below its neighbours (a bad read, not a reset)"
"""The quarantine reason of a sample :func:`split_glitches` takes out."""


def split_glitches(frame: pl.DataFrame, series: list[str], ts: str = "ts_ns",
                   value: str = "value") -> tuple[pl.DataFrame, pl.DataFrame]:
    """``frame`` as (plausible, glitches), sorted by series and time: a glitch is a negative
    counter value, or a sample below the one before while the one after is back at or above
    that one (a bad read between two that agree; a reset stays low)."""
    ordered = frame.sort([*series, ts])
    previous = pl.col(value).shift(1).over(series)
    following = pl.col(value).shift(-1).over(series)
    glitch = (pl.col(value) < 0) | ((pl.col(value) < previous) & (following >= previous))
    flagged = ordered.with_columns(glitch.fill_null(False).alias("_glitch"))
    return (flagged.filter(~pl.col("_glitch")).drop("_glitch"),
            flagged.filter(pl.col("_glitch")).drop("_glitch"))


def collapse_repeats(frame: pl.DataFrame, series: list[str], ts: str = "ts_ns",
                     value: str = "value") -> pl.DataFrame:
    """Drop duplicate samples of counters: the same series at the same time (overlapping dumps,
    a scrape stamped with the exporter's update time) and runs of an unchanged value, of which
    the first is kept, plus the last sample of each series so its time span survives."""
    ordered = frame.unique([*series, ts], keep="last", maintain_order=True).sort([*series, ts])
    previous = pl.col(value).shift(1).over(series)
    is_last = pl.int_range(pl.len()).over(series) == pl.len().over(series) - 1
    keep = previous.is_null() | (pl.col(value) != previous) | is_last
    return ordered.filter(keep)


def counter_rates(frame: pl.DataFrame, series: list[str], ts: str = "ts_ns",
                  value: str = "value", width_bits: pl.Expr | None = None,
                  rate: str = "rate_per_s") -> pl.DataFrame:
    """Add ``rate`` (increase per second since the previous sample of the same series).

    The rate is null on a series' first sample and across a reset; a drop on a counter whose
    ``width_bits`` is 32 is a wrap when the wrapped increase is plausible for its range
    (:data:`WRAP_MAX_FRACTION`) and for the series' own rate (:data:`WRAP_RATE_SLACK`).
    Sorts by series and time.
    """
    ordered = frame.sort([*series, ts])
    current = pl.col(value).cast(pl.Float64)
    previous = current.shift(1).over(series)
    dt_ns = (pl.col(ts) - pl.col(ts).shift(1).over(series)).cast(pl.Float64)
    wrapped = current + WRAP_32 - previous
    is_32 = (width_bits == 32) if width_bits is not None else pl.lit(False)
    typical = (pl.when(current >= previous).then((current - previous) * 1e9 / dt_ns)
               .median().over(series))
    plausible = typical.is_null() | (wrapped * 1e9 / dt_ns <= WRAP_RATE_SLACK * typical)
    increase = (
        pl.when(current >= previous).then(current - previous)
        .when(is_32 & (previous < WRAP_32) & (wrapped < WRAP_32 * WRAP_MAX_FRACTION) & plausible)
        .then(wrapped)
    )
    return ordered.with_columns(
        pl.when(dt_ns > 0).then(increase * 1e9 / dt_ns).alias(rate)
    )


def shares_of_increase(parts: dict[str, str], total: str, over: str) -> list[pl.Expr]:
    """Per output name in ``parts``: 100 x its column's increase over ``total``'s since the
    previous row of the same ``over`` group (rows sorted by time), the busy share of CPU time
    from cumulative seconds. Null where the total did not grow or any part fell (a counter
    reset: no share can be read across it)."""
    delta = {c: pl.col(c).diff().over(over) for c in [*parts.values(), total]}
    valid = delta[total] > 0
    for column in parts.values():
        valid &= delta[column] >= 0
    return [pl.when(valid).then(100 * delta[column] / delta[total]).alias(name)
            for name, column in parts.items()]


def nic_counter_rates(samples: pl.DataFrame) -> pl.DataFrame:
    """RDMA NIC counter samples (ts_ns, host, device, port, counter, value) with
    ``rate_per_s``: repeats collapsed, 32-bit wraps for the Q counters. One definition for the
    rates of one file at ingest and for those across every file of a job in attribution."""
    width = pl.when(pl.col("counter").is_in(list(QUEUE_COUNTERS_32BIT))).then(32).otherwise(64)
    return counter_rates(collapse_repeats(samples, NIC_SERIES), NIC_SERIES, width_bits=width)

"""Monotonic counters to per-second rates, the way an operator reads them.

Hardware counters restart at 0 when a driver reloads or an HCA resets, and mlx5 queue counters
are read as 32-bit values (kernel ``drivers/infiniband/hw/mlx5/counters.c``, ``be32_to_cpu``)
so they wrap at 2^32. Exporters that sample slower than Prometheus scrapes repeat a value
(dcgm-exporter ``--collect-interval`` 30 s vs a 15 s scrape), which would read as a rate of 0
followed by a doubled rate. Rates here handle all three and are never negative.
"""

from __future__ import annotations

import polars as pl

WRAP_32 = 2**32
"""Modulus of a 32-bit counter."""

WRAP_MAX_FRACTION = 0.5
"""A drop is read as a 32-bit wrap only when the wrapped increase is under this share of the
counter range; a larger one is a reset (the counter restarted low, e.g. after a driver reload)."""


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
    ``width_bits`` is 32 is a wrap when the wrapped increase is plausible (see
    :data:`WRAP_MAX_FRACTION`). Sorts by series and time.
    """
    ordered = frame.sort([*series, ts])
    current = pl.col(value).cast(pl.Float64)
    previous = current.shift(1).over(series)
    dt_ns = (pl.col(ts) - pl.col(ts).shift(1).over(series)).cast(pl.Float64)
    wrapped = current + WRAP_32 - previous
    is_32 = (width_bits == 32) if width_bits is not None else pl.lit(False)
    increase = (
        pl.when(current >= previous).then(current - previous)
        .when(is_32 & (previous < WRAP_32) & (wrapped < WRAP_32 * WRAP_MAX_FRACTION))
        .then(wrapped)
    )
    return ordered.with_columns(
        pl.when(dt_ns > 0).then(increase * 1e9 / dt_ns).alias(rate)
    )

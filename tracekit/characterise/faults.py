"""Node fault traces of a training cluster: how long faults last and how often nodes relapse.

Works on the events :func:`tracekit.ingest.fault_trace.load_fault_trace` reads. A fault is the
pairing of the k-th start with the k-th end of the same node and fault type; a start without an
end is a fault still open when the trace stops.
"""

from __future__ import annotations

import polars as pl

HOURS_PER_DAY = 24.0


def fault_intervals(events: pl.DataFrame) -> pl.DataFrame:
    """One row per fault: node, type, start and end (days; end null while open) and duration
    in hours. Ends without a start are dropped."""
    keys = ["node", "level", "fault_class", "desc"]
    numbered = (events.with_row_index("order").sort("t_day", "order")
                .with_columns(k=pl.int_range(pl.len()).over([*keys, "event"])))
    starts = numbered.filter(pl.col("event") == "fault_start").select(
        *keys, "k", pl.col("t_day").alias("start_day"))
    ends = numbered.filter(pl.col("event") == "fault_end").select(
        *keys, "k", pl.col("t_day").alias("end_day"))
    return (starts.join(ends, on=[*keys, "k"], how="left")
            .with_columns(duration_h=(pl.col("end_day") - pl.col("start_day")) * HOURS_PER_DAY)
            .drop("k").sort("start_day", "node"))


def duration_summary(intervals: pl.DataFrame, by: str = "fault_class") -> pl.DataFrame:
    """Faults, median, mean and 90th percentile duration (hours) per ``by``, most frequent
    first."""
    return (intervals.group_by(by).agg(
        faults=pl.len(),
        median_h=pl.col("duration_h").median(),
        mean_h=pl.col("duration_h").mean(),
        p90_h=pl.col("duration_h").quantile(0.9, interpolation="linear"),
    ).sort(["faults", by], descending=[True, False]))


def recurrence_per_node(intervals: pl.DataFrame) -> pl.DataFrame:
    """Per node: faults, distinct fault classes, days between consecutive fault starts
    (median; null for a single fault) and the share of the trace it spent faulty."""
    span_days = intervals["end_day"].max() - intervals["start_day"].min()
    return (intervals.sort("start_day").group_by("node").agg(
        faults=pl.len(),
        classes=pl.col("fault_class").n_unique(),
        median_gap_days=pl.col("start_day").diff().median(),
        faulty_share=(pl.col("duration_h").sum() / HOURS_PER_DAY / span_days),
    ).sort(["faults", "node"], descending=[True, False]))


def fault_count_distribution(recurrence: pl.DataFrame) -> pl.DataFrame:
    """How many nodes had k faults, with the cumulative share of nodes (a relapse profile)."""
    counts = recurrence.group_by("faults").agg(nodes=pl.len()).sort("faults")
    return counts.with_columns(cumulative_share=pl.col("nodes").cum_sum() / pl.col("nodes").sum())


def relapse_share(intervals: pl.DataFrame, within_days: float) -> float:
    """Share of faults followed by another fault on the same node within ``within_days``
    of its end: how often a repaired node comes back."""
    following = intervals.sort("start_day").with_columns(
        next_start=pl.col("start_day").shift(-1).over("node"))
    relapsed = (following["next_start"] - following["end_day"]) <= within_days
    return float(relapsed.fill_null(False).mean())

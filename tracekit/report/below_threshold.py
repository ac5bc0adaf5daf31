"""Slowdowns too small to be a fail-slow, reported as such instead of "no fail-slow".

A job whose one slow GPU costs it 4 % from some iteration on is no fail-slow by the 10 % rule,
but "the job ran at its own pace" hides a change an operator wants to see. The verdict's BOCD
finds such a level change and its verification drops it for its size; this module takes those
job-level change points back from the ``events`` table: a rise of at least
:data:`MIN_CHANGE` that lasts as long as the verification asks of any change (its
:data:`~tracekit.detect.bocd_verify.CONFIRM_POINTS` logged points: dropped for its size alone,
not as a burst) and lies outside every shown episode, with what it cost over the iterations it
held. Not a fail-slow's 20 iterations: a change under the threshold is no fail-slow whatever
its length, and a short log's small step would go unseen.
"""

from __future__ import annotations

import polars as pl

from tracekit.core.thresholds import SUSPECT_RATIO
from tracekit.detect.bocd_verify import CONFIRM_POINTS
from tracekit.report.series import SeriesAxis

MIN_CHANGE = 0.02
"""Rises smaller than 2 % are not reported: real jobs jitter 1-3 % from iteration to iteration,
and a level change inside that is not one an operator can act on."""

UNVERIFIED_EVENTS = {"bocd+b": "bocd", "bocd+v": "bocd"}
"""Whose change points hold the small changes of a verified detector: the plain BOCD run that
``bocd+b`` and ``bocd+v`` verify (their own events keep only the changes that passed)."""

COLUMNS = {"iteration": pl.Int64, "ts_ns": pl.Int64, "ratio": pl.Float64,
           "iterations": pl.Int64, "to_end": pl.Boolean, "lost": pl.Float64,
           "share": pl.Float64}


def job_series(iterations: pl.DataFrame) -> pl.DataFrame:
    """The job-level series the detectors judge: per iteration, the median over ranks."""
    return (iterations.filter(pl.col("duration_s").is_finite())
            .group_by("iteration").agg(pl.col("duration_s").median())
            .sort("iteration"))


def below_threshold_changes(events: pl.DataFrame, iterations: pl.DataFrame,
                            episodes: pl.DataFrame, detector: str) -> pl.DataFrame:
    """Job-level rises of ``detector``'s change points (or the unverified BOCD's) between
    :data:`MIN_CHANGE` and the fail-slow threshold, held for at least :data:`CONFIRM_POINTS`
    points and outside ``episodes``: iteration, ts_ns, ratio, iterations held (logged), whether
    to the end of the log, the time lost in the series' unit and its share of the logged
    time."""
    source = UNVERIFIED_EVENTS.get(detector, detector)
    changes = (events.filter(pl.col("detector") == source, pl.col("rank").is_null())
               .sort("iteration"))
    series = job_series(iterations)
    if changes.is_empty() or series.is_empty():
        return pl.DataFrame(schema=COLUMNS)
    total = series["duration_s"].sum()
    ends = changes["iteration"].shift(-1).to_list()
    rows = []
    for row, end in zip(changes.iter_rows(named=True), ends, strict=True):
        if not 1 + MIN_CHANGE <= row["ratio"] < SUSPECT_RATIO:
            continue
        held = series.filter(pl.col("iteration") >= row["iteration"],
                             pl.col("iteration") < end if end is not None else pl.lit(True))
        if held.height < CONFIRM_POINTS or _covered(episodes, held):
            continue
        lost = float((held["duration_s"] - row["before_s"]).sum())
        rows.append({"iteration": row["iteration"], "ts_ns": row["ts_ns"],
                     "ratio": row["ratio"], "iterations": held.height, "to_end": end is None,
                     "lost": lost, "share": lost / total if total else None})
    return pl.DataFrame(rows, schema=COLUMNS)


def _covered(episodes: pl.DataFrame, held: pl.DataFrame) -> bool:
    """Whether a shown episode overlaps the iterations a change held."""
    first, last = held["iteration"].min(), held["iteration"].max()
    return episodes.filter(pl.col("start_iteration") <= last,
                           pl.col("end_iteration") >= first).height > 0


def below_threshold_sentence(row: dict, axis: SeriesAxis) -> str:
    """``The job ran x1.04 from iteration 1008 (10 iterations, to the end of the log), below
    the fail-slow threshold x1.10: not a fail-slow, but it cost 46.1 s (2.4 % of the job).``"""
    held = f"{row['iterations']} {axis.noun()}s" + (", to the end of the log"
                                                     if row["to_end"] else "")
    return (f"The job ran x{row['ratio']:.2f} from {axis.at(row['iteration'], row['ts_ns'])} "
            f"({held}), below the fail-slow threshold x{SUSPECT_RATIO:.2f}: not a fail-slow, "
            f"but {axis.cost(row['lost'], row['share'])}.")

"""How a job's iteration series is measured, so that a report says only what the data can tell.

Real traces differ in three ways the simulated dumps never do: many carry steps but no wall
clock (what-if op traces, per-worker step tables, Megatron logs before core_v0.6); some step
tables are normalised (Alibaba PAI scales each job's times to 0..1000, so values are ratios,
not seconds); and many log a sample of the steps (a what-if trace keeps a few dozen steps of a
long run, a step table samples every 10 s); and some number their rows by sample time, not by
iteration (the Alibaba PAI table's "step" is the second a worker's batch time was sampled at).
A report built on :class:`SeriesAxis` places a stretch by clock time when there is one and by
iteration (or sample second) otherwise, states durations and costs in seconds only when the
values are seconds, and states the job's share (JCT) only when every iteration is logged;
otherwise it says which of these it cannot give.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import polars as pl

from tracekit.core.dataset import SAMPLE_SECONDS, Dataset

NORMALISED = "normalised"
"""``iterations.quality`` of a step time without a unit (a step table's ``duration_unit``)."""

INTERVAL_MEAN = "interval-mean"
"""``iterations.quality`` of a mean over a log interval (Megatron's ``elapsed time per
iteration`` every ``log-interval`` iterations): the line stands for every iteration since the
previous line, so a log of them covers its run even though only one in N is printed."""


@dataclass(frozen=True)
class SeriesAxis:
    """What a job's iterations allow a report to say."""

    clock: bool
    """Iterations carry wall-clock start and end times."""
    seconds: bool
    """Durations are seconds (not normalised)."""
    logged: int
    """Distinct iterations in the table."""
    first: int | None
    last: int | None
    covered: int
    """Iterations the logged ones stand for (an interval mean stands for its interval)."""
    ranks: int
    """Ranks with their own series (0: one job-level series)."""
    sample_seconds: bool = False
    """The ``iteration`` numbers are the seconds the step times were sampled at, not
    iterations (a source recorded :data:`~tracekit.core.dataset.SAMPLE_SECONDS`)."""

    @property
    def span(self) -> int:
        """Iterations from the first logged to the last, both included."""
        return 0 if self.first is None else self.last - self.first + 1

    @property
    def sampled(self) -> bool:
        """Some iterations between the first and the last are not in the log."""
        return self.covered < self.span

    @property
    def coverage(self) -> float | None:
        """Share of the run's iterations (first to last) that the log stands for."""
        return self.covered / self.span if self.span else None

    @property
    def whole_job(self) -> bool:
        """A cost can be given in seconds and as a share of the job's completion time."""
        return self.seconds and not self.sampled

    def at(self, iteration: int | None, t_ns: int | None) -> str:
        """Where a stretch starts: ``09:04:15 UTC`` on a clock, else ``iteration 2161`` (or
        ``second 2161`` of sample seconds)."""
        if self.clock and t_ns is not None:
            return datetime.fromtimestamp(t_ns / 1e9, UTC).strftime("%H:%M:%S UTC")
        step = "second" if self.sample_seconds else "iteration"
        return f"{step} {iteration}" if iteration is not None else f"an unknown {step}"

    def value(self, value: float | None, digits: int = 3) -> str:
        """A step time in the series' own unit: ``2.211 s`` or ``831 on the normalised
        scale``."""
        if value is None:
            return "-"
        return f"{value:.{digits}f} s" if self.seconds else f"{value:.0f} on the normalised scale"

    def noun(self) -> str:
        """What one logged iteration is called in a sentence."""
        if self.sample_seconds:
            return "sample"
        return "logged iteration" if self.sampled else "iteration"

    @property
    def span_name(self) -> str:
        """What a table's ``first-last`` column of a stretch counts."""
        return "seconds" if self.sample_seconds else "iterations"

    def cost(self, lost: float | None, share: float | None) -> str:
        """What a slowdown cost, as a clause in the series' unit: seconds and the job's share
        when every iteration is logged in seconds; else the share of the logged steps' time,
        and why no more can be said."""
        if lost is None:
            return "its cost was not measured"
        if self.whole_job:
            return f"it cost {lost:.1f} s" + (f" ({100 * share:.1f} % of the job)"
                                              if share is not None else "")
        logged = f"{100 * share:.1f} % of the logged steps' time" if share is not None else None
        if not self.seconds:
            return f"it cost {logged}" if logged else "its cost in time is not known (normalised)"
        steps = "samples" if self.sample_seconds else "iterations"
        return f"it cost {lost:.1f} s over the logged {steps}" + (f" ({logged})" if logged else "")

    def counted(self, episode: dict) -> int | None:
        """An episode's length as :meth:`noun` counts it: its logged points on a gapped log
        (``iterations`` there counts the iterations those points stand for)."""
        if self.sampled and episode.get("points") is not None:
            return episode["points"]
        return episode.get("iterations")

    def coverage_sentence(self) -> str | None:
        """How much of the run a gapped log covers, and what that leaves unknown; None when
        every iteration is logged."""
        if not self.sampled:
            return None
        if self.sample_seconds:
            every = self.span / self.logged
            return (f"The log holds {self.logged:,} samples over the {self.span:,} seconds from "
                    f"{self.first} to {self.last} (one every {every:.1f} seconds): slowdowns and "
                    "the time they span are those sampled; what happened between the samples, "
                    "and so the whole job's lost time, is not in the log.")
        return (f"The log holds {self.logged:,} of the {self.span:,} iterations from "
                f"{self.first} to {self.last} ({100 * self.coverage:.1f} % of them): slowdowns "
                "and the iterations they span are those logged; what happened between them, "
                "and so the whole job's lost time, is not in the log.")

    def units_sentence(self) -> str | None:
        """What normalised step times leave out; None for seconds."""
        if self.seconds:
            return None
        return ("Step times are normalised (no unit): slowdowns are ratios and costs shares of "
                "the logged steps' time, never seconds or a share of the job's completion time.")


def dataset_axis(dataset: Dataset) -> SeriesAxis:
    """The axis of a dataset's iterations, numbered as its sources say
    (:meth:`~tracekit.core.dataset.Dataset.step_axis`)."""
    return series_axis(dataset.table("iterations").collect(),
                       dataset.step_axis() == SAMPLE_SECONDS)


def series_axis(iterations: pl.DataFrame, sample_seconds: bool = False) -> SeriesAxis:
    """The axis of a job's ``iterations`` table (any sources); ``sample_seconds``: its
    iteration numbers are sample times in seconds."""
    timed = iterations.filter(pl.col("t_start_ns").is_not_null(), pl.col("t_end_ns").is_not_null())
    logged = (iterations.group_by("iteration")
              .agg((pl.col("quality") == INTERVAL_MEAN).all().alias("interval"))
              .sort("iteration")
              .with_columns(pl.col("iteration").diff().fill_null(1).alias("gap")))
    covered = logged.select(pl.when(pl.col("interval")).then(pl.col("gap")).otherwise(1).sum())
    qualities = set(iterations["quality"].drop_nulls().to_list())
    return SeriesAxis(
        clock=timed.height > 0,
        seconds=NORMALISED not in qualities,
        logged=logged.height,
        first=logged["iteration"].min() if logged.height else None,
        last=logged["iteration"].max() if logged.height else None,
        covered=int(covered.item() or 0),
        ranks=iterations["rank"].drop_nulls().n_unique(),
        sample_seconds=sample_seconds,
    )

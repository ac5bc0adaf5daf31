"""An episode's timing, reduced piece by piece: what its verdict reads of the collective
instances and own times in its windows, without ever holding them whole.

The pieces are the parts pass 2 and pass 1 left (:class:`.job_signals.JobSignals`): the
instances of one bin of whole communicator groups and the own times of one batch of ranks.
A group has at most one instance per call of a member, so a bin's cut of an episode holds at
most its calls (about a window's) or one rank's calls (a group larger than a bin); a batch's
own times are its ranks' calls. Each piece is reduced as it is read: instance counts and each
rank's arrivals are sums, each group's median transfer time is exact within its bin (a group
lies in one bin) and each rank's binned own-time share within its batch (a rank lies in one
batch); only the ratio to the median rank is taken across the pieces. So a verdict holds one
piece at a time, whatever the episode's length.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import polars as pl

from tracekit.attribute.arrival import (
    SKEW_SCHEMA,
    arrival_skew,
    own_time_change,
    skew_change,
)
from tracekit.attribute.evidence import Window
from tracekit.attribute.job_signals import JobSignals
from tracekit.attribute.profiling import group_times, suspect_groups


@dataclass(frozen=True)
class EpisodeTiming:
    """The timing signals of one episode: instance counts in the episode and before it, each
    rank's arrival skew (:func:`.arrival.skew_change`), each group's transfer time against
    its cluster and its own before (:func:`.profiling.suspect_groups`), and each rank's
    own-time change (:func:`.arrival.own_time_change`; None when the calls have no end
    times)."""

    instances_during: int
    instances_before: int
    skew: pl.DataFrame
    groups: pl.DataFrame
    own: pl.DataFrame | None


def episode_timing(job: JobSignals, window: Window, ranks: pl.DataFrame) -> EpisodeTiming:
    """The timing of ``window`` from ``job``'s parts, one part at a time; ``ranks`` (rank,
    host, cuda_dev) are those whose own times count."""
    during, before = (window.start_ns, window.end_ns), (window.before_start_ns, window.start_ns)
    counts, skews, times = [0, 0], ([], []), ([], [])
    for part in job.instance_parts:
        one = replace(job, instance_parts=[part])
        # the episode's and the baseline's instances are read apart: cutting one frame of
        # both would hold the part's cut twice while they are cut
        for index, span in enumerate((during, before)):
            instances = one.instances(*span)
            counts[index] += instances.height
            skews[index].append(arrival_skew(instances))
            times[index].append(group_times(instances))
    # the job's first own time tells that the calls have end times when none fall in the
    # windows (the verdict then finds no own-time change, not "issue times only")
    own, timed_calls = [], job.any_gap.height
    for part in job.gap_parts:
        gaps = replace(job, gap_parts=[part]).gaps(before[0], during[1])
        timed_calls += gaps.height
        own.append(own_time_change(gaps, ranks, during, before))
    return EpisodeTiming(
        counts[0], counts[1],
        skew_change(*(_summed(frames) for frames in skews),
                    (during[1] - during[0]) / 1e9, (before[1] - before[0]) / 1e9),
        suspect_groups(*(pl.concat(frames) for frames in times)),
        (pl.concat(own).with_columns((pl.col("ratio") / pl.col("ratio").median())
                                     .alias("relative")).sort("rank")
         if timed_calls else None))


def _summed(skews: list[pl.DataFrame]) -> pl.DataFrame:
    """The :func:`.arrival.arrival_skew` of all the pieces' instances from each piece's."""
    return (pl.concat(skews).group_by("rank")
            .agg(pl.col("instances", "last", "blame_s").sum())
            .with_columns((pl.col("last") / pl.col("instances")).alias("last_share"))
            .select(list(SKEW_SCHEMA)).cast(SKEW_SCHEMA).sort("rank"))

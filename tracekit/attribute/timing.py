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
piece at a time, whatever the episode's length. Windows that nearly coincide read each piece
once for all of them (:func:`shared_reads`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

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
    members: pl.DataFrame
    """group and members of every group with instances in the episode: the rings whose links
    the job uses."""


SHARED_READ = 1.25
"""Windows are decided together (:func:`episode_timings`) while the time they read together
is at most this much of the shortest one's, so a part's cut read for them all spans at most this
much of what one window reads. Detectors that agree on an episode but not to the iteration (the
window detector ending one later) give windows that nearly coincide, and each alone read and
reduced the job's cut again (64 ranks x 1,000 iterations: 0.63 CPU-s a window)."""


def shared_reads(windows: Iterable[Window]) -> list[list[Window]]:
    """``windows`` in the groups :func:`episode_timings` reads together (:data:`SHARED_READ`),
    in the order they start reading."""
    groups: list[list[Window]] = []
    for window in sorted(windows, key=lambda w: w.reach):
        joined = [*groups[-1], window] if groups else [window]
        if groups and _read_ns(joined) <= SHARED_READ * min(_read_ns([w]) for w in joined):
            groups[-1].append(window)
        else:
            groups.append([window])
    return groups


def _read_ns(windows: Sequence[Window]) -> int:
    """How long a stretch of time ``windows`` read together: their baselines and episodes."""
    return max(w.reach[1] for w in windows) - min(w.reach[0] for w in windows)


def episode_timings(job: JobSignals, windows: Sequence[Window],
                    ranks: pl.DataFrame) -> list[EpisodeTiming]:
    """The timing of each of ``windows`` from ``job``'s parts, one part at a time, each read
    once for all the windows (:func:`shared_reads`); ``ranks`` (rank, host, cuda_dev) are
    those whose own times count."""
    # Each window has two sides, its episode and its baseline. Every part of the
    # instances is read once per side for all the windows together and each window's cut of
    # it is reduced on the spot (_Side.add); the own times likewise, per part of gaps. Only
    # then are the reductions of all the parts combined into one timing per window.
    tallies = [_Tally(_Side(w.start_ns, w.end_ns, keeps_members=True),
                      _Side(*w.baseline)) for w in windows]
    for part in job.instance_parts:
        one = replace(job, instance_parts=[part])
        # the episodes' and the baselines' instances are read apart: cutting one frame of
        # both would hold the part's cut twice while they are cut
        for sides in ([t.during for t in tallies], [t.before for t in tallies]):
            instances = one.instances(min(s.start_ns for s in sides),
                                      max(s.end_ns for s in sides))
            for side in sides:
                side.add(_between(instances, side.start_ns, side.end_ns))
    # the job's first own time tells that the calls have end times (when none fall in the
    # windows, the verdict then finds no own-time change, not "issue times only")
    timed = job.any_gap.height > 0
    if timed:
        for part in job.gap_parts:
            gaps = replace(job, gap_parts=[part]).gaps(
                min(w.reach[0] for w in windows), max(w.reach[1] for w in windows))
            for tally in tallies:
                tally.own.append(own_time_change(gaps, ranks, tally.during.span,
                                                 tally.before.span))
    return [tally.timing(timed) for tally in tallies]


@dataclass
class _Side:
    """One side of a window, ``[start_ns, end_ns)``: the reductions of its cut of each part
    read so far, and (for an episode) the groups seen in it with their members."""

    start_ns: int
    end_ns: int
    keeps_members: bool = False
    instances: int = 0
    skews: list[pl.DataFrame] = field(default_factory=list)
    """:func:`.arrival.arrival_skew` of each part's cut."""
    times: list[pl.DataFrame] = field(default_factory=list)
    """:func:`.profiling.group_times` of each part's cut (exact: a group lies in one part)."""
    members: list[pl.DataFrame] = field(default_factory=list)

    @property
    def span(self) -> tuple[int, int]:
        return self.start_ns, self.end_ns

    @property
    def seconds(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9

    def add(self, cut: pl.DataFrame) -> None:
        """Reduce one part's instances in this side."""
        self.instances += cut.height
        self.skews.append(arrival_skew(cut))
        self.times.append(group_times(cut))
        if self.keeps_members and cut.height:
            self.members.append(cut.unique("group").select("group", "members"))


@dataclass
class _Tally:
    """What one window has gathered from the parts: its two sides and each gap part's
    :func:`.arrival.own_time_change`."""

    during: _Side
    before: _Side
    own: list[pl.DataFrame] = field(default_factory=list)

    def timing(self, timed: bool) -> EpisodeTiming:
        """The parts' reductions combined; own times only when the calls have end times."""
        return EpisodeTiming(
            self.during.instances, self.before.instances,
            skew_change(_summed(self.during.skews), _summed(self.before.skews),
                        self.during.seconds, self.before.seconds),
            suspect_groups(pl.concat(self.during.times), pl.concat(self.before.times)),
            _relative_own(self.own) if timed else None,
            (pl.concat(self.during.members).unique("group").sort("group")
             if self.during.members
             else pl.DataFrame(schema={"group": pl.Int64, "members": pl.List(pl.Int32)})))


def _relative_own(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """The gap parts' own-time changes as one, ``relative`` taken again against the median
    rank of all of them (each part's was against its own batch's)."""
    return (pl.concat(parts).with_columns((pl.col("ratio") / pl.col("ratio").median())
                                          .alias("relative")).sort("rank"))


def _between(instances: pl.DataFrame, start_ns: int, end_ns: int) -> pl.DataFrame:
    """The instances starting in ``[start_ns, end_ns)`` of ``instances`` sorted by start: a
    slice, no copy."""
    if instances.is_empty():
        return instances
    first, end = instances["t_ns"].search_sorted(pl.Series([start_ns, end_ns]), side="left")
    return instances.slice(first, end - first)


def _summed(skews: list[pl.DataFrame]) -> pl.DataFrame:
    """The :func:`.arrival.arrival_skew` of all the pieces' instances from each piece's."""
    return (pl.concat(skews).group_by("rank")
            .agg(pl.col("instances", "last", "blame_s").sum())
            .with_columns((pl.col("last") / pl.col("instances")).alias("last_share"))
            .select(list(SKEW_SCHEMA)).cast(SKEW_SCHEMA).sort("rank"))

"""Evidence windows per run of slowness: the stretch a verdict judges and its healthy baseline.

A detector can split one slow stretch into episodes a few iterations apart (a congestion that
eases for a moment). Judged alone, the second one's baseline would be the first, where the
link already surged, and neither would hold enough of the surge to name it. Detectors also
disagree on a stretch: one sees a slowdown under the fail-slow threshold that another leaves
out, and the second's baseline then reaches into it (a thermal GPU "already throttled before").
So the episodes of every detector separated by less than :data:`NEIGHBOUR_GAP_ITERATIONS`
healthy iterations form one run, every episode of a run is judged on the whole run, and the
run's baseline is the healthy time before its first episode: at most :data:`BASELINE_SPAN`
run lengths, never reaching into the previous run nor the warm-up; after a gap too short to
measure (:data:`MEASURABLE_GAP_NS`), the previous run's. Where that leaves too little
(:data:`MIN_BASELINE_SHARE`: a run right after the warm-up), the baseline is the time after
the run, up to the next. A persistent straggler (slow all run, :mod:`tracekit.detect.peers`)
is no stretch of slowness: its episodes form runs of their own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import polars as pl

from tracekit.attribute.evidence import SCRAPE_NS, Window

BASELINE_SPAN = 4.0
"""The baseline is at most this many run lengths of time right before the run."""

MIN_BASELINE_SHARE = 0.25
"""A baseline before the run shorter than this share of the run holds too few collectives and
scrapes to compare with (a fail-slow right after the warm-up had 13 matched collectives before
it, where a verdict needs 20): the healthy time after the run is taken instead, when longer.
A quarter keeps the healthy gap that separates two runs (:data:`NEIGHBOUR_GAP_ITERATIONS`)
the baseline of a fail-slow up to four times as long."""

NEIGHBOUR_GAP_ITERATIONS = 20
"""Episodes closer than this many iterations are one run: a healthy stretch shorter than a
fail-slow (the labels' 20 iterations) is too short to be anyone's baseline."""

MEASURABLE_GAP_NS = 2 * SCRAPE_NS
"""A healthy stretch between two runs shorter than two of Prometheus' usual 15 s scrapes holds
at most one scrape, whose rate still covers the run before it (20 iterations of 0.7 s between
two congestions: 14 s, and "no link's congestion notifications moved" for the second): the
later run takes the earlier one's baseline. Time, not iterations: a job of fast iterations has
many between two faults, and each keeps its own verdict."""


@dataclass(frozen=True)
class Run:
    """The slow stretch ``[start_ns, end_ns)`` an episode belongs to (``end_ns`` None: to the
    trace end), the end of the previous run and the start of the next (None where there is
    none), and where its healthy time before ends (None: at its start; an earlier run's start
    when the gap after that one is too short to measure, :data:`MEASURABLE_GAP_NS`)."""

    start_ns: int
    end_ns: int | None
    previous_end_ns: int | None
    next_start_ns: int | None = None
    healthy_until_ns: int | None = None

    @property
    def healthy_end_ns(self) -> int:
        """Where the healthy time before the run ends."""
        return self.start_ns if self.healthy_until_ns is None else self.healthy_until_ns

    def healthy_by(self, until_ns: int) -> Run:
        """The run with its healthy time before ending by ``until_ns`` at the latest."""
        return replace(self, healthy_until_ns=min(self.healthy_end_ns, until_ns))

    def widest(self, usable_from_ns: int | None) -> tuple[int | None, int | None]:
        """Everything the run's window can hold before the trace end is known, its baseline
        usable from ``usable_from_ns`` (the warm-up's end; None: unknown, so the baseline may
        lie on either side); unbounded when the run lasts to the trace end."""
        if self.end_ns is None:
            return None, None
        if usable_from_ns is None:
            before = self._window(self.end_ns, None, None)
            after = self._window(self.end_ns, self.start_ns, None)
            return before.reach[0], after.reach[1]
        return self._window(self.end_ns, usable_from_ns, None).reach

    def window(self, trace_start_ns: int, trace_end_ns: int) -> Window:
        """The run and its baseline, with the trace's first usable time and end."""
        end = self.end_ns if self.end_ns is not None else trace_end_ns
        return self._window(end, trace_start_ns, trace_end_ns)

    def _window(self, end: int, usable_from: int | None, trace_end: int | None) -> Window:
        until = self.healthy_end_ns
        span = int(BASELINE_SPAN * (end - self.start_ns))
        before = min(until, max(b for b in (until - span, self.previous_end_ns, usable_from)
                                if b is not None))
        if until - before < MIN_BASELINE_SHARE * (end - self.start_ns):
            after = min(a for a in (end + span, self.next_start_ns, trace_end) if a is not None)
            if after - end > until - before:
                return Window(self.start_ns, end, end, after)
        return Window(self.start_ns, end, before, until)


def episode_runs(episodes: pl.DataFrame) -> list[Run]:
    """The run of each row of ``episodes`` (detector, t_start_ns, t_end_ns, start_iteration,
    end_iteration and optionally persistent), in row order."""
    persistent = (pl.col("persistent").fill_null(False) if "persistent" in episodes.columns
                  else pl.lit(False))
    rows = episodes.with_row_index("_row").select(
        "_row", "t_start_ns", "t_end_ns", "start_iteration", "end_iteration",
        pl.when(persistent).then(pl.col("detector")).alias("_stretches"))
    runs: dict[int, Run] = {}
    for (_,), mine in rows.sort("t_start_ns").group_by("_stretches", maintain_order=True):
        members: list[dict] = []
        previous = None
        for row in [*mine.iter_rows(named=True), None]:
            if members and (row is None or not _neighbours(members, row)):
                end = (None if any(m["t_end_ns"] is None for m in members)
                       else max(m["t_end_ns"] for m in members))
                run = _after(previous, members[0]["t_start_ns"], end,
                             None if row is None else row["t_start_ns"])
                runs.update({m["_row"]: run for m in members})
                previous, members = run, []
            if row is not None:
                members.append(row)
    return [runs[i] for i in range(episodes.height)]


def _after(previous: Run | None, start: int, end: int | None, next_start: int | None) -> Run:
    """The run ``[start, end)`` that follows ``previous``: its baseline stops at ``previous``,
    or is ``previous``'s where the gap between is too short to measure."""
    if previous is None:
        return Run(start, end, None, next_start)
    if start - previous.end_ns < MEASURABLE_GAP_NS:
        return Run(start, end, previous.previous_end_ns, next_start, previous.healthy_end_ns)
    return Run(start, end, previous.end_ns, next_start)


def _neighbours(members: list[dict], row: dict) -> bool:
    """Whether ``row`` starts within :data:`NEIGHBOUR_GAP_ITERATIONS` of the run so far."""
    ends = [m["t_end_ns"] for m in members]
    if any(end is None for end in ends) or row["t_start_ns"] <= max(ends):
        return True
    last = max(members, key=lambda m: m["t_end_ns"])
    if last["end_iteration"] is None or row["start_iteration"] is None:
        return False
    return row["start_iteration"] - last["end_iteration"] - 1 < NEIGHBOUR_GAP_ITERATIONS

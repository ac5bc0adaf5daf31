"""Evidence windows per run of slowness: the stretch a verdict judges and its healthy baseline.

A detector can split one slow stretch into episodes a few iterations apart (a congestion that
eases for a moment). Judged alone, the second one's baseline would be the first, where the
link already surged, and neither would hold enough of the surge to name it. Detectors also
disagree on a stretch: one sees a slowdown under the fail-slow threshold that another leaves
out, and the second's baseline then reaches into it (a thermal GPU "already throttled before").
So the episodes of every detector separated by less than :data:`NEIGHBOUR_GAP_ITERATIONS`
healthy iterations form one run, every episode of a run is judged on the whole run, and the
run's baseline is the healthy time before its first episode: at most :data:`BASELINE_SPAN` run
lengths, never reaching into the previous run nor the warm-up. A persistent straggler (slow all
run, :mod:`tracekit.detect.peers`) is no stretch of slowness: its episodes form runs of their
own.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from tracekit.attribute.evidence import Window

BASELINE_SPAN = 4.0
"""The baseline is at most this many run lengths of time right before the run."""

NEIGHBOUR_GAP_ITERATIONS = 20
"""Episodes closer than this many iterations are one run: a healthy stretch shorter than a
fail-slow (the labels' 20 iterations) is too short to be anyone's baseline."""


@dataclass(frozen=True)
class Run:
    """The slow stretch ``[start_ns, end_ns)`` an episode belongs to (``end_ns`` None: to the
    trace end), and the end of the previous run (None for the first)."""

    start_ns: int
    end_ns: int | None
    previous_end_ns: int | None

    def widest(self) -> tuple[int | None, int | None]:
        """Everything the run's window can hold before the trace span is known (unbounded
        when the run lasts to the trace end)."""
        if self.end_ns is None:
            return None, None
        return self._baseline_start(self.end_ns), self.end_ns

    def window(self, trace_start_ns: int, trace_end_ns: int) -> Window:
        """The run and its baseline, with the trace's first usable time and end."""
        end = self.end_ns if self.end_ns is not None else trace_end_ns
        return Window(self.start_ns, end, max(trace_start_ns, self._baseline_start(end)))

    def _baseline_start(self, end: int) -> int:
        start = self.start_ns - int(BASELINE_SPAN * (end - self.start_ns))
        return start if self.previous_end_ns is None else max(start, self.previous_end_ns)


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
        previous_end = None
        for row in [*mine.iter_rows(named=True), None]:
            if members and (row is None or not _neighbours(members, row)):
                end = (None if any(m["t_end_ns"] is None for m in members)
                       else max(m["t_end_ns"] for m in members))
                run = Run(members[0]["t_start_ns"], end, previous_end)
                runs.update({m["_row"]: run for m in members})
                previous_end, members = end, []
            if row is not None:
                members.append(row)
    return [runs[i] for i in range(episodes.height)]


def _neighbours(members: list[dict], row: dict) -> bool:
    """Whether ``row`` starts within :data:`NEIGHBOUR_GAP_ITERATIONS` of the run so far."""
    ends = [m["t_end_ns"] for m in members]
    if any(end is None for end in ends) or row["t_start_ns"] <= max(ends):
        return True
    last = max(members, key=lambda m: m["t_end_ns"])
    if last["end_iteration"] is None or row["start_iteration"] is None:
        return False
    return row["start_iteration"] - last["end_iteration"] - 1 < NEIGHBOUR_GAP_ITERATIONS

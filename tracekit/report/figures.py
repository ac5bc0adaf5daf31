"""The report's figures, drawn on ``matplotlib.figure.Figure`` objects (no pyplot state, so
they are safe in libraries, tests and notebooks; a notebook shows one with ``display``).

Every figure has a title, axes with units and a legend, so a reader who did not run the tool
can read it. The job timeline is built for one question, "who slowed the job, and does the
telemetry agree": the culprit is drawn against its peers' median and spread band (one line per
rank is unreadable past a handful, and 1,024 of them is ink), the y-axis follows the typical
iteration so that an evaluation or checkpoint pause cannot flatten a x1.2 slowdown, and the
telemetry panels show the very series the evidence quotes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, PercentFormatter

from tracekit.attribute.evidence import CONGESTION_COUNTERS
from tracekit.characterise.jobs import ecdf
from tracekit.report.verdict import NOT_FOUND, culprits

SPREAD_QUANTILES = (0.05, 0.95)
"""The peers' band: 5th-95th percentile per time step (a min-max band at 1,024 ranks is the
envelope of the two noisiest ranks)."""

AXIS_QUANTILE = 0.98
"""The y-axis spans the peers' median up to this quantile: an interlude (evaluation,
checkpoint) is a few iterations, a fail-slow worth reporting many more than 2 %."""

AXIS_HEADROOM = 1.25
"""Room above the axis quantile (and above each episode's slowed level) before an iteration
counts as off scale."""

BAND_BINS = 400
"""Time bins of a telemetry band: scrapes of many GPUs at slightly different instants share
a bin."""

NS_PER_MIN = 60e9
EPISODE_COLOUR = "#d62728"
PEER_COLOUR = "#1f77b4"
CHANGE_POINT_COLOUR = "#555555"
INTERLUDE_COLOUR = "#7f7f7f"

EVIDENCE_PANELS = (
    ("sm_clock_mhz", "SM clock (MHz)", "SM clock"),
    ("gpu_temp_c", "GPU temperature (°C)", "GPU temperature"),
)
"""GPU metrics shown under the iteration times: thermal throttling shows as a clock drop with a
temperature rise on the culprit GPU."""

def _minutes(column: str, t0_ns: int) -> pl.Expr:
    return ((pl.col(column) - t0_ns) / NS_PER_MIN).alias("t_min")


@dataclass(frozen=True)
class _XAxis:
    """The timeline's x axis: minutes since the job's first iteration when the iterations carry
    a clock, else the iteration number (what-if traces, step tables, Megatron logs without
    timestamps)."""

    clock: bool
    t0_ns: int | None
    steps: str = "iteration"
    """What the iteration numbers count without a clock (``sample second``)."""

    def start(self) -> pl.Expr:
        return (_minutes("t_start_ns", self.t0_ns) if self.clock
                else pl.col("iteration").cast(pl.Float64).alias("t_min"))

    def end(self) -> pl.Expr:
        return (((pl.col("t_end_ns") - self.t0_ns) / NS_PER_MIN) if self.clock
                else pl.col("iteration").cast(pl.Float64) + 1).alias("t_end_min")

    def at(self, ts_ns: int | None, iteration: int | None) -> float | None:
        if self.clock:
            return None if ts_ns is None else (ts_ns - self.t0_ns) / NS_PER_MIN
        return None if iteration is None else float(iteration)

    @property
    def label(self) -> str:
        return ("time since job start (min)" if self.clock
                else f"{self.steps} (no clock in the log)")


def _gaps(values: pl.Series, top: float | None) -> np.ndarray:
    """``values`` with those above ``top`` as NaN: the line breaks there instead of running
    to the edge and back."""
    values = values.to_numpy().astype(float)
    return values if top is None else np.where(values > top, np.nan, values)


def _band(ax: Axes, frame: pl.DataFrame, value: str, step: str, what: str,
          top: float | None = None) -> None:
    """The median and spread band of ``frame``'s ``value`` per ``step`` (a time bin); steps
    whose median is above ``top`` are left out (gaps)."""
    lo, hi = SPREAD_QUANTILES
    banded = (frame.group_by(step).agg(pl.col("t_min").mean(), mid=pl.col(value).median(),
                                       lo=pl.col(value).quantile(lo), hi=pl.col(value).quantile(hi))
              .sort(step))
    off = np.isnan(_gaps(banded["mid"], top))
    ax.fill_between(banded["t_min"], np.where(off, np.nan, banded["lo"]),
                    np.where(off, np.nan, banded["hi"]), color=PEER_COLOUR, alpha=0.25, lw=0,
                    label=f"{what}: {lo:.0%}-{hi:.0%} band")
    ax.plot(banded["t_min"], _gaps(banded["mid"], top), color=PEER_COLOUR, lw=1.0,
            label=f"{what}: median")


def _versus_peers(ax: Axes, frame: pl.DataFrame, value: str, series: str, marked: set[str],
                  noun: str) -> None:
    """Marked series as red lines over the others' median and band."""
    names = frame[series].unique().to_list()
    peers = frame.filter(~pl.col(series).is_in(list(marked)))
    if peers.height:
        span = max(frame["t_min"].max() - frame["t_min"].min(), 1e-9)
        binned = peers.with_columns(
            step=((pl.col("t_min") - frame["t_min"].min()) / span * BAND_BINS).floor())
        _band(ax, binned, value, "step",
              _counted(len(names) - len(set(names) & marked), f"peer {noun}"))
    for name in sorted(set(names) & marked):
        part = frame.filter(pl.col(series) == name).sort("t_min")
        ax.plot(part["t_min"], part[value], color=EPISODE_COLOUR, lw=1.2, label=f"{noun} {name}")


def _counted(count: int, noun: str) -> str:
    """``1 rank``, ``3 ranks``; ``1 series``, ``2 series`` (a legend's count)."""
    return f"{count} {noun}" if count == 1 or noun.endswith("series") else f"{count} {noun}s"


def _rank_series(iterations: pl.DataFrame) -> tuple[pl.DataFrame, str]:
    """Per-rank ACF iterations when present, else the job-level framework series."""
    per_rank = iterations.filter(pl.col("rank").is_not_null())
    if per_rank.height:
        return per_rank.with_columns(series=pl.col("rank").cast(pl.String)), "rank"
    return iterations.with_columns(series=pl.col("source")), "series"


def _iteration_panel(ax: Axes, iterations: pl.DataFrame, episodes: pl.DataFrame,
                     ranks: set[str], x: _XAxis, unit: str) -> None:
    """Culprit ranks against the peers' band, on an axis the interludes do not set; off-scale
    iterations are marked at the top edge with their count and the longest one."""
    series, noun = _rank_series(iterations.filter(pl.col("duration_s").is_finite()))
    series = series.with_columns(x.start(), x.end())
    peers = series.filter(~pl.col("series").is_in(list(ranks)))
    if peers.is_empty():
        peers = series
    median = peers.group_by("iteration").agg(pl.col("t_min").mean(), pl.col("t_end_min").mean(),
                                             pl.col("duration_s").median())
    levels = [AXIS_HEADROOM * median["duration_s"].quantile(AXIS_QUANTILE)]
    levels += [AXIS_HEADROOM * r["baseline_s"] * r["slowdown"]
               for r in episodes.iter_rows(named=True) if r.get("baseline_s") and r.get("slowdown")]
    top = max(levels)
    bottom = min(series["duration_s"].quantile(1 - AXIS_QUANTILE) / AXIS_HEADROOM, top / 2)
    names = series["series"].unique().to_list()
    _band(ax, peers, "duration_s", "iteration",
          _counted(len(names) - len(set(names) & ranks) or len(names), noun), top)
    for name in sorted(set(names) & ranks, key=lambda n: (len(n), n)):
        part = series.filter(pl.col("series") == name).sort("t_min")
        ax.plot(part["t_min"], _gaps(part["duration_s"], top), color=EPISODE_COLOUR, lw=1.2,
                label=f"culprit {noun} {name}")
    off = median.filter(pl.col("duration_s") > top)
    for row in off.iter_rows(named=True):
        ax.axvspan(row["t_min"], row["t_end_min"], color=INTERLUDE_COLOUR, alpha=0.25, lw=0)
    if off.height:
        ax.plot(off["t_min"], np.full(off.height, top), ls="none", marker="v", ms=5,
                color=INTERLUDE_COLOUR, clip_on=False,
                label=f"{off.height} interlude(s) off scale, shaded grey (eval, checkpoint; "
                      f"longest {off['duration_s'].max():.1f} {unit})")
    ax.set_ylim(bottom, top)


def congestion_per_host(nic_counters: pl.DataFrame) -> pl.DataFrame:
    """CNP / ECN rate per host and scrape, summed over its NICs and counters: the number the
    network evidence quotes (``gpu01 CNP 77 -> 937,516/s``)."""
    return (nic_counters.filter(pl.col("counter").is_in(CONGESTION_COUNTERS),
                                pl.col("rate_per_s").is_not_null())
            .group_by("host", "ts_ns").agg(pl.col("rate_per_s").sum()).sort("host", "ts_ns"))


def _telemetry_panels(gpu_metrics: pl.DataFrame, congestion: pl.DataFrame,
                      episodes: pl.DataFrame) -> list[tuple[str, str, str]]:
    """The panels the verdict's evidence reads: GPU clock and temperature for compute causes
    or a named GPU, congestion for communication causes or named hosts; all of them when no
    episode was attributed (or there is none), since then nothing says where to look."""
    kinds = set(episodes["kind"].drop_nulls().to_list()) if "kind" in episodes.columns else set()
    named = culprits(episodes)
    look_everywhere = not kinds or episodes["cause"].null_count() > 0
    panels = []
    if look_everywhere or kinds & {"compute", "compound"} or named["gpu"]:
        panels += [p for p in EVIDENCE_PANELS
                   if gpu_metrics.filter(pl.col("metric") == p[0]).height]
    if congestion.height and (look_everywhere or kinds & {"communication", "compound"}):
        panels.append(("cnp", "CNP rate (/s)", "Congestion notifications per host (as the "
                                               "evidence counts them)"))
    return panels


def iteration_timeline(iterations: pl.DataFrame, events: pl.DataFrame, episodes: pl.DataFrame,
                       gpu_metrics: pl.DataFrame, nic_counters: pl.DataFrame,
                       title: str, small_changes: pl.DataFrame | None = None,
                       unit: str = "s", steps: str = "iteration") -> Figure:
    """Iteration time per rank (culprit against its peers) with change points, changes below
    the fail-slow threshold (dotted) and shaded, labeled episodes; below it, the telemetry the
    evidence reads (SM clock, GPU temperature, CNP rate), the culprit's GPU or hosts against
    their peers. Iterations without a clock are drawn on the iteration axis, without telemetry
    (nothing places its samples among the steps); ``unit`` is the durations' unit, ``steps``
    what the iteration numbers count."""
    clock = iterations["t_start_ns"].is_not_null().all() and iterations["t_end_ns"].is_not_null(
    ).all()
    x = _XAxis(clock, iterations["t_start_ns"].min() if clock else None, steps)
    if not clock:
        gpu_metrics, nic_counters = gpu_metrics.clear(), nic_counters.clear()
    gpu_metrics = gpu_metrics.filter(pl.col("ts_ns").is_not_null())
    congestion = congestion_per_host(nic_counters).with_columns(
        _minutes("ts_ns", x.t0_ns or 0))
    panels = [("iterations", f"iteration time ({unit})", "Iteration time per rank"),
              *_telemetry_panels(gpu_metrics, congestion, episodes)]
    figure = Figure(figsize=(11, 2.2 + 2.0 * len(panels)), layout="constrained")
    axes = figure.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    named = culprits(episodes)
    for ax, (kind, ylabel, panel_title) in zip(axes, panels, strict=True):
        if kind == "iterations":
            _iteration_panel(ax, iterations, episodes, named["rank"], x, unit)
        elif kind == "cnp":
            _versus_peers(ax, congestion, "rate_per_s", "host", named["host"], "host")
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        else:
            metric = (gpu_metrics.filter(pl.col("metric") == kind)
                      .with_columns(_minutes("ts_ns", x.t0_ns),
                                    series=pl.format("{}/{}", "host", "gpu")))
            _versus_peers(ax, metric, "value", "series", named["gpu"], "GPU")
        ax.set_ylabel(ylabel)
        ax.set_title(panel_title, loc="left", fontsize=10)
        ax.grid(alpha=0.3)
    marks = [(events, "--", "change point")]
    if small_changes is not None:
        marks.append((small_changes, ":", "change below the fail-slow threshold"))
    for frame, style, label in marks:
        where = {x.at(row.get("ts_ns"), row.get("iteration"))
                 for row in frame.iter_rows(named=True)}
        for position in sorted(w for w in where if w is not None):
            for ax in axes:
                ax.axvline(position, color=CHANGE_POINT_COLOUR, ls=style, lw=0.8)
        if frame.height:
            axes[0].plot([], [], color=CHANGE_POINT_COLOUR, ls=style, lw=0.8, label=label)
    t_last = iterations.select(x.end()).to_series().max()
    for number, row in enumerate(episodes.iter_rows(named=True)):
        start = x.at(row.get("t_start_ns"), row.get("start_iteration"))
        last = row.get("end_iteration")
        end = x.at(row.get("t_end_ns"), None if last is None else last + 1)
        if start is None:
            continue
        for ax in axes:
            ax.axvspan(start, t_last if end is None else end, color=EPISODE_COLOUR, alpha=0.10,
                       lw=0)
        axes[0].annotate(_episode_label(row), xy=(start, 1.0), xycoords=("data", "axes fraction"),
                         xytext=(3, -12 - LABEL_STEP * (number % LABEL_ROWS)),
                         textcoords="offset points", fontsize=9,
                         color=EPISODE_COLOUR, fontweight="bold")
    if episodes.height:
        axes[0].fill_between([], [], color=EPISODE_COLOUR, alpha=0.10, label="fail-slow episode")
    for ax in axes:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0), frameon=False)
    axes[-1].set_xlabel(x.label)
    if not x.clock:
        axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))
    figure.suptitle(title)
    return figure


LABEL_ROWS = 3
LABEL_STEP = 11
"""Episode labels step down by this many points over this many rows, so that the labels of
nearby episodes do not print over each other."""


def _episode_label(row: dict) -> str:
    cause = row.get("cause") or "not attributed"
    cause = "cause unknown" if cause in NOT_FOUND else cause
    target = f" @ {row['target']}" if row.get("target") else ""
    slowdown = f" x{row['slowdown']:.2f}" if row.get("slowdown") is not None else ""
    return f"#{row['episode']} {cause}{target}{slowdown}"


MULTIPLES_MIN_HOSTS = 4
"""From this many hosts a job report adds small multiples of the SM clock per host: the band
of the timeline says *that* a GPU left its peers, the grid says where, host by host."""

MULTIPLES_COLUMNS = 8
"""Panels per row of the per-host grid (128 hosts of a 1,024-GPU job make 16 rows)."""


def host_multiples(gpu_metrics: pl.DataFrame, episodes: pl.DataFrame, t0_ns: int,
                   metric: str = "sm_clock_mhz") -> Figure | None:
    """One small panel per host with its GPUs' ``metric`` (shared axes), the culprit GPU in
    red, episodes shaded; None without the metric or with fewer than
    :data:`MULTIPLES_MIN_HOSTS` hosts."""
    frame = gpu_metrics.filter(pl.col("metric") == metric, pl.col("ts_ns").is_not_null())
    hosts = sorted(frame["host"].unique().to_list())
    if len(hosts) < MULTIPLES_MIN_HOSTS:
        return None
    frame = frame.with_columns(_minutes("ts_ns", t0_ns), series=pl.format("{}/{}", "host", "gpu"))
    columns = min(MULTIPLES_COLUMNS, len(hosts))
    rows = -(-len(hosts) // columns)
    figure = Figure(figsize=(11, 0.4 + 1.3 * rows), layout="constrained")
    axes = figure.subplots(rows, columns, sharex=True, sharey=True, squeeze=False).ravel()
    marked = culprits(episodes)["gpu"]
    spans = [((r["t_start_ns"] - t0_ns) / NS_PER_MIN,
              None if r["t_end_ns"] is None else (r["t_end_ns"] - t0_ns) / NS_PER_MIN)
             for r in episodes.iter_rows(named=True) if r["t_start_ns"] is not None]
    for ax, host in zip(axes, hosts, strict=False):
        mine = frame.filter(pl.col("host") == host)
        for name, part in sorted(mine.partition_by("series", as_dict=True).items()):
            culprit = name[0] in marked
            part = part.sort("t_min")
            ax.plot(part["t_min"], part["value"], lw=1.2 if culprit else 0.6,
                    color=EPISODE_COLOUR if culprit else PEER_COLOUR, zorder=3 if culprit else 2)
        for start, end in spans:
            ax.axvspan(start, frame["t_min"].max() if end is None else end,
                       color=EPISODE_COLOUR, alpha=0.10, lw=0)
        ax.set_title(host, fontsize=7, loc="left", pad=2,
                     color=EPISODE_COLOUR if any(g.startswith(f"{host}/") for g in marked)
                     else "black")
        ax.tick_params(labelsize=6)
        ax.grid(alpha=0.3)
    for ax in axes[len(hosts):]:
        ax.set_axis_off()
    label = dict((p[0], p[1]) for p in EVIDENCE_PANELS).get(metric, metric)
    figure.suptitle(f"{label} per host, one line per GPU (culprit GPU red; time in min)",
                    fontsize=10)
    return figure


def _plain_number(value: float, _position=None) -> str:
    return f"{value:g}"


def cdf_figure(frame: pl.DataFrame, value: str, by: str, title: str, xlabel: str,
               log_x: bool = False, percent_x: bool = False,
               references: tuple[tuple[str | None, str, float, float | None], ...] = ()
               ) -> Figure:
    """Empirical CDFs of ``value``, one step line per ``by`` group (the paper's Figure 1).

    ``references`` are published figures drawn beside the curves, ``(group, label, x, y)``:
    with ``y`` None a dotted vertical line (a mean) in its group's colour, else a point of a
    published CDF. A log axis gets ticks at 1, 2 and 5 of every decade, as plain numbers."""
    figure = Figure(figsize=(6.4, 4), layout="constrained")
    ax = figure.subplots()
    curves = ecdf(frame, value, by)
    colours = {}
    for name in curves[by].unique(maintain_order=True).to_list():
        part = curves.filter(pl.col(by) == name)
        (line,) = ax.step(part[value], part["fraction"], where="post",
                          label=f"{name} (n={part.height})")
        colours[name] = line.get_color()
    for group, label, x, y in references:
        colour = colours.get(group, INTERLUDE_COLOUR)
        if y is None:
            ax.axvline(x, color=colour, ls=":", lw=1.4, label=label)
        else:
            ax.plot([x], [y], marker="D", ls="none", color=colour, label=label)
    if log_x:
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(_plain_number))
        ax.xaxis.set_minor_formatter(FuncFormatter(lambda *_: ""))
    if percent_x:
        ax.xaxis.set_major_formatter(PercentFormatter(xmax=100, decimals=0))
    ax.yaxis.set_major_formatter(PercentFormatter(xmax=1, decimals=0))
    ax.set_xlabel(xlabel)
    ax.set_ylabel("share of cases (CDF)")
    ax.set_ylim(0, 1.02)
    ax.set_title(title)
    ax.grid(alpha=0.3, which="major")
    if curves.height or references:
        ax.legend(fontsize=8, loc="lower right")
    return figure


def bar_figure(frame: pl.DataFrame, category: str, value: str, title: str, xlabel: str,
               ylabel: str) -> Figure:
    """A bar per row (e.g. nodes per fault count)."""
    figure = Figure(figsize=(6, 3.5), layout="constrained")
    ax = figure.subplots()
    ax.bar(frame[category].cast(pl.String).to_list(), frame[value].to_list(), color="#1f77b4",
           label=ylabel)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    return figure

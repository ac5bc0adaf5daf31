"""The report's figures, drawn on ``matplotlib.figure.Figure`` objects (no pyplot state, so
they are safe in libraries, tests and notebooks alike).

Every figure has a title, axes with units and a legend, so a reader who did not run the tool
can read it.
"""

from __future__ import annotations

import polars as pl
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from tracekit.characterise.jobs import ecdf

MAX_LINES = 16
"""Above this many series (ranks, GPUs) a panel shows the median with a min-max band instead
of one line each: 1,024 lines are unreadable."""

BAND_BINS = 400
"""Time bins of a min-median-max band."""

NS_PER_MIN = 60e9
EPISODE_COLOUR = "#d62728"
CHANGE_POINT_COLOUR = "#555555"

EVIDENCE_PANELS = (
    ("sm_clock_mhz", "SM clock (MHz)", "SM clock per GPU"),
    ("gpu_temp_c", "GPU temperature (°C)", "GPU temperature per GPU"),
)
"""GPU metrics shown under the iteration times: thermal throttling shows as a clock drop with a
temperature rise on the culprit GPU."""


def _minutes(column: str, t0_ns: int) -> pl.Expr:
    return ((pl.col(column) - t0_ns) / NS_PER_MIN).alias("t_min")


def _plot_series(ax: Axes, frame: pl.DataFrame, value: str, group: str, label_prefix: str,
                 highlight: list[str] | None = None) -> None:
    """One line per group, or a median line with a min-max band when there are too many
    groups (``highlight`` groups are still drawn as lines)."""
    groups = frame[group].unique().sort().to_list()
    if len(groups) <= MAX_LINES:
        for name in groups:
            part = frame.filter(pl.col(group) == name).sort("t_min")
            ax.plot(part["t_min"], part[value], lw=0.9, label=f"{label_prefix}{name}")
        return
    span = max(frame["t_min"].max() - frame["t_min"].min(), 1e-9)
    banded = (frame.with_columns(bin=((pl.col("t_min") - frame["t_min"].min()) / span
                                      * BAND_BINS).floor())
              .group_by("bin").agg(pl.col("t_min").mean(), lo=pl.col(value).min(),
                                   mid=pl.col(value).median(), hi=pl.col(value).max())
              .sort("bin"))
    ax.fill_between(banded["t_min"], banded["lo"], banded["hi"], alpha=0.25, color="#1f77b4",
                    label=f"min-max over {len(groups)} {label_prefix.strip() or 'series'}")
    ax.plot(banded["t_min"], banded["mid"], lw=1.0, color="#1f77b4", label="median")
    for name in highlight or []:
        part = frame.filter(pl.col(group) == name).sort("t_min")
        if part.height:
            ax.plot(part["t_min"], part[value], lw=1.0, color=EPISODE_COLOUR,
                    label=f"{label_prefix}{name}")


def _episode_label(row: dict) -> str:
    cause = row.get("cause") or "not attributed"
    target = f" @ {row['target']}" if row.get("target") else ""
    slowdown = f" x{row['slowdown']:.2f}" if row.get("slowdown") is not None else ""
    return f"#{row['episode']} {cause}{target}{slowdown}"


def _rank_series(iterations: pl.DataFrame) -> tuple[pl.DataFrame, str]:
    """Per-rank ACF iterations when present, else the job-level framework series."""
    per_rank = iterations.filter(pl.col("rank").is_not_null())
    if per_rank.height:
        return per_rank.with_columns(series=pl.col("rank").cast(pl.String)), "rank "
    return iterations.with_columns(series=pl.col("source")), ""


def iteration_timeline(iterations: pl.DataFrame, events: pl.DataFrame, episodes: pl.DataFrame,
                       gpu_metrics: pl.DataFrame, nic_counters: pl.DataFrame,
                       title: str) -> Figure:
    """Iteration time per rank over time with change points and shaded, labeled episodes;
    below it, the evidence that was recorded (SM clock, GPU temperature, CNP rate)."""
    t0_ns = iterations["t_start_ns"].min()
    panels = [("iterations", "iteration time (s)", "Iteration time per rank")]
    gpu_metrics = gpu_metrics.filter(pl.col("ts_ns").is_not_null())
    panels += [p for p in EVIDENCE_PANELS if gpu_metrics.filter(pl.col("metric") == p[0]).height]
    cnp = nic_counters.filter(pl.col("counter").str.contains("cnp")
                              & ~pl.col("counter").str.contains("ignored")
                              & pl.col("rate_per_s").is_not_null())
    if cnp.height:
        panels.append(("cnp", "CNP rate (packets/s)", "RNIC congestion notifications per host"))
    figure = Figure(figsize=(11, 2.6 + 1.9 * len(panels)), layout="constrained")
    axes = figure.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    culprits = [t.split(":", 1)[1] for t in episodes["target"].drop_nulls().to_list()
                if t.startswith("rank:")]
    for ax, (kind, ylabel, panel_title) in zip(axes, panels, strict=True):
        if kind == "iterations":
            series, prefix = _rank_series(iterations)
            _plot_series(ax, series.with_columns(_minutes("t_start_ns", t0_ns)), "duration_s",
                         "series", prefix, highlight=culprits)
        elif kind == "cnp":
            per_host = (cnp.with_columns(_minutes("ts_ns", t0_ns))
                        .group_by("host", "counter", "t_min").agg(pl.col("rate_per_s").sum())
                        .with_columns(series=pl.format("{} {}", "host", "counter")))
            _plot_series(ax, per_host, "rate_per_s", "series", "")
        else:
            metric = (gpu_metrics.filter(pl.col("metric") == kind)
                      .with_columns(_minutes("ts_ns", t0_ns),
                                    series=pl.format("{}/{}", "host", "gpu")))
            _plot_series(ax, metric, "value", "series", "gpu ")
        ax.set_ylabel(ylabel)
        ax.set_title(panel_title, loc="left", fontsize=10)
        ax.grid(alpha=0.3)
    for ts in events["ts_ns"].drop_nulls().unique().sort().to_list():
        for ax in axes:
            ax.axvline((ts - t0_ns) / NS_PER_MIN, color=CHANGE_POINT_COLOUR, ls="--", lw=0.8)
    if events.height:
        axes[0].plot([], [], color=CHANGE_POINT_COLOUR, ls="--", lw=0.8, label="change point")
    t_last = (iterations["t_end_ns"].max() - t0_ns) / NS_PER_MIN
    for row in episodes.iter_rows(named=True):
        start = (row["t_start_ns"] - t0_ns) / NS_PER_MIN
        end = t_last if row["t_end_ns"] is None else (row["t_end_ns"] - t0_ns) / NS_PER_MIN
        for ax in axes:
            ax.axvspan(start, end, color=EPISODE_COLOUR, alpha=0.12)
        axes[0].annotate(_episode_label(row), xy=(start, 1.0), xycoords=("data", "axes fraction"),
                         xytext=(2, -12), textcoords="offset points", fontsize=8,
                         color=EPISODE_COLOUR)
    if episodes.height:
        axes[0].fill_between([], [], color=EPISODE_COLOUR, alpha=0.12, label="fail-slow episode")
    for ax in axes:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0))
    axes[-1].set_xlabel("time since job start (min)")
    figure.suptitle(title)
    return figure


def cdf_figure(frame: pl.DataFrame, value: str, by: str, title: str, xlabel: str,
               log_x: bool = False) -> Figure:
    """Empirical CDFs of ``value``, one step line per ``by`` group (the paper's Figure 1)."""
    figure = Figure(figsize=(6, 4), layout="constrained")
    ax = figure.subplots()
    curves = ecdf(frame, value, by)
    for name in curves[by].unique(maintain_order=True).to_list():
        part = curves.filter(pl.col(by) == name)
        ax.step(part[value], part["fraction"], where="post", label=f"{name} (n={part.height})")
    if log_x:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of cases (CDF)")
    ax.set_ylim(0, 1.02)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if curves.height:
        ax.legend(fontsize=8)
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

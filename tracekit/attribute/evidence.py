"""Monitoring evidence around an episode: the same unit before it and its peers at the time.

Hardware counters alone cannot localise (every GPU's utilisation drops together in synchronous
training), but once timing has named a culprit they say why: DCGM clock-event reasons and SM
clocks for a GPU, CPU utilisation for a host, congestion notifications (CNP / ECN) for a NIC.
Each check returns a :class:`Finding`: the cause it supports (None when the data is there but
does not support one) or, when the data is missing, what is missing.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from tracekit.core.counters import nic_counter_rates

THERMAL_FLAGS = ("clock_event_hw_thermal", "clock_event_sw_thermal")
"""DCGM clock-event reasons (NVML ``nvmlClocksEventReason*``) that mean thermal throttling."""

FLAG_SHARE = 0.5
"""A clock-event flag counts as set in a window when it is set in at least half its samples."""

CLOCK_DROP = 0.05
"""An SM clock more than 5 % under its own level before, or its peers', is a clock drop."""

CPU_RISE_PCT = 15.0
"""CPU contention: host CPU utilisation up by at least this many points over its own level
before and over its peers' median (whichever of the two the samples allow)."""

CNP_SURGE = 3.0
"""Congestion: CNP / ECN rate at least 3x the NIC's own rate before and its peers' median."""

CONGESTION_COUNTERS = ("np_cnp_sent", "rp_cnp_handled", "np_ecn_marked_roce_packets")
"""RNIC counters that count congestion notifications (mlx5 hw_counters; FORMATS.md 4)."""


@dataclass(frozen=True)
class Window:
    """The episode ``[start_ns, end_ns)`` and its healthy baseline ``[baseline_start_ns,
    baseline_end_ns)``: the stretch before it, or after it where too little precedes it (an
    episode right after the warm-up, :mod:`.windows`)."""

    start_ns: int
    end_ns: int
    baseline_start_ns: int
    baseline_end_ns: int

    @property
    def baseline(self) -> tuple[int, int]:
        return self.baseline_start_ns, self.baseline_end_ns

    @property
    def baseline_after(self) -> bool:
        return self.baseline_start_ns >= self.end_ns

    @property
    def then(self) -> str:
        """The baseline in words: "before" (it) or "after"."""
        return "after" if self.baseline_after else "before"

    @property
    def reach(self) -> tuple[int, int]:
        """The time the episode and its baseline span together."""
        return (min(self.start_ns, self.baseline_start_ns),
                max(self.end_ns, self.baseline_end_ns))


@dataclass(frozen=True)
class Finding:
    cause: str | None
    text: str
    missing: str | None = None
    hosts: tuple[str, ...] = ()
    """Hosts the finding singles out (NICs with a CNP surge)."""
    inferred: bool = False
    """The cause is concluded by elimination: no signal of its own moved."""


def _stats(frame: pl.DataFrame, window: Window, value: pl.Expr, by: list[str]) -> pl.DataFrame:
    t = pl.col("ts_ns")
    return frame.group_by(by).agg(
        value.filter(t.is_between(window.start_ns, window.end_ns, closed="left")).median()
        .alias("during"),
        value.filter(t.is_between(*window.baseline, closed="left")).median().alias("before"))


SCRAPE_NS = 15_000_000_000
"""Prometheus' usual scrape interval, taken where the samples are too few to measure one."""


def scrape_interval_ns(frame: pl.DataFrame) -> int:
    """The median time between a host's scrapes (:data:`SCRAPE_NS` when the frame has too
    few)."""
    times = frame.select("host", "ts_ns").unique().sort("host", "ts_ns")
    gaps = times.select(pl.col("ts_ns").diff().over("host").alias("gap")).drop_nulls()
    gap = gaps["gap"].filter(gaps["gap"] > 0).median() if gaps.height else None
    return int(gap) if gap else SCRAPE_NS


def gpu_finding(gpu_metrics: pl.DataFrame, host: str, gpu: int, window: Window) -> Finding:
    """Thermal throttling or degradation of GPU ``gpu`` on ``host``."""
    where = f"{host}/{gpu}"
    mine = gpu_metrics.filter(pl.col("host") == host, pl.col("gpu") == gpu)
    during = mine.filter(pl.col("ts_ns").is_between(window.start_ns, window.end_ns,
                                                    closed="left"))
    if during.is_empty():
        return Finding(None, "", f"no DCGM samples (gpu_metrics) for GPU {where} during the "
                       "episode: cannot tell thermal throttling from degradation")
    flags = _flag_shares(during)
    thermal = [name for name in THERMAL_FLAGS if flags.get(name, 0.0) >= FLAG_SHARE]
    now, reference, peers = sm_clocks(gpu_metrics, host, gpu, window)
    parts = []
    dropped = False
    if now is not None and reference:
        dropped = now < reference * (1 - CLOCK_DROP)
        parts.append(f"SM clock {reference:.0f} -> {now:.0f} MHz"
                     + (f" (peers {peers:.0f} MHz)" if peers is not None else ""))
    temperature = _stats(mine.filter(pl.col("metric") == "gpu_temp_c"), window,
                         pl.col("value"), ["host", "gpu"])
    if temperature.height and temperature["during"][0] is not None:
        before = temperature["before"][0]
        parts.append(f"temperature {before:.0f} -> {temperature['during'][0]:.0f} C"
                     if before is not None else f"temperature {temperature['during'][0]:.0f} C")
    if thermal:
        parts.append(", ".join(f"{n.removeprefix('clock_event_')} set in "
                               f"{flags[n]:.0%} of samples" for n in thermal))
        return Finding("gpu-thermal", f"GPU {where}: " + "; ".join(parts))
    text = f"GPU {where}: " + ("; ".join(parts) if parts else "DCGM samples present")
    interval = scrape_interval_ns(gpu_metrics)
    if not dropped and window.end_ns - window.start_ns < 2 * interval:
        return Finding(None, text, f"the episode is shorter than two DCGM scrapes "
                       f"({interval / 1e9:.0f} s apart): normal clocks in its samples cannot "
                       "rule out throttling between them")
    if dropped:
        return Finding("gpu-degradation", text + "; no thermal clock-event reason")
    return Finding("gpu-degradation", text + INFERRED_DEGRADATION, inferred=True)


INFERRED_DEGRADATION = ("; clocks and throttle reasons normal, so the GPU itself is slower "
                        "(inferred: no signal of its own)")
"""The reasoning of a degradation by elimination, which the verdict withdraws where an
alternative cause cannot be checked (:func:`tracekit.attribute.verdict._eliminated`)."""


def sm_clocks(gpu_metrics: pl.DataFrame, host: str, gpu: int, window: Window
              ) -> tuple[float | None, float | None, float | None]:
    """The median SM clock of GPU ``gpu`` on ``host`` during the episode, its reference (its
    own before, else its peers' during) and its peers' during."""
    clocks = _stats(gpu_metrics.filter(pl.col("metric") == "sm_clock_mhz"), window,
                    pl.col("value"), ["host", "gpu"])
    own = clocks.filter(pl.col("host") == host, pl.col("gpu") == gpu)
    peers = clocks.filter((pl.col("host") != host) | (pl.col("gpu") != gpu))["during"].median()
    if not own.height or own["during"][0] is None:
        return None, None, peers
    then = own["before"][0]
    return own["during"][0], then if then is not None else peers, peers


def _flag_shares(samples: pl.DataFrame) -> dict[str, float]:
    """Share of samples with each thermal flag set, from flag rows or the reasons bitmask."""
    flags = (samples.filter(pl.col("metric").is_in(THERMAL_FLAGS))
             .group_by("metric").agg((pl.col("value") > 0).mean()))
    shares = dict(flags.iter_rows())
    mask = samples.filter(pl.col("metric") == "clocks_event_reasons")["value"]
    if mask.len() and not shares:
        bits = mask.cast(pl.Int64)
        shares = {"clock_event_hw_thermal": float(((bits & 0x40) > 0).mean()),
                  "clock_event_sw_thermal": float(((bits & 0x20) > 0).mean())}
    return shares


def host_finding(host_metrics: pl.DataFrame, host: str, window: Window) -> Finding:
    """CPU contention on ``host``: CPU utilisation up over its own past and its peers."""
    cpu = host_metrics.filter(pl.col("metric") == "cpu_util_pct")
    if cpu.filter(pl.col("host") == host).is_empty():
        return Finding(None, "", f"no host CPU samples (host_metrics cpu_util_pct) for {host}: "
                       "cannot confirm CPU contention")
    stats = _stats(cpu, window, pl.col("value"), ["host"])
    own = stats.filter(pl.col("host") == host).row(0, named=True)
    peers = stats.filter(pl.col("host") != host)["during"].median()
    if own["during"] is None:
        return Finding(None, "", f"no host CPU samples for {host} during the episode")
    before = own["before"]
    over_peers = own["during"] - peers if peers is not None else None
    rise = own["during"] - before if before is not None else over_peers
    text = (f"host {host}: CPU "
            + (f"{before:.0f} -> " if before is not None else f"(no sample {window.then}) ")
            + f"{own['during']:.0f} %" + (f" (peers {peers:.0f} %)" if peers is not None else ""))
    if rise is not None and rise >= CPU_RISE_PCT and (over_peers is None
                                                       or over_peers >= CPU_RISE_PCT):
        return Finding("cpu-contention", text)
    return Finding(None, text + ": no CPU saturation, host cause unexplained")


def congestion_rates(nic_counters: pl.DataFrame) -> pl.DataFrame:
    """Congestion-notification rate per host and scrape (host, ts_ns, rate_per_s), from the
    counters across the whole job, not the rates stored per file at ingest: a dump of one
    snapshot per file has none within a file, and a file's first sample has none."""
    counters = nic_counters.filter(pl.col("counter").is_in(CONGESTION_COUNTERS),
                                   pl.col("value").is_not_null())
    if counters.is_empty():
        return pl.DataFrame(schema={"host": pl.String, "ts_ns": pl.Int64,
                                    "rate_per_s": pl.Float64})
    rated = nic_counter_rates(counters.drop("rate_per_s"))
    return (rated.drop_nulls("rate_per_s").group_by("host", "ts_ns")
            .agg(pl.col("rate_per_s").sum()).sort("host", "ts_ns"))


def nic_finding(nic_counters: pl.DataFrame, hosts: tuple[str, ...], window: Window) -> Finding:
    """Network congestion on the NICs of ``hosts``: a CNP / ECN rate surge."""
    per_host = congestion_rates(nic_counters)
    if per_host.filter(pl.col("host").is_in(hosts)).is_empty():
        return Finding(None, "", "no RNIC congestion counters (nic_counters np_cnp_sent / "
                       f"rp_cnp_handled) for {', '.join(hosts)}: cannot confirm congestion")
    stats = _stats(per_host, window, pl.col("rate_per_s"), ["host"])
    peers = stats.filter(~pl.col("host").is_in(hosts))["during"].median()
    surged, parts = [], []
    for row in stats.filter(pl.col("host").is_in(hosts)).sort("host").iter_rows(named=True):
        now, then = row["during"] or 0.0, row["before"] or 0.0
        parts.append(f"{row['host']} CNP {then:,.0f} -> {now:,.0f}/s")
        if now >= CNP_SURGE * max(then, 1.0) and now >= CNP_SURGE * max(peers or 0.0, 1.0):
            surged.append(row["host"])
    text = "; ".join(parts) + (f" (peers {peers:,.0f}/s)" if peers is not None else "")
    if surged:
        return Finding("network-congestion", text, hosts=tuple(surged))
    return Finding(None, text + ": no CNP surge, congestion not confirmed",
                   "no congestion notifications on the slow link's NICs")

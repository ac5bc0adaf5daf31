"""Telemetry that moves with the slowdown: which GPU, host or link changed when the job slowed.

When the collective calls carry issue times only (``NCCL_DEBUG=INFO`` COLL lines), timing cannot
say whose compute or transfer grew, but the exporters a cluster runs anyway can: a GPU whose
thermal clock-event reasons appear, a host whose CPU busy share jumps, the NICs at both ends of
a link whose congestion notifications surge. A unit is a suspect only when its signal is new in
the episode (absent in the healthy stretch before it), stands out from its peers at the same
time, and holds for most of the episode, so that decoys do not count: a GPU hotter than its
peers all along, a single scrape of power capping, CNP bursts of other tenants outside the slow
iterations or on hosts the job does not run on.

Exporters are scraped every 15 s or so. A rate from cumulative counters (CPU seconds, CNPs)
describes the interval that ends at its scrape, so the episode's window reaches one scrape past
its end; dcgm-exporter serves gauges up to one collect interval old (30 s by default), so for
DCGM it reaches :data:`DCGM_LAG_SCRAPES` scrapes past the end.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from tracekit.attribute.evidence import (
    CLOCK_DROP,
    CNP_SURGE,
    CPU_RISE_PCT,
    THERMAL_FLAGS,
    Window,
    congestion_rates,
    scrape_interval_ns,
)
from tracekit.core.counters import shares_of_increase
from tracekit.core.identity import link_target

DCGM_LAG_SCRAPES = 4
"""DCGM windows reach this many scrape intervals past the episode's end: two collect intervals
of dcgm-exporter's default 30 s at the usual 15 s scrape."""

MARGIN_SCRAPES = 8
"""Monitoring is read this many scrape intervals beyond the spans a verdict looks at, on both
sides: a rate needs the sample before its interval, a counter that an exporter repeats
(dcgm-exporter's 30 s collect under a 15 s scrape) takes its increase from the first of the
repeats, and the interval itself is the median over what is read, so the same on a steady
cadence whether the job's whole monitoring is read or this slice of it."""

SUSTAINED_SHARE = 0.5
"""A CPU or CNP signal holds for the episode when at least half its samples there show it."""

POWER_METRIC = "power_w"

THERMAL_READINGS = 1
"""A thermal reason counts when set in at least this many distinct DCGM readings of the
episode (set in none before it, in under half after it). One collect is enough: on fresh
seeds the labeled thermal GPUs show 2 or more readings and every other GPU none (the margins
in docs/attribution.md), and dcgm-exporter's 30 s collect gives a 30-40 s episode a single
reading; a threshold of 2 sat exactly at the faulty minimum."""

THERMAL_LAG_SCRAPES = 2
"""A thermal reading counts for the episode up to this many scrapes past its end: a reading
is at most one collect old (30 s, two 15 s scrapes). One reading being enough, the longer
DCGM lag let the onset of a thermal episode a minute after a CPU one count for the CPU one."""

EDGE_SCRAPES = 1
"""A sample less than this many scrapes outside the episode's span counts neither before nor
after it: a monitoring clock some seconds off the steps' clock (hosts without NTP, an
exporter's container) moves the reading at an edge across it, and a surge's last rate read
after the end is taken for a level that stays up (on fresh seeds, a +7 s offset rejected
both ends of the congested link)."""

CLOCK_READINGS = 2
"""A clock drop without a thermal reason counts in at least this many distinct readings:
a single power-cap blip drops the clock for one collect."""


@dataclass(frozen=True)
class Suspect:
    """A unit whose telemetry moved with the slowdown: ``target`` (``rank:N``, ``host:H``,
    ``link:A<->B``, ``nic:H``), the cause it supports, and the numbers that decided it (the
    readings of one cause, however many, are one signal)."""

    kind: str
    cause: str
    target: str
    text: str


@dataclass(frozen=True)
class _Spans:
    """The telemetry windows of one episode: its baseline (``before``), during it (lag
    included), after it, with :data:`EDGE_SCRAPES` between them. A baseline after the episode
    is the after span too: a signal absent there has ended with the episode."""

    before: tuple[int, int]
    during: tuple[int, int]
    after: tuple[int, int]

    @classmethod
    def of(cls, window: Window, interval_ns: int, lag_scrapes: int = 1) -> _Spans:
        lag, edge = lag_scrapes * interval_ns, EDGE_SCRAPES * interval_ns
        end = window.end_ns + lag
        if window.baseline_after:
            start = max(window.baseline_start_ns, end + edge)
            baseline = start, max(start, window.baseline_end_ns)
            return cls(baseline, (window.start_ns, end), baseline)
        length = max(window.end_ns - window.start_ns, lag)
        start = window.baseline_start_ns
        return cls((start, max(start, min(window.baseline_end_ns, window.start_ns - edge))),
                   (window.start_ns, end), (end + edge, end + edge + length))

    def label(self, closed: str = "left") -> pl.Expr:
        """The span of each sample's ``ts_ns``; ``closed="right"`` for rates, which describe
        the interval ending at their sample."""
        t = pl.col("ts_ns")
        return (pl.when(t.is_between(*self.during, closed=closed)).then(pl.lit("during"))
                .when(t.is_between(*self.before, closed=closed)).then(pl.lit("before"))
                .when(t.is_between(*self.after, closed=closed)).then(pl.lit("after")))


def monitoring_reach(window: Window, interval_ns: int) -> tuple[int, int]:
    """The time ``[start, end)`` of monitoring that the verdict of ``window`` reads, for samples
    ``interval_ns`` apart: its spans before, during (DCGM's lag included; the rates' one-scrape
    lag is shorter) and after it, and :data:`MARGIN_SCRAPES` on both sides. The findings of
    :mod:`.evidence` read the baseline and the episode only, inside it."""
    spans = _Spans.of(window, interval_ns, DCGM_LAG_SCRAPES)
    margin = MARGIN_SCRAPES * interval_ns
    return (min(spans.before[0], spans.during[0]) - margin,
            max(spans.after[1], spans.during[1]) + margin)


def _rated_spans(rates: pl.DataFrame, value: str, window: Window) -> pl.DataFrame:
    """Rate samples (host, ts_ns, ``value``) of the episode's spans with ``span`` and each
    host's median ``before`` (null without a sample before it)."""
    spans = _Spans.of(window, scrape_interval_ns(rates))
    labelled = rates.with_columns(spans.label("right").alias("span")).drop_nulls("span")
    before = labelled.filter(pl.col("span") == "before").group_by("host").agg(
        pl.col(value).median().alias("before"))
    return labelled.join(before, on="host", how="left")


def _held(labelled: pl.DataFrame, raised: pl.Expr, *columns: pl.Expr) -> pl.DataFrame:
    """Per host of rate samples labelled by span: the share of the episode's samples that
    show the signal (``share``), the share of those after it (``share_after``, null without
    any: a level that stays up did not move with the slowdown), and ``columns``."""
    during = pl.col("span") == "during"
    return labelled.group_by("host").agg(
        raised.filter(during).mean().alias("share"),
        raised.filter(pl.col("span") == "after").mean().alias("share_after"),
        *columns).filter(pl.col("share").is_not_null()).sort("host")


def _moved(held: pl.DataFrame) -> pl.DataFrame:
    """The hosts whose signal holds for most of the episode and not after it."""
    return held.filter(pl.col("share") >= SUSTAINED_SHARE,
                       pl.col("share_after").is_null()
                       | (pl.col("share_after") < SUSTAINED_SHARE))


def readings(gpu_metrics: pl.DataFrame) -> pl.DataFrame:
    """host, gpu, ts_ns and ``repeat`` of every DCGM sample: a repeat serves exactly the values
    of its GPU's sample before it, power draw included (dcgm-exporter's 30 s collect scraped
    every 15 s), so it is the same reading, not a second one: two collects of a busy GPU do
    not draw the same power to the milliwatt. Without a power sample, identical values may be
    a steady GPU read twice, so each sample is a reading."""
    keyed = gpu_metrics.group_by("host", "gpu", "ts_ns").agg(
        pl.concat_str(pl.col("metric"), pl.lit("="), pl.col("value").cast(pl.String))
        .sort().str.join(",").alias("key"),
        (pl.col("metric") == POWER_METRIC).any().alias("power"))
    return keyed.sort("host", "gpu", "ts_ns").select(
        "host", "gpu", "ts_ns",
        (pl.col("power") & (pl.col("key") == pl.col("key").shift(1).over("host", "gpu")))
        .fill_null(False).alias("repeat"))


def thermal_onsets(gpu_metrics: pl.DataFrame, window: Window) -> pl.DataFrame:
    """Per GPU (host, gpu): the DCGM readings (repeats apart, :func:`readings`) with a thermal
    clock-event reason set during the episode's span (:data:`THERMAL_LAG_SCRAPES` past its
    end), the readings there, those set before it and the share set after it, and the flags
    seen."""
    spans = _Spans.of(window, scrape_interval_ns(gpu_metrics), THERMAL_LAG_SCRAPES)
    fresh = readings(gpu_metrics).filter(~pl.col("repeat")).drop("repeat")
    thermal = (gpu_metrics.filter(pl.col("metric").is_in(THERMAL_FLAGS))
               .join(fresh, on=["host", "gpu", "ts_ns"])
               .with_columns(spans.label().alias("span")).drop_nulls("span")
               .group_by("host", "gpu", "ts_ns", "span").agg(
                   (pl.col("value") > 0).any().alias("set"),
                   pl.col("metric").filter(pl.col("value") > 0).alias("flags")))
    during = pl.col("span") == "during"
    return thermal.group_by("host", "gpu").agg(
        pl.col("set").filter(during).sum().alias("set_during"),
        pl.col("set").filter(during).len().alias("readings_during"),
        pl.col("set").filter(pl.col("span") == "before").sum().alias("set_before"),
        pl.col("set").filter(pl.col("span") == "after").mean().alias("share_after"),
        pl.col("flags").filter(during).list.explode(keep_nulls=False, empty_as_null=False)
        .unique().sort().alias("flags"))


def _gpu_unit(ranks: pl.DataFrame, host: str, gpu) -> tuple[str, str]:
    """A GPU's target (``rank:N``, or ``gpu:H/G`` when no rank runs on it) and its name in
    evidence (``GPU H/G (rank N)``). ``ranks`` maps (host, gpu) to ranks."""
    rank = ranks.filter(pl.col("host") == host, pl.col("gpu") == gpu)["rank"]
    if rank.len():
        return f"rank:{rank[0]}", f"GPU {host}/{gpu} (rank {rank[0]})"
    return f"gpu:{host}/{gpu}", f"GPU {host}/{gpu}"


def gpu_suspects(gpu_metrics: pl.DataFrame, ranks: pl.DataFrame, window: Window) -> list[Suspect]:
    """GPUs whose thermal clock-event reasons appear with the episode: set in none of the
    healthy readings before it, in at least :data:`THERMAL_READINGS` distinct readings during
    it, and in fewer than half of those after it. Their SM clock and temperature are quoted.
    ``ranks`` maps (host, gpu) to ranks."""
    if gpu_metrics.is_empty():
        return []
    onset = thermal_onsets(gpu_metrics, window).filter(
        pl.col("set_during") >= THERMAL_READINGS, pl.col("set_before") == 0,
        pl.col("share_after").is_null() | (pl.col("share_after") < SUSTAINED_SHARE))
    if onset.is_empty():
        return []
    spans = _Spans.of(window, scrape_interval_ns(gpu_metrics), DCGM_LAG_SCRAPES)
    labelled = (gpu_metrics.filter(pl.col("metric").is_in(["sm_clock_mhz", "gpu_temp_c"]))
                .with_columns(spans.label().alias("span")).drop_nulls("span"))
    levels = labelled.group_by("host", "gpu", "metric").agg(
        pl.col("value").filter(pl.col("span") == "during").min().alias("worst_clock"),
        pl.col("value").filter(pl.col("span") == "during").median().alias("median_clock"),
        pl.col("value").filter(pl.col("span") == "during").max().alias("worst_temp"),
        pl.col("value").filter(pl.col("span") == "before").median().alias("before"))
    peers_clock = levels.filter(pl.col("metric") == "sm_clock_mhz")
    out = []
    for row in onset.sort("host", "gpu").iter_rows(named=True):
        host, gpu = row["host"], row["gpu"]
        mine = levels.filter(pl.col("host") == host, pl.col("gpu") == gpu)
        clock = mine.filter(pl.col("metric") == "sm_clock_mhz")
        temp = mine.filter(pl.col("metric") == "gpu_temp_c")
        others = peers_clock.filter((pl.col("host") != host) | (pl.col("gpu") != gpu))
        peer = others["median_clock"].median()
        flags = "/".join(f.removeprefix("clock_event_") for f in row["flags"])
        parts = [f"{flags} set in {row['set_during']} of {row['readings_during']} readings "
                 f"during the episode, none {window.then}"]
        if clock.height and clock["worst_clock"][0] is not None and peer:
            low = clock["worst_clock"][0]
            parts.append(f"SM clock down to {low:.0f} MHz (peers {peer:.0f} MHz)")
        if temp.height and temp["worst_temp"][0] is not None and temp["before"][0] is not None:
            parts.append(f"temperature {temp['before'][0]:.0f} -> {temp['worst_temp'][0]:.0f} C")
        target, name = _gpu_unit(ranks, host, gpu)
        out.append(Suspect("compute", "gpu-thermal", target, f"{name}: " + "; ".join(parts)))
    return out


def monitoring_suspects(window: Window, ranks: pl.DataFrame, links: set[tuple[str, str]],
                        gpu_metrics: pl.DataFrame, host_metrics: pl.DataFrame,
                        nic_counters: pl.DataFrame) -> list[Suspect]:
    """Every unit of the job whose telemetry moved with the episode: GPUs with new thermal
    reasons, other GPUs whose clock dropped, hosts whose CPU rose and the link of ``links``
    (the host pairs its rings cross) whose two ends surged. ``ranks``: rank, host, gpu."""
    hosts = sorted(set(ranks["host"].drop_nulls()))
    thermal = gpu_suspects(gpu_metrics, ranks, window)
    return (thermal + clock_suspects(gpu_metrics, ranks, window, {s.target for s in thermal})
            + host_suspects(host_metrics, hosts, window)
            + link_suspects(nic_counters, hosts, window, links))


def clock_drops(gpu_metrics: pl.DataFrame, window: Window) -> pl.DataFrame:
    """Per GPU (host, gpu) with an SM clock before the episode: the distinct DCGM readings
    (:func:`readings`) of its span (lag included) more than :data:`CLOCK_DROP` under its own
    median before, the share of such readings after it, its clock before, its lowest during
    and its peers' median during."""
    spans = _Spans.of(window, scrape_interval_ns(gpu_metrics), DCGM_LAG_SCRAPES)
    fresh = readings(gpu_metrics).filter(~pl.col("repeat")).drop("repeat")
    clocks = (gpu_metrics.filter(pl.col("metric") == "sm_clock_mhz")
              .join(fresh, on=["host", "gpu", "ts_ns"])
              .with_columns(spans.label().alias("span")).drop_nulls("span"))
    before = clocks.filter(pl.col("span") == "before").group_by("host", "gpu").agg(
        pl.col("value").median().alias("before"))
    during = pl.col("span") == "during"
    dropped = pl.col("value") < pl.col("before") * (1 - CLOCK_DROP)
    per_gpu = clocks.join(before, on=["host", "gpu"]).group_by("host", "gpu").agg(
        dropped.filter(during).sum().alias("dropped"),
        dropped.filter(pl.col("span") == "after").mean().alias("share_after"),
        pl.col("before").first(), pl.col("value").filter(during).min().alias("lowest"),
        pl.col("value").filter(during).median().alias("median"))
    peers = [per_gpu.filter((pl.col("host") != h) | (pl.col("gpu") != g))["median"].median()
             for h, g in per_gpu.select("host", "gpu").iter_rows()]
    return per_gpu.with_columns(pl.Series("peers", peers, dtype=pl.Float64)).sort("host", "gpu")


def clock_suspects(gpu_metrics: pl.DataFrame, ranks: pl.DataFrame, window: Window,
                   thermal: set[str]) -> list[Suspect]:
    """GPUs (not among the ``thermal`` suspects' targets: a throttled clock is the thermal
    cause seen again) whose SM clock drops with the episode without a thermal reason: under
    its own level before in at least :data:`CLOCK_READINGS` readings, in fewer than half of
    those after it, and its lowest under its peers' median by :data:`CLOCK_DROP`. A slower GPU,
    shown by its own clock: degradation, not concluded by elimination."""
    if gpu_metrics.is_empty():
        return []
    drops = clock_drops(gpu_metrics, window).filter(
        pl.col("dropped") >= CLOCK_READINGS,
        pl.col("share_after").is_null() | (pl.col("share_after") < SUSTAINED_SHARE),
        pl.col("peers").is_null() | (pl.col("lowest") < pl.col("peers") * (1 - CLOCK_DROP)))
    out = []
    for row in drops.iter_rows(named=True):
        target, name = _gpu_unit(ranks, row["host"], row["gpu"])
        if target in thermal:
            continue
        out.append(Suspect("compute", "gpu-degradation", target, (
            f"{name}: SM clock {row['before']:.0f} -> {row['lowest']:.0f} MHz in {row['dropped']} "
            "readings of the episode"
            + (f" (peers {row['peers']:.0f} MHz)" if row["peers"] is not None else "")
            + ", no thermal reason")))
    return out


def cpu_busy_pct(host_metrics: pl.DataFrame) -> pl.DataFrame:
    """Host CPU busy share per scrape (host, ts_ns, value): ``cpu_util_pct`` where the ingest
    computed it, else from the cumulative busy and total CPU seconds across scrapes (one
    scrape per file leaves no pair within a file)."""
    direct = host_metrics.filter(pl.col("metric") == "cpu_util_pct").select("host", "ts_ns",
                                                                           "value")
    cumulative = host_metrics.filter(
        pl.col("metric").is_in(["cpu_busy_seconds_total", "cpu_seconds_total"]),
        ~pl.col("host").is_in(direct["host"].unique().to_list()))
    if cumulative.is_empty():
        return direct
    wide = cumulative.pivot(on="metric", index=["host", "ts_ns"], values="value",
                            aggregate_function="first").sort("host", "ts_ns")
    derived = wide.select("host", "ts_ns", *shares_of_increase(
        {"value": "cpu_busy_seconds_total"}, "cpu_seconds_total", "host")).drop_nulls("value")
    return pl.concat([direct, derived])


def cpu_rises(host_metrics: pl.DataFrame, hosts: list[str], window: Window) -> pl.DataFrame:
    """Per host of the job: the share of the episode's scrapes whose CPU busy share is
    :data:`CPU_RISE_PCT` points over its own level before and over its peers' at the same
    scrape (whichever of the two the scrapes allow), the share after it, the level before,
    the median during and the peers' median during, and ``rise``: the median during less the
    higher of the two references (points)."""
    busy = cpu_busy_pct(host_metrics).filter(pl.col("host").is_in(hosts))
    if busy.is_empty():
        return pl.DataFrame()
    labelled = _rated_spans(busy, "value", window)
    peers = labelled.join(labelled.select("host", "ts_ns", pl.col("value").alias("other")),
                          on="ts_ns").filter(pl.col("host") != pl.col("host_right")).group_by(
        "host", "ts_ns").agg(pl.col("other").median().alias("peers"))
    labelled = labelled.join(peers, on=["host", "ts_ns"], how="left")
    raised = ((pl.col("before").is_null() | (pl.col("value") >= pl.col("before") + CPU_RISE_PCT))
              & (pl.col("peers").is_null() | (pl.col("value") >= pl.col("peers") + CPU_RISE_PCT))
              & (pl.col("before").is_not_null() | pl.col("peers").is_not_null()))
    during = pl.col("span") == "during"
    return _held(labelled, raised, pl.col("before").first(),
                 pl.col("value").filter(during).median().alias("during"),
                 pl.col("peers").filter(during).median().alias("peers")).with_columns(
        (pl.col("during") - pl.max_horizontal("before", "peers")).alias("rise"))


def host_suspects(host_metrics: pl.DataFrame, hosts: list[str], window: Window) -> list[Suspect]:
    """Hosts of the job whose CPU busy share rises (:func:`cpu_rises`) in most of the
    episode's scrapes, and falls back after it."""
    rises = cpu_rises(host_metrics, hosts, window)
    if rises.is_empty():
        return []
    return [Suspect("compute", "cpu-contention", f"host:{row['host']}", (
        f"host {row['host']}: CPU busy "
        + (f"{row['before']:.0f} -> " if row["before"] is not None
           else f"(no scrape {window.then}) ")
        + f"{row['during']:.0f} % "
        + (f"(peers {row['peers']:.0f} %) " if row["peers"] is not None else "")
        + f"in {row['share']:.0%} of the episode's scrapes"))
        for row in _moved(rises).iter_rows(named=True)]


def cnp_surges(nic_counters: pl.DataFrame, hosts: list[str], window: Window) -> pl.DataFrame:
    """Per host of the job with a rate before the episode: the share of the episode's scrapes
    whose congestion-notification rate is :data:`CNP_SURGE` times its own before, the share
    after it, the rate before, the median during and their ``ratio`` (before at least 1/s)."""
    rates = congestion_rates(nic_counters).filter(pl.col("host").is_in(hosts))
    if rates.is_empty():
        return pl.DataFrame()
    labelled = _rated_spans(rates, "rate_per_s", window).drop_nulls("before")
    floor = pl.max_horizontal(pl.col("before"), pl.lit(1.0))
    raised = pl.col("rate_per_s") >= floor * CNP_SURGE
    return _held(labelled, raised, pl.col("before").first(),
                 pl.col("rate_per_s").filter(pl.col("span") == "during").median()
                 .alias("during"), floor.first().alias("floor")).with_columns(
        (pl.col("during") / pl.col("floor")).alias("ratio")).drop("floor")


def link_suspects(nic_counters: pl.DataFrame, hosts: list[str], window: Window,
                  links: set[tuple[str, str]] | None = None) -> list[Suspect]:
    """The link (or NIC) whose hosts' congestion notifications surge with the episode
    (:func:`cnp_surges`) in most of its scrapes, and not after it. Two or more surging hosts
    of the job make a link of the two that surge most; one makes its NIC. Given the ``links``
    (sorted host pairs) that the job's rings cross, only such a link whose two ends surge is a
    suspect: another tenant's surge on a link between the job's hosts that no ring uses, or
    on one NIC, does not explain this job's slowdown."""
    surges = cnp_surges(nic_counters, hosts, window)
    if surges.is_empty():
        return []
    rows = list(_moved(surges).iter_rows(named=True))
    if links is not None:
        ratio = {r["host"]: r["ratio"] for r in rows}
        crossed = [pair for pair in sorted(links) if all(h in ratio for h in pair)]
        pair = max(crossed, key=lambda p: min(ratio[h] for h in p), default=None)
        rows = [r for r in rows if pair is not None and r["host"] in pair]
    if not rows:
        return []
    rows.sort(key=lambda r: r["ratio"], reverse=True)
    top = sorted(r["host"] for r in rows[:2])
    target = link_target(*top) if len(top) == 2 else f"nic:{top[0]}"
    text = "; ".join(f"{r['host']} CNP {r['before']:,.0f} -> {r['during']:,.0f}/s"
                     for r in sorted(rows[:2], key=lambda r: r["host"]))
    return [Suspect("communication", "network-congestion", target,
                    text + " during the episode")]

"""How far the faulty and the healthy units of a fresh-seed corpus sit from each evidence
threshold: every labeled fail-slow's window (its run and baseline, as attribution builds
them) measured with attribution's own statistics, the labeled culprit as faulty and every
other unit of the job as healthy.

The timing thresholds are measured on the timing attribution reduces for the same windows
(:func:`tracekit.attribute.episode_windows`): each rank's own-time ratio over the median
rank's and each group's transfer ratio (``SUSPECT_RATIO``, with call ends), and the rise of
the wait each rank imposes (``WAIT_RISE_MIN``, issue times only, where the rule is used).
A group that holds a labeled compute culprit is neither faulty nor healthy for the transfer
ratio: a slow GPU slows its own groups' collectives, which the verdict keeps apart as "not
confirmed"."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from tracekit.attribute import episode_windows
from tracekit.attribute.evidence import CLOCK_DROP, CNP_SURGE, CPU_RISE_PCT, sm_clocks
from tracekit.attribute.links import ring_links
from tracekit.attribute.telemetry import (
    CLOCK_READINGS,
    SUSTAINED_SHARE,
    THERMAL_READINGS,
    clock_drops,
    cnp_surges,
    cpu_rises,
    thermal_onsets,
)
from tracekit.attribute.timing import EpisodeTiming, episode_timings
from tracekit.attribute.verdict import WAIT_RISE_MIN
from tracekit.attribute.windows import episode_runs
from tracekit.core.dataset import open_dataset
from tracekit.core.identity import link_hosts
from tracekit.core.parallel import LocalExecutor
from tracekit.core.thresholds import SUSPECT_RATIO

THRESHOLDS = {
    "thermal readings": (THERMAL_READINGS, "distinct DCGM readings with a thermal reason"),
    "clock readings": (CLOCK_READINGS, "distinct DCGM readings with the clock dropped"),
    "CNP ratio": (CNP_SURGE, "median CNP rate during over before"),
    "CNP share": (SUSTAINED_SHARE, "share of the episode's scrapes with the surge"),
    "CPU rise": (CPU_RISE_PCT, "points of CPU busy over before / peers"),
    "CPU share": (SUSTAINED_SHARE, "share of the episode's scrapes with the rise"),
    "clock drop": (CLOCK_DROP, "SM clock drop under its reference"),
    "own-time ratio": (SUSPECT_RATIO, "a rank's own-time ratio over the median rank's"),
    "transfer ratio": (SUSPECT_RATIO, "a group's transfer time over its own before"),
    "wait rise": (WAIT_RISE_MIN, "rise of the wait a rank imposes, share of wall time"),
}
"""Statistic -> (threshold, what it measures); a unit is flagged at or above it (above it
for ``SUSPECT_RATIO``)."""


def _culprits(cause: str, target: str, hosts: dict[int, tuple[str, int]]) -> dict[str, set]:
    """The units a label names for each signal (the parts of a compound label's cause and
    target pair up): thermal and clock GPUs (host, gpu), CPU hosts, NIC hosts, and the
    congested ``path`` (a link's sorted host pair, a NIC's host alone). A unit of the job that
    a signal's rule should not flag (a degraded GPU for the thermal rule) is healthy for it."""
    units: dict[str, set] = {"thermal": set(), "clock": set(), "cpu": set(), "nic": set(),
                             "path": set()}
    for part, why in zip(target.split("+"), cause.split("+"), strict=True):
        kind, _, value = part.partition(":")
        if kind == "rank":
            units["clock"].add(hosts[int(value)])
            if why == "gpu-thermal":
                units["thermal"].add(hosts[int(value)])
        elif kind == "host":
            units["cpu"].add(value)
        elif kind == "link":
            units["nic"].update(link_hosts(value) or ())
            units["path"].update({link_hosts(value)} - {None})
        elif kind == "nic":
            units["nic"].add(value)
            units["path"].add((value,))
    return units


def _timing_rows(timing: EpisodeTiming, faulty: dict[str, set],
                 rank_units: dict[int, tuple[str, int]]) -> list[tuple]:
    """The timing statistics of one window: own-time and transfer ratios with call ends,
    the imposed-wait rise without them (where the verdict reads each)."""
    culprit = {r for r, unit in rank_units.items()
               if unit in faulty["clock"] or unit[0] in faulty["cpu"]}
    if timing.own is None:
        return [("wait rise", row["excess_rate"], row["rank"] in culprit)
                for row in timing.skew.drop_nulls("excess_rate").iter_rows(named=True)]
    rows = [("own-time ratio", row["relative"], row["rank"] in culprit)
            for row in timing.own.drop_nulls("relative").iter_rows(named=True)]
    for row in timing.groups.iter_rows(named=True):
        ratio = row["self_ratio"] if row["self_ratio"] is not None else row["cluster_ratio"]
        if ratio is None or culprit & set(row["members"]):
            continue
        links = ring_links([rank_units[r][0] for r in row["members"] if r in rank_units])
        rows.append(("transfer ratio", ratio, any(set(path) <= set(link) for link in links
                                                  for path in faulty["path"])))
    return rows


def job_margins(dataset_path: str, rank_units: dict[int, tuple[str, int]]) -> pl.DataFrame:
    """statistic, value and ``faulty`` per unit and labeled fail-slow of one job."""
    dataset = open_dataset(dataset_path)
    labels = dataset.table("labels").filter("fail_slow").collect().sort("t_start_ns")
    if labels.is_empty():
        return pl.DataFrame()
    gpu = dataset.table("gpu_metrics").collect()
    host = dataset.table("host_metrics").collect()
    nic = dataset.table("nic_counters").collect()
    hosts = sorted({h for h, _ in rank_units.values()})
    episodes = labels.with_columns(detector=pl.lit("labels"))
    with episode_windows(dataset, episodes, LocalExecutor()) as (job, windows, ranks):
        timings = (episode_timings(job, windows, ranks) if windows is not None
                   else [None] * labels.height)
    if windows is None:
        first = dataset.table("iterations").select(pl.col("t_start_ns").min()).collect().item()
        windows = [run.window(first, label["t_end_ns"]) for label, run in
                   zip(labels.iter_rows(named=True), episode_runs(episodes), strict=True)]
    rows = []
    for label, window, timing in zip(labels.iter_rows(named=True), windows, timings,
                                     strict=True):
        faulty = _culprits(label["cause"], label["target"], rank_units)
        if timing is not None:
            rows += _timing_rows(timing, faulty, rank_units)
        onsets = thermal_onsets(gpu, window)
        for row in onsets.iter_rows(named=True):
            rows.append(("thermal readings", float(row["set_during"]),
                         (row["host"], row["gpu"]) in faulty["thermal"]))
        for row in clock_drops(gpu, window).iter_rows(named=True):
            unit = row["host"], row["gpu"]
            if unit not in faulty["thermal"]:  # its clock drop is the thermal cause's
                rows.append(("clock readings", float(row["dropped"]), unit in faulty["clock"]))
        for unit in sorted(set(rank_units.values())):
            now, reference, _ = sm_clocks(gpu, *unit, window)
            if now is not None and reference:
                rows.append(("clock drop", 1 - now / reference, unit in faulty["clock"]))
        for row in cnp_surges(nic, hosts, window).iter_rows(named=True):
            rows += [("CNP ratio", row["ratio"], row["host"] in faulty["nic"]),
                     ("CNP share", row["share"], row["host"] in faulty["nic"])]
        for row in cpu_rises(host, hosts, window).iter_rows(named=True):
            if row["rise"] is not None:
                rows += [("CPU rise", row["rise"], row["host"] in faulty["cpu"]),
                         ("CPU share", row["share"], row["host"] in faulty["cpu"])]
    return pl.DataFrame(rows, schema={"statistic": pl.String, "value": pl.Float64,
                                      "faulty": pl.Boolean}, orient="row")


def margin_table(measured: pl.DataFrame) -> pl.DataFrame:
    """Per statistic: its threshold, the faulty units (count, lowest, 5th percentile) and the
    healthy ones (count, 95th percentile, highest)."""
    table = measured.group_by("statistic").agg(
        faulty=pl.col("faulty").sum(),
        faulty_min=pl.col("value").filter("faulty").min(),
        faulty_p5=pl.col("value").filter("faulty").quantile(0.05),
        healthy=(~pl.col("faulty")).sum(),
        healthy_p95=pl.col("value").filter(~pl.col("faulty")).quantile(0.95),
        healthy_max=pl.col("value").filter(~pl.col("faulty")).max())
    order = pl.DataFrame({"statistic": list(THRESHOLDS),
                          "threshold": [float(v) for v, _ in THRESHOLDS.values()]})
    return order.join(table, on="statistic", how="left")


def rank_units(layout, hosts: list[str]) -> dict[int, tuple[str, int]]:
    """Each rank's (host, GPU) in a synthesized layout."""
    return {r: (hosts[layout.host_of(r)], layout.local_gpu(r)) for r in range(layout.world)}


def print_margins(datasets: list[Path], jobs) -> None:
    from tracekit.synth.run import JobRun

    measured = pl.concat([job_margins(str(path), rank_units(job.spec.layout,
                                                            JobRun(job.spec).hosts))
                          for path, job in zip(datasets, jobs, strict=True)], how="diagonal")
    if measured.is_empty():
        return
    print("evidence thresholds over the labeled fail-slows' windows "
          "(faulty: the labeled culprit; healthy: every other unit of the job)")
    print(f"  {'statistic':<17} {'threshold':>9} {'faulty n':>8} {'min':>9} {'p5':>9} "
          f"{'healthy n':>9} {'p95':>9} {'max':>9}")
    for row in margin_table(measured).iter_rows(named=True):
        values = [row[c] for c in ("faulty_min", "faulty_p5", "healthy_p95", "healthy_max")]
        shown = [f"{v:9.3g}" if v is not None else f"{'-':>9}" for v in values]
        print(f"  {row['statistic']:<17} {row['threshold']:9.3g} {row['faulty'] or 0:8d} "
              f"{shown[0]} {shown[1]} {row['healthy'] or 0:9d} {shown[2]} {shown[3]}")

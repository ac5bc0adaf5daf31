"""How far the faulty and the healthy units of a fresh-seed corpus sit from each evidence
threshold: every labeled fail-slow's window (its run and baseline, as attribution builds
them) measured with attribution's own statistics, the labeled culprit as faulty and every
other unit of the job as healthy."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from tracekit.attribute.evidence import CLOCK_DROP, CNP_SURGE, CPU_RISE_PCT, sm_clocks
from tracekit.attribute.telemetry import (
    CLOCK_READINGS,
    SUSTAINED_SHARE,
    THERMAL_READINGS,
    clock_drops,
    cnp_surges,
    cpu_rises,
    thermal_onsets,
)
from tracekit.attribute.windows import episode_runs
from tracekit.core.dataset import open_dataset
from tracekit.core.identity import link_hosts

THRESHOLDS = {
    "thermal readings": (THERMAL_READINGS, "distinct DCGM readings with a thermal reason"),
    "clock readings": (CLOCK_READINGS, "distinct DCGM readings with the clock dropped"),
    "CNP ratio": (CNP_SURGE, "median CNP rate during over before"),
    "CNP share": (SUSTAINED_SHARE, "share of the episode's scrapes with the surge"),
    "CPU rise": (CPU_RISE_PCT, "points of CPU busy over before / peers"),
    "CPU share": (SUSTAINED_SHARE, "share of the episode's scrapes with the rise"),
    "clock drop": (CLOCK_DROP, "SM clock drop under its reference"),
}
"""Statistic -> (threshold, what it measures); a unit is flagged at or above it."""


def _culprits(cause: str, target: str, hosts: dict[int, tuple[str, int]]) -> dict[str, set]:
    """The units a label names for each signal (the parts of a compound label's cause and
    target pair up): thermal and clock GPUs (host, gpu), CPU hosts, NIC hosts. A unit of the
    job that a signal's rule should not flag (a degraded GPU for the thermal rule) is healthy
    for it."""
    units: dict[str, set] = {"thermal": set(), "clock": set(), "cpu": set(), "nic": set()}
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
        elif kind == "nic":
            units["nic"].add(value)
    return units


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
    first = dataset.table("iterations").select(pl.col("t_start_ns").min()).collect().item()
    runs = episode_runs(labels.with_columns(detector=pl.lit("labels")))
    rows = []
    for label, run in zip(labels.iter_rows(named=True), runs, strict=True):
        window = run.window(first, label["t_end_ns"])
        faulty = _culprits(label["cause"], label["target"], rank_units)
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

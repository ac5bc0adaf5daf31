"""Scale-out: ingest, iteration reconstruction, detection and attribution of a synthetic job
with no cluster, on a Dask LocalCluster of one worker and of two (``make bench-scale``).

The job is ``TRACEKIT_BENCH_SCALE_RANKS`` ranks (default 256, layout tp8-dp8-pp4) of
``TRACEKIT_BENCH_SCALE_ITERATIONS`` iterations (default 10,000) in the hook CSV format, with one
GPU throttled for a tenth of the run mid-way (so attribution has an episode to judge), made by
``tracekit.synth`` once and kept under ``build/bench-scale/``. Each configuration runs in a
fresh process on a fresh dataset, so its wall time includes starting the cluster and its peak
memory is its own. Printed: wall times, speed-up of ``local:2`` over ``local:1`` (the goal on a
2-core machine is 1.8x) and over no cluster, peak memory per worker, and a projection for N
nodes from the per-partition costs measured without a cluster.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

RANKS = int(os.environ.get("TRACEKIT_BENCH_SCALE_RANKS", "256"))
ITERATIONS = int(os.environ.get("TRACEKIT_BENCH_SCALE_ITERATIONS", "10000"))
LAYOUTS = {256: "tp8-dp8-pp4", 64: "tp8-dp4-pp2", 16: "tp4-dp2-pp2", 8: "tp2-dp2-pp2"}
CONFIGS = (None, "local:1", "local:2")
WORKERS_PER_NODE = 16
"""Projection: Dask workers per node (one per core of a 16-core node, as this benchmark's own
workers are single-threaded processes)."""
PROJECTED_NODES = (1, 4, 16, 64)
PROJECTED_RANKS = 1024
"""The issue's large job: 1,024 ranks of the same iterations, one hook CSV file per rank."""
WORK = Path("build") / "bench-scale"
RUN_BY_DEFAULT = False
"""At full size this writes ~11 GB of CSV: run it with ``make bench-scale``, not ``make bench``."""


def synthesize() -> Path:
    """The job's hook CSV folder, generated on first use."""
    from tracekit.synth.faults import Injection
    from tracekit.synth.job import JobSpec, generate_job
    from tracekit.synth.layout import Layout

    folder = WORK / f"job-{RANKS}x{ITERATIONS}-thermal"
    if not (folder / "synth.json").is_file():
        layout = LAYOUTS.get(RANKS)
        if layout is None:
            raise SystemExit(f"TRACEKIT_BENCH_SCALE_RANKS must be one of {sorted(LAYOUTS)}")
        fault = Injection.parse(f"thermal:rank=5@{ITERATIONS // 2}+{ITERATIONS // 10}x1.5")
        generate_job(folder, JobSpec(Layout.parse(layout), ITERATIONS, seed=11,
                                     injections=(fault,), monitoring=False))
    return folder / "ranks"


def run_one(cluster: str | None, ranks: Path, target: Path) -> dict:
    """One configuration, in this (fresh) process: stage wall times and peak memory."""
    from tracekit.attribute import attribute_dataset
    from tracekit.dataset import open_dataset
    from tracekit.detect import detect_dataset
    from tracekit.ingest.pipeline import ingest
    from tracekit.iterations import reconstruct_dataset
    from tracekit.parallel import open_executor

    started = time.perf_counter()
    with open_executor(cluster) as executor:
        ready = time.perf_counter()
        summary = ingest([ranks], target, job="bench-scale", executor=executor)
        ingested = time.perf_counter()
        result = reconstruct_dataset(open_dataset(target), executor=executor)
        reconstructed = time.perf_counter()
        detection = detect_dataset(open_dataset(target), executor=executor)
        detected = time.perf_counter()
        attribution = attribute_dataset(open_dataset(target), executor)
        attributed = time.perf_counter()
        peaks = executor.worker_peak_rss_bytes()
        built = open_dataset(target).manifest["build"]
    return {
        "startup_s": ready - started, "ingest_s": ingested - ready,
        "iterations_s": reconstructed - ingested, "detect_s": detected - reconstructed,
        "attribute_s": attributed - detected, "total_s": attributed - started,
        "partitions": len(summary.sources), "failed": len(summary.failed),
        "ranks_per_block": built["detect"]["ranks_per_block"],
        "events": detection.events.height,
        "rows": sum(s.total_rows for s in summary.sources),
        "iteration_rows": result.iterations.height,
        "episodes": attribution.episodes.sort("detector", "episode").select(
            "detector", "start_iteration", "cause", "target").rows(),
        "bytes": sum(f.stat().st_size for f in ranks.iterdir()),
        "peak_rss_mib": {w: round(b / 2**20) for w, b in peaks.items()},
    }


def _measure(cluster: str | None, ranks: Path) -> dict:
    target = WORK / f"ds-{cluster or 'none'}".replace(":", "")
    shutil.rmtree(target, ignore_errors=True)
    load = os.getloadavg()[0]
    out = subprocess.run([sys.executable, "-m", "benchmarks.bench_scale", "--run",
                          cluster or "none", str(ranks), str(target)],
                         check=True, capture_output=True, text=True)
    shutil.rmtree(target, ignore_errors=True)
    return {**json.loads(out.stdout.strip().splitlines()[-1]),
            "load": (load, os.getloadavg()[0])}


def _projection(none: dict) -> list[str]:
    """Wall time for PROJECTED_RANKS ranks on N nodes: partitions run in waves of
    N x WORKERS_PER_NODE, each costing what one partition cost here without a cluster (detect:
    the work grows with the ranks and spreads over at most one worker per detector x block
    partition). Attribution cuts every episode's signals on the client, so it is projected to
    grow with the ranks on one machine."""
    ingest_per_file = none["ingest_s"] / none["partitions"]
    iterations_per_rank = none["iterations_s"] / RANKS
    detect_work_s = none["detect_s"] * PROJECTED_RANKS / RANKS
    detect_partitions = sum(math.ceil(PROJECTED_RANKS / block)
                            for block in none["ranks_per_block"].values())
    attribute_s = none["attribute_s"] * PROJECTED_RANKS / RANKS
    lines = []
    for nodes in PROJECTED_NODES:
        workers = nodes * WORKERS_PER_NODE
        waves = math.ceil(PROJECTED_RANKS / workers)
        ingest_s = waves * ingest_per_file
        batches = math.ceil(PROJECTED_RANKS / 16)
        iterations_s = math.ceil(batches / workers) * 16 * iterations_per_rank
        detect_s = detect_work_s / min(workers, detect_partitions)
        lines.append(f"  {nodes:>3} nodes x {WORKERS_PER_NODE} workers: ingest ~{ingest_s:,.0f} s,"
                     f" iterations ~{iterations_s:,.0f} s, detect ~{detect_s:,.0f} s, attribute "
                     f"~{attribute_s:,.0f} s (client)")
    return lines


def main() -> None:
    ranks = synthesize()
    results = {cluster: _measure(cluster, ranks) for cluster in CONFIGS}
    none = results[None]
    mb = none["bytes"] / 1e6
    print(f"job: {RANKS} ranks x {ITERATIONS:,} iterations, {mb:,.0f} MB hook CSV, "
          f"{none['rows']:,} collective rows, {none['partitions']} files")
    print(f"{'cluster':<8} {'startup':>8} {'ingest':>8} {'MB/s':>6} {'iterations':>10} "
          f"{'detect':>8} {'attribute':>9} {'total':>8}  {'load avg':>9}  peak RSS per worker "
          "(MiB)")
    for cluster, r in results.items():
        assert r["rows"] == none["rows"] and r["iteration_rows"] == none["iteration_rows"]
        assert (r["events"], r["episodes"]) == (none["events"], none["episodes"])
        assert r["failed"] == 0
        print(f"{cluster or 'none':<8} {r['startup_s']:>7.1f}s {r['ingest_s']:>7.1f}s "
              f"{mb / r['ingest_s']:>6.0f} {r['iterations_s']:>9.1f}s {r['detect_s']:>7.1f}s "
              f"{r['attribute_s']:>8.1f}s {r['total_s']:>7.1f}s  {r['load'][0]:>4.1f}-"
              f"{r['load'][1]:<4.1f}  {', '.join(map(str, r['peak_rss_mib'].values()))}")
    found = {}
    for detector, *_ in none["episodes"]:
        found[detector] = found.get(detector, 0) + 1
    print(f"identical in every configuration: {none['events']:,} change events, episodes "
          f"{found or 'none'} and their verdicts")
    one, two = results["local:1"], results["local:2"]
    for stage in ("ingest_s", "iterations_s", "detect_s", "attribute_s", "total_s"):
        print(f"speed-up {stage.removesuffix('_s')}: local:2 / local:1 = "
              f"{one[stage] / two[stage]:.2f}x (goal 1.8x), local:2 / no cluster = "
              f"{none[stage] / two[stage]:.2f}x")
    print(f"projection for a {PROJECTED_RANKS}-rank job of the same iterations, from the "
          f"per-partition costs without a cluster:")
    print("\n".join(_projection(none)))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--run"]:
        cluster, ranks, target = sys.argv[2:5]
        print(json.dumps(run_one(None if cluster == "none" else cluster, Path(ranks),
                                 Path(target))))
    else:
        main()

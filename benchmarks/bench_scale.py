"""Scale-out: ingest and iteration reconstruction of a synthetic job with no cluster, on a Dask
LocalCluster of one worker and of two (``make bench-scale``).

The job is ``TRACEKIT_BENCH_SCALE_RANKS`` ranks (default 256, layout tp8-dp8-pp4) of
``TRACEKIT_BENCH_SCALE_ITERATIONS`` iterations (default 10,000) in the hook CSV format, made by
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
    from tracekit.synth.job import JobSpec, generate_job
    from tracekit.synth.layout import Layout

    folder = WORK / f"job-{RANKS}x{ITERATIONS}"
    if not (folder / "synth.json").is_file():
        layout = LAYOUTS.get(RANKS)
        if layout is None:
            raise SystemExit(f"TRACEKIT_BENCH_SCALE_RANKS must be one of {sorted(LAYOUTS)}")
        generate_job(folder, JobSpec(Layout.parse(layout), ITERATIONS, seed=11,
                                     monitoring=False))
    return folder / "ranks"


def run_one(cluster: str | None, ranks: Path, target: Path) -> dict:
    """One configuration, in this (fresh) process: stage wall times and peak memory."""
    from tracekit.dataset import open_dataset
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
        peaks = executor.worker_peak_rss_bytes()
    return {
        "startup_s": ready - started, "ingest_s": ingested - ready,
        "iterations_s": reconstructed - ingested, "total_s": reconstructed - started,
        "partitions": len(summary.sources), "failed": len(summary.failed),
        "rows": sum(s.total_rows for s in summary.sources),
        "iteration_rows": result.iterations.height,
        "bytes": sum(f.stat().st_size for f in ranks.iterdir()),
        "peak_rss_mib": {w: round(b / 2**20) for w, b in peaks.items()},
    }


def _measure(cluster: str | None, ranks: Path) -> dict:
    target = WORK / f"ds-{cluster or 'none'}".replace(":", "")
    shutil.rmtree(target, ignore_errors=True)
    out = subprocess.run([sys.executable, "-m", "benchmarks.bench_scale", "--run",
                          cluster or "none", str(ranks), str(target)],
                         check=True, capture_output=True, text=True)
    shutil.rmtree(target, ignore_errors=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _projection(none: dict) -> list[str]:
    """Wall time for PROJECTED_RANKS ranks on N nodes: partitions run in waves of
    N x WORKERS_PER_NODE, each costing what one partition cost here without a cluster."""
    ingest_per_file = none["ingest_s"] / none["partitions"]
    iterations_per_rank = none["iterations_s"] / RANKS
    lines = []
    for nodes in PROJECTED_NODES:
        workers = nodes * WORKERS_PER_NODE
        waves = math.ceil(PROJECTED_RANKS / workers)
        ingest_s = waves * ingest_per_file
        batches = math.ceil(PROJECTED_RANKS / 16)
        iterations_s = math.ceil(batches / workers) * 16 * iterations_per_rank
        lines.append(f"  {nodes:>3} nodes x {WORKERS_PER_NODE} workers: ingest ~{ingest_s:,.0f} s,"
                     f" iterations ~{iterations_s:,.0f} s")
    return lines


def main() -> None:
    ranks = synthesize()
    results = {cluster: _measure(cluster, ranks) for cluster in CONFIGS}
    none = results[None]
    mb = none["bytes"] / 1e6
    print(f"job: {RANKS} ranks x {ITERATIONS:,} iterations, {mb:,.0f} MB hook CSV, "
          f"{none['rows']:,} collective rows, {none['partitions']} files")
    print(f"{'cluster':<8} {'startup':>8} {'ingest':>8} {'MB/s':>6} {'iterations':>10} "
          f"{'total':>8}  peak RSS per worker (MiB)")
    for cluster, r in results.items():
        assert r["rows"] == none["rows"] and r["iteration_rows"] == none["iteration_rows"]
        assert r["failed"] == 0
        print(f"{cluster or 'none':<8} {r['startup_s']:>7.1f}s {r['ingest_s']:>7.1f}s "
              f"{mb / r['ingest_s']:>6.0f} {r['iterations_s']:>9.1f}s {r['total_s']:>7.1f}s  "
              f"{', '.join(map(str, r['peak_rss_mib'].values()))}")
    one, two = results["local:1"], results["local:2"]
    for stage in ("ingest_s", "iterations_s", "total_s"):
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

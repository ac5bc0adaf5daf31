"""Scale-out: ingest, iteration reconstruction, detection and attribution of a synthetic job
with no cluster, on a Dask LocalCluster of one worker and of two (``make bench-scale``).

The job is ``TRACEKIT_BENCH_SCALE_RANKS`` ranks (default 256, layout tp8-dp8-pp4) of
``TRACEKIT_BENCH_SCALE_ITERATIONS`` iterations (default 10,000) in the hook CSV format, one file
per rank, with its hosts' monitoring (dcgm-exporter, node_exporter, mlx5 counters, ipmitool) and
one GPU throttled for a tenth of the run mid-way, so attribution has an episode to judge and the
evidence to judge it by; made by ``tracekit.synth`` once and kept under ``build/bench-scale/``.
Every run ingests the whole job folder, as ``tracekit analyze JOB`` does. Each configuration
runs in a fresh process on a fresh dataset, so its wall time includes starting the cluster
and its peak memory is its own. Printed: wall times, CPU seconds of the client and of the
workers per stage (the client's share is the serial part that no cluster speeds up), speed-up
of ``local:2`` over ``local:1`` (the goal on a 2-core machine is 1.8x) and over no cluster,
peak memory per worker, and a projection for N nodes from the CPU seconds of ``local:1``.

``TRACEKIT_BENCH_SCALE_BASELINE=<checkout>`` also runs every configuration with the tracekit of
another checkout (e.g. ``git worktree add /tmp/base HEAD~5``), interleaved with this one so
both see the same load; ``TRACEKIT_BENCH_REPEAT=N`` (default 3) runs each N times and prints
every figure as min / median / max of the runs; ``TRACEKIT_BENCH_SCALE_CONFIGS=local:1`` runs only
the configurations named (of ``none,local:1,local:2``).

``TRACEKIT_BENCH_SCALE_STAGE=attribute`` measures the attribute stage alone instead: the job
is ingested, reconstructed and detected once (no cluster), then each run attributes it in a
fresh one-thread process, with no cluster and as a worker (the local loop told it is a
one-worker cluster, so the partitions leave their rows in Parquet parts, as on a cluster),
and prints peak RSS and CPU seconds.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

RANKS = int(os.environ.get("TRACEKIT_BENCH_SCALE_RANKS", "256"))
ITERATIONS = int(os.environ.get("TRACEKIT_BENCH_SCALE_ITERATIONS", "10000"))
LAYOUTS = {256: "tp8-dp8-pp4", 64: "tp8-dp4-pp2", 16: "tp4-dp2-pp2", 8: "tp2-dp2-pp2"}
CONFIGS = tuple(None if name == "none" else name for name in os.environ.get(
    "TRACEKIT_BENCH_SCALE_CONFIGS", "none,local:1,local:2").split(","))
"""What runs: no cluster, and Dask LocalClusters; the projection needs ``local:1``, the speed-up
``local:1`` and ``local:2``."""
WORKERS_PER_NODE = 16
"""Projection: Dask workers per node (one per core of a 16-core node, as this benchmark's own
workers are single-threaded processes)."""
PROJECTED_NODES = (1, 4, 16, 64, 100)
PROJECTED_RANKS, PROJECTED_ITERATIONS = 1024, 10_000
"""The issue's large job: 1,024 ranks x 10,000 iterations, one hook CSV file per rank. The
projection is exact in the partitions' own size when the measured job has the same iterations
(a per-rank file, a batch of ranks over the whole run, a block of ranks' series are then the
same work), so only their number is scaled: measure at 10,000 iterations and as many ranks as
the disk allows (64 ranks: 4.3 GB of CSV)."""
THERMAL_SLOWDOWN = 3.0
"""GPU slowdown of the throttled rank: x1.5 slowed a 64-rank job by under 5 %, which is no
fail-slow (the labels' threshold is 10 %), leaving attribution nothing to judge; x3 slows it
by about a fifth. In the 256-rank job x3 stays under the labels' 10 % (one GPU of 256), and
only ``bocd`` reports an episode (detection's threshold is 5 %), which attribution judges."""
WORK = Path("build") / "bench-scale"
RUN_BY_DEFAULT = False
"""At full size this writes ~11 GB of CSV: run it with ``make bench-scale``, not ``make bench``."""


def synthesize() -> Path:
    """The job's folder (per-rank hook CSV files and the hosts' monitoring), generated on first
    use."""
    from tracekit.synth.faults import Injection
    from tracekit.synth.job import JobSpec, generate_job
    from tracekit.synth.layout import Layout

    folder = WORK / f"job-{RANKS}x{ITERATIONS}-thermal{THERMAL_SLOWDOWN:g}-monitored"
    if not (folder / "synth.json").is_file():
        layout = LAYOUTS.get(RANKS)
        if layout is None:
            raise SystemExit(f"TRACEKIT_BENCH_SCALE_RANKS must be one of {sorted(LAYOUTS)}")
        fault = Injection.parse(f"thermal:rank=5@{ITERATIONS // 2}+{ITERATIONS // 10}"
                                 f"x{THERMAL_SLOWDOWN}")
        generate_job(folder, JobSpec(Layout.parse(layout), ITERATIONS, seed=11,
                                     injections=(fault,), monitoring=True))
    return folder


STAGES = ("ingest", "iterations", "detect", "attribute")


def _cpu_s() -> tuple[float, float]:
    """CPU seconds (user + system) so far of this process (the client) and of its live child
    processes (a LocalCluster's workers and nannies)."""
    import psutil

    me = psutil.Process()
    own = me.cpu_times()
    children = 0.0
    for child in me.children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.NoSuchProcess:
            continue
        children += times.user + times.system
    return own.user + own.system, children


def run_one(cluster: str | None, job: Path, target: Path) -> dict:
    """One configuration, in this (fresh) process: per stage wall time and CPU seconds of the
    client and of the workers, and peak memory."""
    from tracekit.attribute import attribute_dataset
    from tracekit.core.dataset import open_dataset
    from tracekit.core.parallel import open_executor
    from tracekit.detect import detect_dataset
    from tracekit.ingest.pipeline import ingest
    from tracekit.iterations import reconstruct_dataset

    marks = [(time.perf_counter(), *_cpu_s())]
    with open_executor(cluster) as executor:
        marks.append((time.perf_counter(), *_cpu_s()))
        summary = ingest([job], target, job="bench-scale", executor=executor)
        marks.append((time.perf_counter(), *_cpu_s()))
        result = reconstruct_dataset(open_dataset(target), executor=executor)
        marks.append((time.perf_counter(), *_cpu_s()))
        detection = detect_dataset(open_dataset(target), executor=executor)
        marks.append((time.perf_counter(), *_cpu_s()))
        attribution = attribute_dataset(open_dataset(target), executor)
        marks.append((time.perf_counter(), *_cpu_s()))
        peaks = executor.worker_peak_rss_bytes()
        built = open_dataset(target).manifest["build"]
    stages = {}
    for stage, before, after in zip(("startup", *STAGES), marks[:-1], marks[1:], strict=True):
        stages[f"{stage}_s"] = after[0] - before[0]
        stages[f"{stage}_client_cpu_s"] = after[1] - before[1]
        stages[f"{stage}_workers_cpu_s"] = after[2] - before[2]
    return {
        **stages, "total_s": marks[-1][0] - marks[0][0],
        "partitions": {stage: built.get(stage, {}).get("partitions") for stage in STAGES},
        "failed": len(summary.failed),
        "ranks_per_block": built["detect"]["ranks_per_block"],
        "events": detection.events.height,
        "rows": sum(s.total_rows for s in summary.sources),
        "iteration_rows": result.iterations.height,
        "episodes": attribution.episodes.sort("detector", "episode").select(
            "detector", "start_iteration", "cause", "target").rows(),
        "bytes": sum(f.stat().st_size for f in job.rglob("*") if f.is_file()),
        "peak_rss_mib": {w: round(b / 2**20) for w, b in peaks.items()},
    }


def _measure(cluster: str | None, job: Path, code: Path | None = None) -> dict:
    """One configuration in a fresh process; ``code``: a checkout of tracekit to run instead of
    this one (the baseline of ``TRACEKIT_BENCH_SCALE_BASELINE``)."""
    target = WORK / f"ds-{cluster or 'none'}".replace(":", "")
    shutil.rmtree(target, ignore_errors=True)
    load = os.getloadavg()[0]
    environment = dict(os.environ)
    if code is not None:
        environment["PYTHONPATH"] = str(code)
    # run as a script, so that the folder on sys.path first is this one, not a checkout
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--run",
                          cluster or "none", str(job.resolve()), str(target.resolve())],
                         check=True, capture_output=True, text=True, env=environment)
    shutil.rmtree(target, ignore_errors=True)
    return {**json.loads(out.stdout.strip().splitlines()[-1]),
            "load": (load, os.getloadavg()[0])}


def _spread(values: list[float], digits: int = 1) -> str:
    """``min/median/max`` of repeated runs (a shared machine's noise only ever adds: the min
    is the closest to the work, the spread how much to trust it)."""
    return "/".join(f"{v:,.{digits}f}" for v in (min(values), statistics.median(values),
                                                 max(values)))


def _largest_worker_mib(run: dict) -> int:
    return max(run["peak_rss_mib"].values())


def _partitions(stage: str, ranks: int, measured: dict, workers: int) -> int:
    """Partitions of ``stage`` for a job of ``ranks`` ranks on ``workers`` workers, by the
    rules tracekit partitions with (tracekit.core.parallel.partition_size); ``measured``: a run
    of the benchmark's job (its files per rank, its detection blocks)."""
    from tracekit.attribute.job_signals import RANKS_PER_BATCH as ATTRIBUTE_RANKS
    from tracekit.core.parallel import PARTITIONS_PER_WORKER, RANKS_PER_BLOCK
    from tracekit.detect.episodes import JOB_DETECTORS
    from tracekit.iterations.reconstruct import RANKS_PER_BATCH as ITERATION_RANKS

    def batches(most: int) -> int:
        size = most if workers <= 1 else max(
            1, min(most, math.ceil(ranks / (workers * PARTITIONS_PER_WORKER))))
        return math.ceil(ranks / size)

    if stage == "ingest":  # a file per rank and a few per host: as many per rank as measured
        return math.ceil(measured["partitions"]["ingest"] * ranks / RANKS)
    if stage == "iterations":
        return batches(ITERATION_RANKS)
    if stage == "detect":  # each detector: its blocks of ranks and the job-level series;
        # the peer comparison: its blocks of ranks' own times
        return (len(JOB_DETECTORS) * (1 + math.ceil(ranks / measured["ranks_per_block"]))
                + math.ceil(ranks / RANKS_PER_BLOCK))
    return batches(ATTRIBUTE_RANKS)  # the rank batches; group bins are as many or fewer


def _cost_model(ones: list[dict]) -> list[str]:
    """Each stage's cost per partition in ``local:1`` (one single-threaded worker, so its CPU
    seconds are the partitions' cost on one core) and at the projected size, over the runs. A
    partition is a batch of ranks over all iterations, so its cost grows with the iterations
    and the ranks it holds, and the client's with ranks x iterations: the doubling benchmark
    (``benchmarks/bench_doubling.py``) checks that every stage is linear in both."""
    scale = PROJECTED_RANKS * PROJECTED_ITERATIONS / (RANKS * ITERATIONS)
    lines = [f"per-partition cost model, from local:1 ({RANKS} x {ITERATIONS:,}) to "
             f"{PROJECTED_RANKS:,} x {PROJECTED_ITERATIONS:,} (x{scale:,.0f} the "
             "rank-iterations), CPU-s min/median/max:"]
    for stage in STAGES:
        measured = _partitions(stage, RANKS, ones[0], 1)
        projected = _partitions(stage, PROJECTED_RANKS, ones[0], 1)
        each = [one[f"{stage}_workers_cpu_s"] / measured for one in ones]
        client = [one[f"{stage}_client_cpu_s"] for one in ones]
        lines.append(
            f"  {stage:<10} {measured:>4} partitions x {_spread(each, 2)} -> {projected:>5} x "
            f"{_spread([c * scale * measured / projected for c in each], 2)}; client "
            f"{_spread(client)} -> {_spread([c * scale for c in client], 0)}")
    return lines


def _projected_s(one: dict, workers: int) -> dict[str, float]:
    """Wall seconds of each stage of the projected job on ``workers`` workers, from one
    ``local:1`` run: the client's CPU seconds run alone (Amdahl's serial part), the workers'
    CPU seconds spread over min(workers, partitions). Start-up and data transfer are left out
    (and on this machine the client shares the workers' cores), so this is a lower bound."""
    scale = PROJECTED_RANKS * PROJECTED_ITERATIONS / (RANKS * ITERATIONS)
    return {stage: scale * (one[f"{stage}_client_cpu_s"] + one[f"{stage}_workers_cpu_s"]
                            / min(workers, _partitions(stage, PROJECTED_RANKS,
                                                       one, workers)))
            for stage in STAGES}


def _projection(ones: list[dict]) -> list[str]:
    """The projected job's wall time per setup, min/median/max over the ``local:1`` runs."""
    setups = [("this machine, local:2", 2)] + [
        (f"{nodes} nodes x {WORKERS_PER_NODE} workers", nodes * WORKERS_PER_NODE)
        for nodes in PROJECTED_NODES]
    lines = []
    for name, workers in setups:
        walls = [_projected_s(one, workers) for one in ones]
        parts = ", ".join(f"{stage} {_spread([w[stage] for w in walls], 0)} s"
                          for stage in STAGES)
        lines.append(f"  {name:>26}: {parts}; total "
                     f"{_spread([sum(w.values()) / 60 for w in walls])} min")
    return lines


def main() -> None:
    if os.environ.get("TRACEKIT_BENCH_SCALE_STAGE") == "attribute":
        main_alone()
        return
    job = synthesize()
    baseline = os.environ.get("TRACEKIT_BENCH_SCALE_BASELINE")
    repeats = int(os.environ.get("TRACEKIT_BENCH_REPEAT", "3"))
    codes = {"this": None, **({"baseline": Path(baseline).resolve()} if baseline else {})}
    runs: dict[tuple[str, str | None], list[dict]] = {}
    for _ in range(repeats):  # interleaved, so both codes see the same load
        for cluster in CONFIGS:
            for name, code in codes.items():
                runs.setdefault((name, cluster), []).append(_measure(cluster, job, code))
    none = runs["this", CONFIGS[0]][0]
    for (name, _), done in runs.items():
        for r in done:
            assert r["rows"] == none["rows"] and r["iteration_rows"] == none["iteration_rows"]
            assert (r["events"], r["episodes"]) == (none["events"], none["episodes"]), name
            assert r["failed"] == 0
    mb = none["bytes"] / 1e6
    print(f"job: {RANKS} ranks x {ITERATIONS:,} iterations, {mb:,.0f} MB of hook CSV and "
          "monitoring, "
          f"{none['rows']:,} collective rows, {none['partitions']['ingest']} files; "
          f"min/median/max of {repeats} run(s); baseline: "
          f"{baseline or 'none (set TRACEKIT_BENCH_SCALE_BASELINE to a checkout to compare)'}")
    print(f"{'code':<9} {'cluster':<8} {'total s':>17} {'ingest MB/s':>13} {'load avg':>9}  "
          "peak RSS of the largest worker, MiB (no cluster: the process)")
    for (name, cluster), done in runs.items():
        loads = [load for r in done for load in r["load"]]
        print(f"{name:<9} {cluster or 'none':<8} {_spread([r['total_s'] for r in done]):>17} "
              f"{_spread([mb / r['ingest_s'] for r in done], 0):>13} "
              f"{min(loads):>4.1f}-{max(loads):<4.1f}  "
              f"{_spread([_largest_worker_mib(r) for r in done], 0)}")
    found = {}
    for detector, *_ in none["episodes"]:
        found[detector] = found.get(detector, 0) + 1
    verdicts = sorted({f"{cause} at {target}" for *_, cause, target in none["episodes"]})
    print(f"identical in every configuration and run: {none['events']:,} change events, "
          f"episodes {found or 'none'}, verdicts {', '.join(verdicts) or 'none'}")
    print("per stage, min/median/max: wall s | client CPU-s | workers CPU-s")
    for (name, cluster), done in runs.items():
        for stage in STAGES:
            print(f"{name:<9} {cluster or 'none':<8} {stage:<10} "
                  + " | ".join(_spread([r[f"{stage}{field}"] for r in done])
                               for field in ("_s", "_client_cpu_s", "_workers_cpu_s")))
    for name in codes if {"local:1", "local:2"} <= set(CONFIGS) else ():
        ones, twos = runs[name, "local:1"], runs[name, "local:2"]
        print(f"speed-up local:2 / local:1 ({name}; goal 1.8x), min/median/max over pairs of "
              "runs: " + ", ".join(
                  f"{stage.removesuffix('_s')} "
                  f"{_spread([o[stage] / t[stage] for o, t in zip(ones, twos, strict=True)], 2)}x"
                  for stage in (*(f"{s}_s" for s in STAGES), "total_s")))
    if "local:1" not in CONFIGS:
        return
    ones = runs["this", "local:1"]
    print("\n".join(_cost_model(ones)))
    print(f"projection for {PROJECTED_RANKS:,} ranks x {PROJECTED_ITERATIONS:,} iterations "
          "(client alone, workers' CPU spread over the partitions; a lower bound), "
          "min/median/max:")
    print("\n".join(_projection(ones)))


ALONE_MODES = ("none", "worker")
"""How the attribute stage alone runs: without a cluster, and as one worker."""


def prepare_alone(job: Path, target: Path) -> None:
    """The stages before attribution, once, without a cluster."""
    from tracekit.core.dataset import open_dataset
    from tracekit.detect import detect_dataset
    from tracekit.ingest.pipeline import ingest
    from tracekit.iterations import reconstruct_dataset

    ingest([job], target, job="bench-scale")
    reconstruct_dataset(open_dataset(target))
    detect_dataset(open_dataset(target))


def attribute_alone(mode: str, target: Path) -> dict:
    """The attribute stage alone, in this (fresh) process: CPU seconds, peak RSS, verdicts."""
    import resource

    from tracekit.attribute import attribute_dataset
    from tracekit.core.dataset import open_dataset
    from tracekit.core.parallel import LocalExecutor

    executor = LocalExecutor()
    if mode == "worker":
        executor.description.update(workers=1, engine="dask")
    before = resource.getrusage(resource.RUSAGE_SELF)
    episodes = attribute_dataset(open_dataset(target), executor).episodes
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu_s": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
            "peak_mib": after.ru_maxrss / 1024,
            "verdicts": episodes.sort("detector", "episode").select(
                "detector", "kind", "cause", "target", "confidence").rows()}


def main_alone() -> None:
    job = synthesize()
    target = WORK / f"ds-alone-{RANKS}x{ITERATIONS}"
    if not (target / "episodes").is_dir():
        shutil.rmtree(target, ignore_errors=True)
        subprocess.run([sys.executable, str(Path(__file__).resolve()), "--prepare",
                        str(job.resolve()), str(target.resolve())], check=True)
    baseline = os.environ.get("TRACEKIT_BENCH_SCALE_BASELINE")
    codes = {"this": None, **({"baseline": Path(baseline).resolve()} if baseline else {})}
    runs: dict[tuple[str, str], list[dict]] = {}
    for _ in range(int(os.environ.get("TRACEKIT_BENCH_REPEAT", "3"))):
        for mode in ALONE_MODES:
            for name, code in codes.items():
                environment = {**os.environ, "POLARS_MAX_THREADS": "1", "OMP_NUM_THREADS": "1",
                               "MKL_NUM_THREADS": "1",
                               **({"PYTHONPATH": str(code)} if code else {})}
                out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--alone",
                                      mode, str(target.resolve())], check=True,
                                     capture_output=True, text=True, env=environment)
                runs.setdefault((name, mode), []).append(
                    json.loads(out.stdout.strip().splitlines()[-1]))
    first = runs["this", "none"][0]["verdicts"]
    assert all(r["verdicts"] == first for done in runs.values() for r in done)
    print(f"attribute alone, {RANKS} ranks x {ITERATIONS:,} iterations, one thread, "
          f"min/median/max; verdicts identical in every run: {len(first)} episodes")
    print(f"{'code':<9} {'cluster':<8} {'peak RSS MiB':>20} {'CPU-s':>17}")
    for (name, mode), done in runs.items():
        print(f"{name:<9} {mode:<8} {_spread([r['peak_mib'] for r in done], 0):>20} "
              f"{_spread([r['cpu_s'] for r in done], 2):>17}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--run"]:
        cluster, job, target = sys.argv[2:5]
        print(json.dumps(run_one(None if cluster == "none" else cluster, Path(job),
                                 Path(target))))
    elif sys.argv[1:2] == ["--prepare"]:
        prepare_alone(Path(sys.argv[2]), Path(sys.argv[3]))
    elif sys.argv[1:2] == ["--alone"]:
        print(json.dumps(attribute_alone(sys.argv[2], Path(sys.argv[3]))))
    else:
        main()

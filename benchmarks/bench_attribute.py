"""Attribution cost: a synthesized job with one injected fail-slow (a thermal GPU) on
tp2-dpN-pp2, ingested (hook CSV + monitoring), its iterations reconstructed and detected
(bocd+v), then ``attribute_dataset`` timed in a child process (so its peak RSS is its own),
against the baseline of only reading the ``collectives`` table back from Parquet (the floor:
attribution must read every call at least once). Also times the per-job signal builders
attribution runs before deciding episodes (communicator groups + instances, own-time gaps),
and says whether the verdict named the injected culprit.

Sizes: ``TRACEKIT_BENCH_ATTR_RANKS`` (a multiple of 4; default 32 = tp2-dp8-pp2) x
``TRACEKIT_BENCH_ATTR_ITERATIONS`` (default 3,000; 5.6 M calls); about a minute on 2 cores.
``--profile`` prints the top cProfile entries of the attribution (cumulative time).
"""

from __future__ import annotations

import cProfile
import os
import pstats
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

CULPRIT_RANK = 5
"""Injected thermal GPU (tp rank 1 of DP replica 2, pipeline stage 0)."""


def _prepare(root: Path, ranks: int, iterations: int) -> tuple[Path, int]:
    """Synthesize, ingest, reconstruct and detect; return the dataset and its call count."""
    from tracekit.core.dataset import open_dataset
    from tracekit.detect import detect_dataset
    from tracekit.ingest.pipeline import ingest
    from tracekit.iterations import reconstruct_dataset
    from tracekit.synth.faults import Injection
    from tracekit.synth.job import JobSpec, generate_job
    from tracekit.synth.layout import Layout

    start, length = iterations // 2, iterations // 4
    spec = JobSpec(Layout.parse(f"tp2-dp{ranks // 4}-pp2", gpus_per_host=4), iterations, 5,
                   (Injection.parse(f"thermal:rank={CULPRIT_RANK}@{start}+{length}x2.0"),),
                   job="bench-attr")
    generate_job(root / "job", spec)
    dataset = root / "ds"
    ingest([root / "job" / "ranks", root / "job" / "monitoring"], dataset, job="bench-attr")
    reconstruct_dataset(open_dataset(dataset))
    detect_dataset(dataset, ["bocd+v"])
    calls = open_dataset(dataset).table("collectives").select(pl.len()).collect().item()
    return dataset, calls


def _timed(function) -> tuple[float, object]:
    started = time.perf_counter()
    result = function()
    return time.perf_counter() - started, result


def _signal_builders_s(dataset: Path) -> tuple[float, float]:
    """Seconds of the per-job signals attribution builds before any episode: communicator
    groups and instances (``member_calls`` + ``collective_instances``), own-time gaps."""
    from tracekit.attribute.arrival import call_gaps
    from tracekit.attribute.groups import handle_groups
    from tracekit.attribute.instances import collective_instances, member_calls
    from tracekit.core.dataset import open_dataset

    ds = open_dataset(dataset)
    collectives, comms = ds.table("collectives"), ds.table("comms").collect()
    instances_s, _ = _timed(lambda: collective_instances(
        member_calls(collectives, handle_groups(collectives, comms))))
    gaps_s, _ = _timed(lambda: call_gaps(collectives))
    return instances_s, gaps_s


def _peak_rss_mb() -> float:
    """This process's peak RSS: ``VmHWM`` (per address space, so not the forking parent's, which
    ``ru_maxrss`` inherits across exec on Linux); ``ru_maxrss`` elsewhere."""
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _child(dataset: str, profile: bool) -> None:
    """Attribute in a fresh process: prints seconds, peak RSS (before and after), the
    signal builders' seconds (after, so attribution ran cold) and the verdicts."""
    from tracekit.attribute import attribute_dataset

    imported_mb = _peak_rss_mb()
    if profile:
        profiler = cProfile.Profile()
        profiler.enable()
    elapsed_s, result = _timed(lambda: attribute_dataset(dataset))
    if profile:
        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
    peak_mb = _peak_rss_mb()
    instances_s, gaps_s = _signal_builders_s(Path(dataset))
    episodes = result.episodes
    targets = ",".join(str(t) for t in episodes["target"].to_list())
    causes = ",".join(str(c) for c in episodes["cause"].to_list())
    print(f"RESULT {elapsed_s} {imported_mb} {peak_mb} {instances_s} {gaps_s} "
          f"{episodes.height} {targets or '-'} {causes or '-'}")


def main(profile: bool = False) -> None:
    from tracekit.core.dataset import open_dataset

    ranks = int(os.environ.get("TRACEKIT_BENCH_ATTR_RANKS", "32"))
    iterations = int(os.environ.get("TRACEKIT_BENCH_ATTR_ITERATIONS", "3000"))
    if ranks % 4 or ranks < 8:
        raise SystemExit("TRACEKIT_BENCH_ATTR_RANKS must be a multiple of 4, at least 8")
    with tempfile.TemporaryDirectory() as tmp:
        prepare_s, (dataset, calls) = _timed(lambda: _prepare(Path(tmp), ranks, iterations))
        read_s, _ = _timed(lambda: open_dataset(dataset).table("collectives").collect())
        child = subprocess.run(
            [sys.executable, __file__, "--child", str(dataset)] + (["--profile"] * profile),
            check=True, capture_output=True, text=True)
    lines = child.stdout.splitlines()
    fields = lines[-1].split(" ")
    attribute_s, imported_mb, peak_mb, instances_s, gaps_s = map(float, fields[1:6])
    episodes, targets, causes = fields[6:]
    named = f"rank:{CULPRIT_RANK}" in targets.split(",")
    if profile:
        print("\n".join(lines[:-1]))
    print(f"tp2-dp{ranks // 4}-pp2, {ranks} ranks x {iterations:,} iterations = {calls:,} calls "
          f"(synth + ingest + iterations + detect {prepare_s:.1f} s); {episodes} episode(s)")
    print(f"baseline read collectives from Parquet: {read_s:.2f} s "
          f"({calls / read_s / 1e6:.1f} M calls/s)")
    print(f"attribute_dataset:                      {attribute_s:.2f} s "
          f"({calls / attribute_s / 1e6:.2f} M calls/s) = {attribute_s / read_s:.1f}x the read; "
          f"peak RSS {peak_mb:,.0f} MB (child process; {imported_mb:,.0f} MB after imports)")
    print(f"  of which groups + instances {instances_s:.2f} s ({instances_s / read_s:.1f}x), "
          f"own-time gaps {gaps_s:.2f} s ({gaps_s / read_s:.1f}x) (run again after it, warm)")
    print(f"verdict: target {targets}, cause {causes}; injected rank:{CULPRIT_RANK} gpu-thermal "
          f"{'named' if named else 'NOT named'}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2], "--profile" in sys.argv[3:])
    else:
        main(profile="--profile" in sys.argv[1:])

"""Synthesizer speed and streaming.

1. A 4-node job (32 ranks, tp2-dp16-pp1 on hosts of 8, gpt2-probe) of ``TRACEKIT_BENCH_SYNTH_
   ITERATIONS`` (default 3,000) iterations with hook CSV collectives and every monitoring
   export, against the baseline of simulating the same job without writing anything
   (``Simulator.run`` over all chunks): the ratio is what recording and printing cost.
2. A streamed 1,024-rank job (tp8-dp32-pp4): rate and peak RSS of a child process, for
   ``TRACEKIT_BENCH_SYNTH_LARGE_ITERATIONS`` iterations (default 256, two chunks, projected
   to 10,000 linearly; set 10000 for the full run, which writes ~100 GB of CSV).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LARGE_TARGET_ITERATIONS = 10_000


def _spec(layout: str, iterations: int, model: str):
    from tracekit.synth.job import JobSpec
    from tracekit.synth.layout import MODELS, Layout

    return JobSpec(Layout.parse(layout, gpus_per_host=8, model=MODELS[model]), iterations,
                   seed=1)


def _simulate_only(spec) -> float:
    from tracekit.synth.run import CHUNK_CYCLES, JobRun

    started = time.perf_counter()
    run = JobRun(spec)
    for k0 in range(0, spec.iterations + 1, CHUNK_CYCLES):
        k1 = min(spec.iterations + 1, k0 + CHUNK_CYCLES)
        run.simulator.run(run.conditions(k0, k1, healthy=False), record=False)
    return time.perf_counter() - started


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def four_node_job() -> None:
    from tracekit.synth.job import generate_job

    iterations = int(os.environ.get("TRACEKIT_BENCH_SYNTH_ITERATIONS", "3000"))
    spec = _spec("tp2-dp16-pp1", iterations, "gpt2-probe")
    baseline_s = _simulate_only(spec)
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        generate_job(Path(tmp) / "job", spec)
        elapsed_s = time.perf_counter() - started
        written = _folder_bytes(Path(tmp) / "job")
    print(f"4-node job, 32 ranks x {iterations:,} iterations: {elapsed_s:.1f} s, "
          f"{written / 1e9:.2f} GB written ({written / 1e6 / elapsed_s:.0f} MB/s); baseline "
          f"simulate-only {baseline_s:.1f} s; ratio {elapsed_s / baseline_s:.1f}x")


def _child(iterations: int, out: str) -> None:
    """Run in a child process so its peak RSS is its own."""
    from tracekit.synth.job import generate_job

    spec = _spec("tp8-dp32-pp4", iterations, "gpt-tiny")
    generate_job(Path(out), spec)


def streamed_large_job() -> None:
    iterations = int(os.environ.get("TRACEKIT_BENCH_SYNTH_LARGE_ITERATIONS", "256"))
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        subprocess.run([sys.executable, __file__, "--child", str(iterations), f"{tmp}/job"],
                       check=True)
        elapsed_s = time.perf_counter() - started
        written = _folder_bytes(Path(tmp) / "job")
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    rate = iterations / elapsed_s
    print(f"streamed 1,024 ranks x {iterations:,} iterations: {elapsed_s:.1f} s "
          f"({rate:.1f} iterations/s, {written / 1e6 / elapsed_s:.0f} MB/s), "
          f"peak RSS {peak_mb:,.0f} MB; projected 10,000 iterations: "
          f"{LARGE_TARGET_ITERATIONS / rate / 60:.0f} min, "
          f"{written / iterations * LARGE_TARGET_ITERATIONS / 1e9:.0f} GB, same peak RSS "
          f"(chunks of 128 iterations)")


def main() -> None:
    four_node_job()
    streamed_large_job()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(int(sys.argv[2]), sys.argv[3])
    else:
        main()

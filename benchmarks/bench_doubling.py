"""Doubling: does any stage grow faster than its input?

Synthesizes a base job (``TRACEKIT_BENCH_DOUBLING_RANKS`` ranks, default 16, layout tp2-dpN-pp2,
x ``TRACEKIT_BENCH_DOUBLING_ITERATIONS`` iterations, default 1,000, one thermal GPU for a
quarter of the run) and three doublings of it: twice the ranks, twice the iterations, and
twice the injected faults (a second thermal GPU earlier in the run: more change events and
episodes in the same calls). Each runs ingest, iterations, detection and attribution with no
cluster, one stage after another in a child process on one core, as a Dask worker runs a
partition (:data:`ONE_CORE`: idle polars threads spin, so on a loaded machine several threads
add CPU seconds that follow the wall time, not the work), after a warm-up job (so imports and
kernel loads count in no stage), each ``TRACEKIT_BENCH_DOUBLING_REPEAT`` times (default 5; the
least CPU counts). It prints each stage's CPU seconds and its ratio to the base job's. A
linear stage doubles (ratio ~2 for twice the calls, ~1 for twice the faults in the same
calls); a ratio above :data:`LINEAR_BOUND` flags a step that grows faster than its input.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RANKS = int(os.environ.get("TRACEKIT_BENCH_DOUBLING_RANKS", "16"))
ITERATIONS = int(os.environ.get("TRACEKIT_BENCH_DOUBLING_ITERATIONS", "1000"))
REPEAT = int(os.environ.get("TRACEKIT_BENCH_DOUBLING_REPEAT", "5"))
STAGES = ("ingest", "iterations", "detect", "attribute")
LINEAR_BOUND = 2.2
"""Largest ratio a linear stage shows for twice its input: 2, plus a tenth for n log n sorts
and the noise of a shared machine (issue 26's bound)."""
ONE_CORE = {"POLARS_MAX_THREADS": "1", "OMP_NUM_THREADS": "1"}


def _spec(ranks: int, iterations: int, faults: int):
    """The job: thermal GPUs of x2, the first on rank 5 for the second half's first half, a
    second (``faults`` = 2) on the last rank of the first DP replica earlier in the run."""
    from tracekit.synth.faults import Injection
    from tracekit.synth.job import JobSpec
    from tracekit.synth.layout import Layout

    injections = [f"thermal:rank=5@{iterations // 2}+{iterations // 4}x2.0",
                  f"thermal:rank=3@{iterations // 8}+{iterations // 4}x2.0"][:faults]
    return JobSpec(Layout.parse(f"tp2-dp{ranks // 4}-pp2", gpus_per_host=4), iterations, 5,
                   tuple(Injection.parse(i) for i in injections), job="bench-doubling")


def _stages_cpu_s(job: Path, dataset: Path) -> dict[str, float]:
    """CPU seconds of each stage on the synthesized ``job`` into a fresh ``dataset``, with its
    calls, change events and the episode windows attribution decides (detectors that agree
    on an episode but not to the iteration give it two)."""
    from tracekit.attribute import attribute_dataset
    from tracekit.core.dataset import open_dataset
    from tracekit.detect import detect_dataset
    from tracekit.ingest.pipeline import ingest
    from tracekit.iterations import reconstruct_dataset

    shutil.rmtree(dataset, ignore_errors=True)
    steps = {
        "ingest": lambda: ingest([job / "ranks", job / "monitoring"], dataset, job="doubling"),
        "iterations": lambda: reconstruct_dataset(open_dataset(dataset)),
        "detect": lambda: detect_dataset(open_dataset(dataset)),
        "attribute": lambda: attribute_dataset(open_dataset(dataset)),
    }
    result = {}
    for stage, step in steps.items():
        started = time.process_time()
        outcome = step()
        result[stage] = time.process_time() - started
        if stage == "detect":
            result["events"] = outcome.events.height
        if stage == "attribute":  # attribution decides each distinct window once
            result["windows"] = outcome.episodes.unique(["t_start_ns", "t_end_ns"]).height
    result["calls"] = open_dataset(dataset).table("collectives").collect().height
    return result


SIZES = {"base": (RANKS, ITERATIONS, 1), "2x ranks": (2 * RANKS, ITERATIONS, 1),
         "2x iterations": (RANKS, 2 * ITERATIONS, 1), "2x faults": (RANKS, ITERATIONS, 2)}


def _child() -> None:
    """Every size, :data:`REPEAT` times interleaved (so all see the same load), keeping each
    stage's least CPU (noise on a shared machine only ever adds)."""
    from tracekit.synth.job import generate_job

    with tempfile.TemporaryDirectory(prefix="tracekit-doubling-") as folder:
        root = Path(folder)
        jobs = {name: root / name.replace(" ", "-") for name in ("warm-up", *SIZES)}
        for name, size in {"warm-up": (8, 200, 1), **SIZES}.items():
            generate_job(jobs[name], _spec(*size))
        _stages_cpu_s(jobs["warm-up"], root / "dataset")  # imports, kernels
        runs: dict[str, dict[str, float]] = {}
        for _ in range(REPEAT):
            for name in SIZES:
                run = _stages_cpu_s(jobs[name], root / "dataset")
                best = runs.setdefault(name, run)
                for stage in STAGES:
                    best[stage] = min(best[stage], run[stage])
    print(json.dumps(runs))


def main() -> None:
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child"],
                         env={**os.environ, **ONE_CORE}, check=True, capture_output=True,
                         text=True).stdout
    runs = json.loads(out.strip().splitlines()[-1])
    base = runs["base"]
    print(f"CPU seconds per stage (one core, best of {REPEAT}) and ratio to the base job "
          f"({RANKS} ranks x {ITERATIONS:,} iterations, one fault); linear: <= {LINEAR_BOUND}x")
    print(f"{'job':<14} {'calls':>11} {'events':>7} {'windows':>7} "
          + " ".join(f"{s:>16}" for s in STAGES))
    worst = 0.0
    for name, run in runs.items():
        cells = []
        for stage in STAGES:
            ratio = run[stage] / base[stage] if base[stage] else float("nan")
            if name != "base":
                worst = max(worst, ratio)
            cells.append(f"{run[stage]:>7.2f} s {ratio:>5.2f}x")
        print(f"{name:<14} {run['calls']:>11,} {run['events']:>7,} {run['windows']:>7} " + " ".join(
            f"{cell:>16}" for cell in cells))
    verdict = "within" if worst <= LINEAR_BOUND else "ABOVE"
    print(f"largest ratio {worst:.2f}x: {verdict} the linear bound {LINEAR_BOUND}x")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child()
    else:
        main()

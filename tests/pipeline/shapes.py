"""Small dumps of every dataset shape real traces come in, written by the real formats' own
conventions: per-worker step tables in seconds (no clock), normalised and sampled (the Alibaba
PAI mini-batch table), Megatron logs without timestamps (one job-level series), and what-if op
traces with a straggler rank. Each has one known slowdown, with 1 % seeded jitter."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

JITTER = 0.01


def _jitter(shape, seed: int, size: float = JITTER) -> np.ndarray:
    return 1.0 + size * np.random.default_rng(seed).standard_normal(shape)


def step_table(path: Path, workers: int = 4, steps: int = 120, slow_worker: int = 2,
               slow: tuple[int, int] = (60, 90), factor: float = 1.5) -> Path:
    """``worker,step,duration_s``: 1.0 s steps, ``slow_worker`` x``factor`` over ``slow``."""
    times = np.ones((workers, steps)) * _jitter((workers, steps), 1)
    times[slow_worker, slow[0]:slow[1]] *= factor
    path.write_text("worker,step,duration_s\n" + "".join(
        f"{w},{s},{times[w, s]:.4f}\n" for s in range(steps) for w in range(workers)))
    return path


def normalised_table(path: Path, workers: int = 6, samples: int = 200, every: int = 10,
                     slow_worker: int = 3, slow: tuple[int, int] = (100, 140),
                     factor: float = 1.4) -> Path:
    """The Alibaba PAI mini-batch header (``,worker,gpu,time,batch_time_norm``): a sample
    every ``every`` seconds of 700-unit steps, ``slow_worker`` x``factor`` over the samples
    ``slow``."""
    values = 700.0 * _jitter((workers, samples), 2)
    values[slow_worker, slow[0]:slow[1]] *= factor
    rows = [(w, 1 + every * s, round(values[w, s])) for s in range(samples)
            for w in range(workers)]
    path.write_text(",worker,gpu,time,batch_time_norm\n" + "".join(
        f"{i},{w},25,{t},{v}\n" for i, (w, t, v) in enumerate(rows)))
    return path


def megatron_log(path: Path, iterations: int, slow_from: int, factor: float,
                 slow_to: int | None = None, first: int = 1, seconds: float = 4.0,
                 jitter: float = JITTER) -> Path:
    """Megatron-LM <= core_v0.5 iteration lines (no timestamp, log interval 1): ``seconds``
    per iteration, x``factor`` from the ``slow_from``-th line (to ``slow_to``)."""
    times = seconds * _jitter(iterations, 3, jitter)
    times[slow_from:slow_to] *= factor
    path.write_text("".join(
        f" iteration {first + i:8d}/  100000 | consumed samples: {512 * (first + i):12d} | "
        f"elapsed time per iteration (ms): {1000 * t:.1f} | learning rate: 3.000E-05 | "
        "global batch size:   512 | lm loss: 6.842117E+00 | loss scale: 1.0 | grad norm: "
        "1.204 | number of skipped iterations:   0 | number of nan iterations:   0 |\n"
        for i, t in enumerate(times)))
    return path


def whatif_trace(folder: Path, steps: int = 50, straggler: int = 0,
                 slow: tuple[int, int] = (10, 40), factor: float = 2.0) -> Path:
    """A ByteDance what-if trace (``trace-T.parquet`` and ``meta-T.yaml``) of 2 pipeline
    stages x 3 data-parallel ranks; rank ``straggler`` computes x``factor`` over ``slow``."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    jitter = _jitter((6, steps, 2), 4)
    for rank in range(6):
        stage, dp = rank // 3, rank % 3
        for step in range(steps):
            scale = factor if rank == straggler and slow[0] <= step < slow[1] else 1.0
            start = 0.0
            for k, (op, base) in enumerate((("forward-compute", 0.3), ("backward-compute", 0.6))):
                duration = base * scale * jitter[rank, step, k]
                rows.append((dp, stage, rank, step, op, start, duration, 0, 0, 0, 0))
                start += duration
            rows.append((dp, stage, rank, step, "grads-reduce-scatter", start, 0.05, 0, -1, -1,
                         -1))
    pl.DataFrame(rows, schema=["dp_rank", "stage", "rank", "step", "optype", "start_ts",
                               "duration", "seq_id", "mc", "gmc", "mb_id"],
                 orient="row").write_parquet(folder / "trace-T.parquet")
    (folder / "meta-T.yaml").write_text("trial_name: T\nrun_id: 0\ndp_size: 3\ndsp_size: 1\n"
                                        "pp_size: 2\ntp_size: 1\nvpp_size: 1\nworld_size: 6\n")
    return folder

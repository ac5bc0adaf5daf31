"""The stdout of the last rank of a Megatron-LM (core_v0.16+) run: setup lines, one
``training_log`` iteration line per log interval with its timer block (``--timing-log-level
2``, ``minmax``), validation blocks and checkpoint saves (FORMATS.md section 2).

Timestamps are printed in UTC (Megatron prints local time; a synthetic cluster runs in UTC).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from tracekit.synth.schedule import TIMER_NAMES

LOGGED_TIMERS = tuple(n for n in TIMER_NAMES if n not in ("save-checkpoint", "evaluate"))
TIMER_PREFIX = "INFO:megatron.core.timers:"
MAX_LR = 1.5e-4
CHECKPOINT_DIR = "/checkpoints/gpt"


def _stamp(ns: int, micro: bool = True) -> str:
    moment = datetime.fromtimestamp(ns // 1_000_000_000, UTC).replace(
        microsecond=(ns % 1_000_000_000) // 1000)
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f" if micro else "%Y-%m-%d %H:%M:%S")


def _timer_block(names: list[str], low_ms: np.ndarray, high_ms: np.ndarray) -> list[str]:
    lines = [f"{TIMER_PREFIX}(min, max) time across ranks (ms):"]
    for name, low, high in zip(names, low_ms, high_ms, strict=True):
        lines.append("    {}: ({:.2f}, {:.2f})".format((name + " ").ljust(48, "."), low, high))
    return lines


class MegatronLogWriter:
    """Streams iteration lines as iterations complete."""

    def __init__(self, path: Path, spec, run, seed_rng: np.random.Generator) -> None:
        self.path = path
        self.spec = spec
        self.layout = spec.layout
        self.noise = spec.noise
        self.rng = seed_rng
        path.parent.mkdir(parents=True, exist_ok=True)
        L, m = self.layout, self.layout.model
        self.global_batch = m.micro_batch_size * m.micro_batches * L.dp
        self.flops_per_iteration = 3 * (
            m.layers * m.layer_forward_flops()
            + 2 * m.micro_batch_size * m.seq_len * m.hidden * m.vocab) * m.micro_batches * L.dp
        self.interval_s = 0.0
        self.interval_timers = np.zeros((L.world, len(TIMER_NAMES)))
        self.interval_iterations = 0
        start = spec.start_ns
        params = run.schedule.params_per_rank(0)
        header = [
            f"using world size: {L.world}, data-parallel size: {L.dp}, context-parallel size: 1, "
            "hierarchical context-parallel sizes: None, tensor-model-parallel size: "
            f"{L.tp}, encoder-tensor-model-parallel size: 0, pipeline-model-parallel size: "
            f"{L.pp}, encoder-pipeline-model-parallel size: 0",
            "> building GPT model ...",
            f" > number of parameters on (tensor, pipeline) model parallel rank (0, 0): {params}",
            "> building train, validation, and test datasets for GPT ...",
            f"[after dataloaders are built] datetime: {_stamp(start - 20 * 10**9, False)} ",
            "done with setup ...",
            "training ...",
            f"[before the start of training step] datetime: {_stamp(start, False)} ",
        ]
        self.stream = path.open("w")
        self.stream.write("\n".join(header) + "\n")

    def add(self, iteration: int, t_end_ns: int, cycle_s: float, excluded_s: float,
            timers_s: np.ndarray) -> None:
        """One completed iteration (0-based ``iteration``; Megatron prints ``iteration + 1``):
        its wall time, the evaluation / checkpoint time Megatron's interval timer leaves out,
        and every rank's timer totals."""
        self.interval_s += cycle_s - excluded_s
        self.interval_timers += timers_s
        self.interval_iterations += 1
        printed = iteration + 1
        if printed % self.noise.log_interval == 0 or printed == self.spec.iterations:
            self._log(printed, t_end_ns)
        if printed % self.noise.eval_interval == 0 and printed < self.spec.iterations:
            self._validation(printed)

    def checkpoint(self, printed: int, seconds_per_rank: np.ndarray) -> None:
        ms = seconds_per_rank * 1e3
        self.stream.write(
            f"saving checkpoint at iteration {printed:7d} to {CHECKPOINT_DIR} in torch_dist "
            "format\n"
            f"  successfully saved checkpoint from iteration {printed:7d} to {CHECKPOINT_DIR} "
            f"[ t 1/{self.layout.tp}, p 1/{self.layout.pp} ]\n"
            + "\n".join(_timer_block(["save-checkpoint"], [ms.min()], [ms.max()])) + "\n")

    def _loss(self, printed: int) -> float:
        return 2.2 + 8.6 * math.exp(-printed / 400.0) + float(self.rng.normal(0, 0.02))

    def _log(self, printed: int, t_end_ns: int) -> None:
        n = self.interval_iterations
        elapsed_ms = self.interval_s / n * 1e3
        tflops = self.flops_per_iteration / (elapsed_ms / 1e3) / self.layout.world / 1e12
        warmup = max(1, self.spec.iterations // 100)
        lr = MAX_LR * min(1.0, printed / warmup) * (
            0.55 + 0.45 * math.cos(math.pi * min(1.0, printed / self.spec.iterations)))
        scale = 65536.0 if self.layout.model.fp16 else 1.0
        line = (f" [{_stamp(t_end_ns)}] iteration {printed:8d}/{self.spec.iterations:8d} |"
                f" consumed samples: {printed * self.global_batch:12d} |"
                f" elapsed time per iteration (ms): {elapsed_ms:.1f} |"
                f" throughput per GPU (TFLOP/s/GPU): {tflops:.1f} |"
                f" learning rate: {lr:.6E} |"
                f" global batch size: {self.global_batch:5d} |"
                f" lm loss: {self._loss(printed):.6E} |"
                f" loss scale: {scale:.1f} |"
                f" grad norm: {float(self.rng.uniform(0.4, 1.2)):.3f} |"
                f" number of skipped iterations: {0:3d} |"
                f" number of nan iterations: {0:3d} |")
        per_rank_ms = self.interval_timers / n * 1e3
        names, lows, highs = [], [], []
        for index, name in enumerate(TIMER_NAMES):
            if name not in LOGGED_TIMERS:
                continue
            recorded = per_rank_ms[:, index][per_rank_ms[:, index] > 0]
            if recorded.size:
                names.append(name)
                lows.append(recorded.min())
                highs.append(recorded.max())
        self.stream.write(line + "\n" + "\n".join(_timer_block(names, lows, highs)) + "\n")
        self.interval_s = 0.0
        self.interval_timers[:] = 0
        self.interval_iterations = 0

    def _validation(self, printed: int) -> None:
        loss = self._loss(printed) + 0.05
        text = (f" validation loss at iteration {printed} | lm loss value: {loss:.6E} |"
                f" lm loss PPL: {math.exp(loss):.6E} | ")
        rule = "-" * (len(text) + 1)
        self.stream.write(f"{rule}\n{text}\n{rule}\n")

    def close(self) -> None:
        self.stream.close()

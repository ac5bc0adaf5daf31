"""GPU check of the validators, for a session with a GPU (one script, a few minutes).

Run: ``python -m benchmarks.gpu_validate [OUT_DIR]`` (OUT_DIR defaults to $OUT, else ./build);
``--dry-run`` runs the same sections on the CPU (small products, gloo), which is how CI and a
machine without a GPU check the script itself. It prints and writes ``gpu_validate.md`` and
``gpu_validate.json``:

1. GEMM on every visible GPU in every data type it supports (FP8 where torch offers
   ``_scaled_mm`` and the GPU has compute capability 8.9, BF16, FP16, strict FP32), whole-GPU
   8192^3 products and the four layer products of the real MLPerf GPT-3 job, achieved TFLOP/s
   against the device's dense peak, each GPU's ratio to its peers with its interval.
2. P2P: the NCCL pass schedule (ring and tree, both directions) over the visible GPUs when
   there are two or more; with one GPU, the ring schedule replayed as device-to-device copies
   on that GPU (loopback).
3. Both self-tests (``tracekit validate gemm|p2p --self-test``) on what the machine has.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import polars as pl

from tracekit.validate.backend import device_info, local_host, require_torch
from tracekit.validate.gemm import (
    CPU_SHAPES,
    WHOLE_GPU_SHAPES,
    ModelShape,
    default_devices,
    run_gemm_check,
)
from tracekit.validate.p2p import MESSAGE_SIZES_BYTES, P2PGroup, P2PPlan, run_p2p_check
from tracekit.validate.schedule import passes
from tracekit.validate.selftest import gemm_self_test, p2p_self_test

SECTION_BUDGET_S = 60.0
"""Each measuring section stops its rounds after this long, so the script takes minutes."""
DRY_RUN_BUDGET_S = 3.0

DENSE_PEAK_TFLOPS = {
    # NVIDIA H100 / H200 SXM datasheets (dense = half the "with sparsity" figure); FP32 is the
    # non-tensor-core rate, which is what a strict FP32 product (TF32 off) can reach.
    "H200": {"fp8": 1979.0, "bf16": 989.5, "fp16": 989.5, "fp32": 66.9},
    "H100": {"fp8": 1979.0, "bf16": 989.5, "fp16": 989.5, "fp32": 66.9},
    # NVIDIA A100 SXM datasheet.
    "A100": {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5},
}
GPT3_LAYER = ModelShape(hidden_size=12288, seq_length=2048, micro_batch_size=1,
                        tensor_parallel=8)
"""GPT-3 175B as the MLPerf v3.1 log in ``shared/real/mlperf-gpt3`` trains it: hidden 12288
(the GPT-3 paper), sequence 2048 and micro-batch 1 (the log's global batch 2048 over 128
accumulation steps on 16 data-parallel ranks), 8-way tensor parallelism."""


def peak_for(name: str) -> dict[str, float]:
    return next((p for model, p in DENSE_PEAK_TFLOPS.items() if model in name), {})


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def gemm_section(torch, lines: list[str], record: dict, dry_run: bool) -> None:
    shapes = list(CPU_SHAPES) if dry_run else [*WHOLE_GPU_SHAPES, *GPT3_LAYER.products()]
    start = time.perf_counter()
    report = run_gemm_check(default_devices(), shapes=shapes,
                            budget_s=DRY_RUN_BUDGET_S if dry_run else SECTION_BUDGET_S)
    elapsed = time.perf_counter() - start
    peak = {} if dry_run else peak_for(torch.cuda.get_device_name(0))
    table = report.results.with_columns(
        pl.col("dtype").replace_strict(peak, default=None, return_dtype=pl.Float64)
        .alias("peak_tflops"),
    ).with_columns((pl.col("tflops") / pl.col("peak_tflops")).alias("of_peak"))
    lines += ["## GEMM", "", *[f"- {e}" for e in report.environment],
              f"- {report.rounds} rounds in {elapsed:.1f} s", "",
              "| device | dtype | shape | mean ms | spread ms | TFLOP/s | peak | of peak | "
              "x peers |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in table.iter_rows(named=True):
        lines.append(f"| {r['device']} | {r['dtype']} | {r['shape']} {r['m']}x{r['n']}x{r['k']} "
                     f"| {r['mean_s'] * 1e3:.3f} | {(r['std_s'] or 0) * 1e3:.3f} "
                     f"| {r['tflops']:.1f} | {r['peak_tflops'] or '-'} | {_share(r['of_peak'])} "
                     f"| {_ratio(r['slowdown'])} |")
    lines += ["", "| device | verdict | x peers | interval | samples |",
              "| --- | --- | --- | --- | --- |"]
    for r in report.devices.iter_rows(named=True):
        lines.append(f"| {r['device']} | {r['verdict']} | {_ratio(r['slowdown'])} "
                     f"| {_ratio(r['low'])}-{_ratio(r['high'])} | {r['samples'] or 0} |")
    record["gemm"] = table.to_dicts()
    record["gemm_devices"] = report.devices.to_dicts()
    record["gemm_wall_s"] = elapsed


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def loopback_section(torch, lines: list[str], record: dict, ranks: int = 8) -> None:
    """The ring schedule of ``ranks`` virtual ranks replayed as copies inside GPU 0."""
    rows = []
    for size in MESSAGE_SIZES_BYTES:
        buffers = [torch.empty(size, dtype=torch.uint8, device="cuda:0") for _ in range(ranks)]
        for index, one_pass in enumerate(passes("ring", ranks)):
            for link in one_pass:
                seconds = []
                for _ in range(3):
                    start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                    start.record()
                    buffers[link.dst].copy_(buffers[link.src])
                    end.record()
                    end.synchronize()
                    seconds.append(start.elapsed_time(end) / 1e3)
                mean_s = sum(seconds) / len(seconds)
                rows.append({"pass": index, "src": link.src, "dst": link.dst, "size_bytes": size,
                             "mean_s": mean_s, "gb_s": size / mean_s / 1e9})
    frame = pl.DataFrame(rows)
    summary = frame.group_by("size_bytes").agg(pl.col("gb_s").mean(), pl.col("gb_s").min()
                                               .alias("min_gb_s")).sort("size_bytes")
    lines += ["", "## P2P loopback (one GPU: ring passes as device-to-device copies)", "",
              "| size MiB | mean GB/s | min GB/s |", "| --- | --- | --- |"]
    lines += [f"| {s >> 20} | {m:.0f} | {n:.0f} |" for s, m, n in summary.rows()]
    record["loopback"] = frame.to_dicts()


def p2p_section(torch, lines: list[str], record: dict, dry_run: bool) -> None:
    gpus = 0 if dry_run else torch.cuda.device_count()
    if gpus == 1:
        loopback_section(torch, lines, record)
        return
    ranks, backend = (gpus, "nccl") if gpus else (4, "gloo")
    plan = P2PPlan([P2PGroup("all", tuple(range(ranks)), t) for t in ("ring", "tree")],
                   budget_s=DRY_RUN_BUDGET_S if dry_run else SECTION_BUDGET_S,
                   hosts=dict.fromkeys(range(ranks), local_host()))
    report = run_p2p_check(plan, backend=backend)
    lines += ["", f"## P2P over {ranks} ranks ({backend}, {report.rounds} rounds)", "",
              *[f"- {e}" for e in report.environment], "",
              "| topology | pass | link | reach | GB/s | x peers | interval | verdict |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in report.links.iter_rows(named=True):
        lines.append(f"| {r['topology']} | {r['pass']} | {r['src_rank']}->{r['dst_rank']} | "
                     f"{r['reach']} | {r['bandwidth_gb_s']:.2f} | {_ratio(r['slowdown'])} | "
                     f"{_ratio(r['low'])}-{_ratio(r['high'])} | {r['verdict']} |")
    record["p2p"] = report.links.to_dicts()


def self_test_section(torch, lines: list[str], record: dict, dry_run: bool) -> None:
    budget = {"budget_s": DRY_RUN_BUDGET_S} if dry_run else {}
    lines += ["", "## Self-tests", ""]
    for name, self_test in (("gemm", gemm_self_test), ("p2p", p2p_self_test)):
        start = time.perf_counter()
        result = self_test(seed=0, **budget)
        lines.append(f"- {result.summary()} ({time.perf_counter() - start:.1f} s)")
        record[f"{name}_self_test"] = {"passed": result.passed, "slowed": result.slowed,
                                       "named": result.named_in_test,
                                       "named_in_control": result.named_in_control}


def main(out_dir: Path, dry_run: bool) -> None:
    torch = require_torch()
    if not dry_run and not torch.cuda.is_available():
        raise SystemExit("no GPU visible: this script is for a machine with one (--dry-run "
                         "runs it on the CPU)")
    out_dir.mkdir(parents=True, exist_ok=True)
    device = "cpu" if dry_run else "cuda:0"
    lines = ["# tracekit validators on a GPU" + (" (dry run on the CPU)" if dry_run else ""),
             "", f"- {device_info(device).describe()}",
             f"- GPUs visible: {torch.cuda.device_count() if not dry_run else 0}", ""]
    record: dict = {"device": device_info(device).describe(), "dry_run": dry_run}
    for section in (gemm_section, p2p_section, self_test_section):
        try:
            section(torch, lines, record, dry_run)
        except Exception as error:  # keep the other sections' numbers
            lines += ["", f"{section.__name__} failed: {type(error).__name__}: {error}"]
    text = "\n".join(lines) + "\n"
    print(text)
    (out_dir / "gpu_validate.md").write_text(text)
    (out_dir / "gpu_validate.json").write_text(json.dumps(record, indent=1, default=str))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", nargs="?", default=os.environ.get("OUT", "build"))
    parser.add_argument("--dry-run", action="store_true",
                        help="run every section on the CPU (small products, gloo ranks)")
    arguments = parser.parse_args()
    main(Path(arguments.out_dir), arguments.dry_run)

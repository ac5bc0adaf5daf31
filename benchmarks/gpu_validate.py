"""GPU check of the validators, for a session with a GPU (one script, a few minutes).

Run: ``python -m benchmarks.gpu_validate [OUT_DIR]`` (OUT_DIR defaults to $OUT, else ./build).
It prints and writes ``gpu_validate.md`` and ``gpu_validate.json``:

1. GEMM on every visible GPU in FP8 / BF16 / FP16 / FP32 (whole-GPU 8192^3 products and one
   GPT-3-like layer), achieved TFLOP/s against the device's dense peak.
2. P2P: the NCCL pass schedule over the visible GPUs when there are two or more; with one GPU,
   the same ring schedule replayed as device-to-device copies on that GPU (loopback), and the
   full check over 4 gloo ranks on the CPUs so the distributed path runs on this machine too.
3. The GEMM self-test on the GPU: two logical devices on one GPU, one doing 2x the work.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import polars as pl

from tracekit.validate.backend import device_info, require_torch
from tracekit.validate.gemm import (
    WHOLE_GPU_SHAPES,
    GemmDevice,
    ModelShape,
    default_devices,
    run_gemm_check,
)
from tracekit.validate.p2p import MESSAGE_SIZES_BYTES, P2PGroup, P2PPlan, run_p2p_check
from tracekit.validate.schedule import passes

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
"""GPT-3 175B as MLPerf trains it (hidden 12288, sequence 2048) on 8-way tensor parallelism."""


def peak_for(name: str) -> dict[str, float]:
    return next((p for model, p in DENSE_PEAK_TFLOPS.items() if model in name), {})


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def gemm_section(torch, lines: list[str], record: dict) -> None:
    start = time.perf_counter()
    report = run_gemm_check(default_devices(),
                            shapes=[*WHOLE_GPU_SHAPES, *GPT3_LAYER.products()])
    elapsed = time.perf_counter() - start
    name = torch.cuda.get_device_name(0)
    peak = peak_for(name)
    table = report.results.with_columns(
        pl.col("dtype").replace_strict(peak, default=None, return_dtype=pl.Float64)
        .alias("peak_tflops"),
    ).with_columns((pl.col("tflops") / pl.col("peak_tflops")).alias("of_peak"))
    lines += ["## GEMM", "", *[f"- {e}" for e in report.environment],
              f"- check wall time {elapsed:.1f} s", "",
              "| device | dtype | shape | mean ms | spread ms | TFLOP/s | peak | of peak |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in table.iter_rows(named=True):
        lines.append(f"| {r['device']} | {r['dtype']} | {r['shape']} {r['m']}x{r['n']}x{r['k']} "
                     f"| {r['mean_s'] * 1e3:.3f} | {r['std_s'] * 1e3:.3f} | {r['tflops']:.1f} "
                     f"| {r['peak_tflops'] or '-'} | {_share(r['of_peak'])} |")
    record["gemm"] = table.drop("repetition_s").to_dicts()
    record["gemm_wall_s"] = elapsed


def gemm_self_test(lines: list[str], record: dict) -> None:
    """Time GPU 0 alone, then with each product done twice: the second must read 2x slower,
    which checks the CUDA-event timing end to end."""
    shapes = [WHOLE_GPU_SHAPES[0]]
    healthy = run_gemm_check([GemmDevice("cuda:0")], dtypes=["bf16"], shapes=shapes)
    slowed = run_gemm_check([GemmDevice("cuda:0", slowdown=2)], dtypes=["bf16"], shapes=shapes)
    ratio = slowed.results["mean_s"][0] / healthy.results["mean_s"][0]
    lines += ["", f"GEMM self-test: cuda:0 with 2x the work measured {ratio:.3f}x slower "
              "(expected 2.000x)"]
    record["gemm_self_test_ratio"] = ratio


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


def p2p_section(torch, lines: list[str], record: dict) -> None:
    gpus = torch.cuda.device_count()
    if gpus >= 2:
        plan = P2PPlan([P2PGroup("all-gpus", tuple(range(gpus)), t) for t in ("ring", "tree")])
        report = run_p2p_check(plan, backend="nccl")
        title = f"P2P over {gpus} GPUs (NCCL)"
    else:
        loopback_section(torch, lines, record)
        plan = P2PPlan([P2PGroup("cpu-ring", (0, 1, 2, 3), "ring")], delays_s={(1, 2): 0.05},
                       threshold=1.0)
        report = run_p2p_check(plan, backend="gloo")
        title = "P2P over 4 gloo ranks on the CPUs, link 1->2 delayed 50 ms (self-test)"
    lines += ["", f"## {title}", "", *[f"- {e}" for e in report.environment], "",
              "| topology | pass | link | reach | GB/s | x peers | slow |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in report.links.iter_rows(named=True):
        lines.append(f"| {r['topology']} | {r['pass']} | {r['src_rank']}->{r['dst_rank']} | "
                     f"{r['reach']} | {r['bandwidth_gb_s']:.2f} | {r['slowdown']:.2f} | "
                     f"{r['slow']} |")
    record["p2p"] = report.links.to_dicts()


def main(out_dir: Path) -> None:
    torch = require_torch()
    if not torch.cuda.is_available():
        raise SystemExit("no GPU visible: this script is for a machine with one")
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = ["# tracekit validators on a GPU", "",
             f"- {device_info('cuda:0').describe()}", f"- GPUs visible: "
             f"{torch.cuda.device_count()}", ""]
    record: dict = {"device": device_info("cuda:0").describe()}
    for section in (gemm_section, p2p_section):
        try:
            section(torch, lines, record)
        except Exception as error:  # keep the other sections' numbers
            lines += ["", f"{section.__name__} failed: {type(error).__name__}: {error}"]
    try:
        gemm_self_test(lines, record)
    except Exception as error:
        lines += ["", f"gemm self-test failed: {type(error).__name__}: {error}"]
    text = "\n".join(lines) + "\n"
    print(text)
    (out_dir / "gpu_validate.md").write_text(text)
    (out_dir / "gpu_validate.json").write_text(json.dumps(record, indent=1, default=str))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUT", "build")))

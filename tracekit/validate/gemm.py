"""GEMM check: time matrix products on each selected GPU and flag the ones slower than peers.

A throttled or degraded GPU runs the same product slower than its healthy neighbours, and the
gap shows in every data type. The check times products shaped like the whole GPU (large square
products that saturate the tensor cores) and, when the job's model is known, like the job's own
transformer-layer products, in each data type the device supports, then compares each device
with the median of its peers (:mod:`tracekit.validate.peers`).

Timing follows the usual micro-benchmark discipline: untimed warm-up products first (cuBLAS
heuristics, clocks ramping up), then a calibrated number of back-to-back products per repetition
(tens of milliseconds) timed with CUDA events (wall clock on the CPU). Each round times every
test once, in a shuffled order, so a disturbance lands on any device; rounds go on until every
device's interval clears the threshold or the time budget is spent.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from tracekit.core.errors import TracekitError
from tracekit.validate.backend import device_info, local_host, require_torch
from tracekit.validate.peers import (
    BUDGET_S,
    SLOW_THRESHOLD,
    compare,
    rounds_done,
    with_verdicts,
)

WARMUP_PRODUCTS = 3
"""Untimed products first: cuBLAS picks its kernel, clocks ramp up, caches fill."""
TARGET_REPETITION_S = 0.025
"""Each timed repetition runs enough back-to-back products to last at least this long: tens of
milliseconds, so launch and event overheads and a scheduler tick (4 ms) are a small share."""
MAX_PRODUCTS_PER_REPETITION = 200

DTYPES = ("fp8", "bf16", "fp16", "fp32")
FP8_ALIGNMENT = 16
"""cuBLASLt FP8 products need every dimension to be a multiple of 16."""


@dataclass(frozen=True)
class GemmShape:
    """One product ``(m x k) @ (k x n)``, named after what it stands for."""

    name: str
    m: int
    n: int
    k: int

    @property
    def flop(self) -> int:
        return 2 * self.m * self.n * self.k

    def aligned(self, multiple: int) -> GemmShape:
        def up(x: int) -> int:
            return -(-x // multiple) * multiple

        return GemmShape(self.name, up(self.m), up(self.n), up(self.k))


WHOLE_GPU_SHAPES = (GemmShape("square-8192", 8192, 8192, 8192),)
"""Large enough to fill every SM of a Hopper or Ampere GPU for milliseconds."""
CPU_SHAPES = (GemmShape("square-512", 512, 512, 512),)
"""CPU runs check the logic: a product of a few milliseconds on one thread, batched to tens of
milliseconds per repetition."""


@dataclass(frozen=True)
class ModelShape:
    """The job dimensions that fix its transformer-layer products (Megatron argument names)."""

    hidden_size: int
    seq_length: int
    micro_batch_size: int
    tensor_parallel: int = 1
    ffn_hidden_size: int | None = None

    def products(self) -> tuple[GemmShape, ...]:
        """The four forward products of one Megatron GPT layer on one tensor-parallel rank:
        QKV projection, attention output projection, MLP up (fc1) and down (fc2)."""
        tokens = self.seq_length * self.micro_batch_size
        h, tp = self.hidden_size, self.tensor_parallel
        ffn = self.ffn_hidden_size or 4 * h
        for name, value in (("hidden size", h), ("ffn hidden size", ffn)):
            if value % tp:
                raise TracekitError(f"{name} {value} is not divisible by tensor parallel {tp}")
        return (
            GemmShape("qkv", tokens, 3 * h // tp, h),
            GemmShape("attn-out", tokens, h, h // tp),
            GemmShape("mlp-fc1", tokens, ffn // tp, h),
            GemmShape("mlp-fc2", tokens, h, ffn // tp),
        )


@dataclass(frozen=True)
class GemmDevice:
    """A device to test: ``label`` names it in the results (``cuda:3``; ``cpu:0`` for one of
    several logical CPU devices, ``cuda:0/1`` for one of several on one GPU), ``slowdown``
    repeats each product that many times (a self-test of the check: the device really does
    that much more work)."""

    label: str
    slowdown: int = 1

    @property
    def torch_device(self) -> str:
        return "cpu" if self.label.startswith("cpu") else self.label.partition("/")[0]

    def bus_id(self, torch) -> str | None:
        """The GPU's PCI bus id in the ``comms`` table's spelling (``0000:1b:00.0``)."""
        if self.gpu is None:
            return None
        properties = torch.cuda.get_device_properties(self.gpu)
        if not hasattr(properties, "pci_bus_id"):
            return None
        return (f"{properties.pci_domain_id:04x}:{properties.pci_bus_id:02x}:"
                f"{properties.pci_device_id:02x}.0")

    @property
    def gpu(self) -> int | None:
        kind, _, index = self.torch_device.partition(":")
        return int(index or 0) if kind == "cuda" else None


def peer_class(device: str) -> str:
    """Which devices may be compared: the same model with the same number of SMs and the same
    maximum SM clock (a power-capped or different SKU is not a slow peer), from
    :func:`~tracekit.validate.backend.device_info`."""
    return device_info(device).model_class


@dataclass
class GemmReport:
    """Per device, data type and shape: timings, TFLOP/s and the median ratio to its peers; per
    device: the verdict with its confidence interval."""

    results: pl.DataFrame
    devices: pl.DataFrame
    threshold: float
    environment: list[str] = field(default_factory=list)
    rounds: int = 0
    elapsed_s: float = 0.0


def default_devices(cpu_devices: int = 4) -> list[GemmDevice]:
    """Every visible GPU; without one, ``cpu_devices`` logical CPU devices (they share the
    processor, so a CPU run checks the logic, not the hardware)."""
    torch = require_torch()
    if torch.cuda.is_available():
        return [GemmDevice(f"cuda:{i}") for i in range(torch.cuda.device_count())]
    return [GemmDevice(f"cpu:{i}") for i in range(cpu_devices)]


def supported_dtypes(device: str) -> list[str]:
    """The data types worth timing on ``device``: FP8 from compute capability 8.9 (Ada,
    Hopper), BF16 from 8.0, FP16 and FP32 everywhere; BF16 and FP32 on the CPU."""
    torch = require_torch()
    if not device.startswith("cuda"):
        return ["bf16", "fp32"]
    capability = torch.cuda.get_device_capability(device)
    dtypes = []
    if capability >= (8, 9) and hasattr(torch, "float8_e4m3fn") and hasattr(torch, "_scaled_mm"):
        dtypes.append("fp8")
    if capability >= (8, 0):
        dtypes.append("bf16")
    return [*dtypes, "fp16", "fp32"]


def _product(torch, device: str, dtype: str, shape: GemmShape) -> Callable[[], object]:
    """A closure running one product of ``shape`` in ``dtype`` on ``device``."""
    generator = torch.Generator(device=device).manual_seed(0)

    def randn(rows: int, columns: int, dtype_) -> object:
        return torch.randn(rows, columns, device=device, generator=generator, dtype=dtype_)

    if dtype == "fp8":
        a = randn(shape.m, shape.k, torch.float32).to(torch.float8_e4m3fn)
        b = randn(shape.n, shape.k, torch.float32).to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=device, dtype=torch.float32)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    a = randn(shape.m, shape.k, torch_dtype)
    b = randn(shape.k, shape.n, torch_dtype)
    return lambda: torch.matmul(a, b)


class _Clock:
    """Times a batch of products on the device: CUDA events on a GPU; on the CPU, the
    thread's CPU time (products run on this one thread), since the logical CPU devices share
    the processor with other work and the time the scheduler gives to other processes is not
    the device's."""

    def __init__(self, torch, device: str):
        self.torch, self.cuda = torch, device.startswith("cuda")

    def seconds(self, work: Callable[[], object], count: int) -> float:
        if not self.cuda:
            start = time.thread_time()
            for _ in range(count):
                work()
            return time.thread_time() - start
        start, end = (self.torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        for _ in range(count):
            work()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3


def run_gemm_check(
    devices: list[GemmDevice] | None = None,
    *,
    dtypes: list[str] | None = None,
    shapes: list[GemmShape] | None = None,
    budget_s: float = BUDGET_S,
    threshold: float = SLOW_THRESHOLD,
    host: str | None = None,
    seed: int = 0,
) -> GemmReport:
    """Time every (device, data type, shape) in rounds until every device has a verdict or
    ``budget_s`` is spent, and compare each device with its peers of the same class.

    ``dtypes`` defaults to what each device supports; ``shapes`` to the whole-GPU shapes on a
    GPU and a square product on the CPU. ``seed`` fixes the order of the tests in each round
    (shuffled, so no device is always timed first or right after another).
    """
    torch = require_torch()
    devices = devices or default_devices()
    if len({d.label for d in devices}) != len(devices):
        raise TracekitError("a device is listed twice")
    host = host or local_host()
    tests = []
    for device in devices:
        on_gpu = device.torch_device.startswith("cuda")
        wanted = dtypes or supported_dtypes(device.torch_device)
        unsupported = set(wanted) - set(supported_dtypes(device.torch_device))
        if unsupported:
            raise TracekitError(f"{device.label} does not support {', '.join(sorted(unsupported))}"
                                f"; it supports {', '.join(supported_dtypes(device.torch_device))}")
        for dtype in wanted:
            for shape in shapes or (WHOLE_GPU_SHAPES if on_gpu else CPU_SHAPES):
                shape = shape.aligned(FP8_ALIGNMENT) if dtype == "fp8" else shape
                tests.append((device, dtype, shape))
    classes = {d.torch_device: peer_class(d.torch_device) for d in devices}
    start = time.perf_counter()
    with _cpu_threads(torch, 1 if any(d.gpu is None for d in devices) else None):
        timed = [_Timed(torch, device, dtype, shape) for device, dtype, shape in tests]
        _calibrate(timed, classes)
        timings = _measure(timed, classes, budget_s, threshold, np.random.default_rng(seed))
    return gemm_report(timings, _describe(torch, timed, host), threshold,
                       time.perf_counter() - start,
                       [f"{host} {label}: {device_info(label).describe()}"
                        for label in sorted(classes)])


UNIT = ["device"]
TEST = ["peer_class", "dtype", "shape"]


def gemm_report(timings: pl.DataFrame, tests: pl.DataFrame, threshold: float,
                elapsed_s: float = 0.0, environment: list[str] | None = None) -> GemmReport:
    """Summarise per-round ``timings`` (device, peer_class, dtype, shape, round, seconds per
    product) of the ``tests`` (one row per device, dtype and shape: host, gpu, bus_id, m, n,
    k, flop, products): per test the mean, spread and TFLOP/s, per device the verdict."""
    per_test, verdicts = compare(timings, UNIT, TEST, threshold)
    results = (
        per_test.join(tests, on=[*UNIT, "dtype", "shape"])
        .with_columns((pl.col("flop") / pl.col("mean_s") / 1e12).alias("tflops"))
        .select("host", "device", "gpu", "bus_id", "peer_class", "dtype", "shape", "m", "n",
                "k", "flop", "products", "rounds", "mean_s", "std_s", "tflops", "slowdown")
        .sort("device", "dtype", "shape")
    )
    units = results.group_by("host", "device", "gpu", "bus_id", "peer_class",
                             maintain_order=True).agg(
        pl.col("tflops").mean().alias("mean_tflops"), pl.len().alias("tests"))
    devices = with_verdicts(units, verdicts, UNIT)
    rounds = int(timings["round"].max() + 1) if timings.height else 0
    return GemmReport(results, devices, threshold, environment or [], rounds, elapsed_s)


class _Timed:
    """One (device, data type, shape) test: warmed up on creation, then one timed repetition
    of ``count`` products per :meth:`repeat` (seconds per product)."""

    def __init__(self, torch, device: GemmDevice, dtype: str, shape: GemmShape):
        self.torch, self.device, self.dtype, self.shape = torch, device, dtype, shape
        self.product = _product(torch, device.torch_device, dtype, shape)
        self.clock = _Clock(torch, device.torch_device)
        with _strict_fp32(torch, dtype):
            self.clock.seconds(self.work, WARMUP_PRODUCTS)
            self.one_s = min(self.clock.seconds(self.work, 1) for _ in range(WARMUP_PRODUCTS))
        self.count = 1

    def work(self) -> None:
        for _ in range(self.device.slowdown):
            self.product()

    def repeat(self) -> float:
        with _strict_fp32(self.torch, self.dtype):
            return self.clock.seconds(self.work, self.count) / self.count


def _calibrate(timed: list[_Timed], classes: dict[str, str]) -> None:
    """One product count per data type, shape and peer class, from its fastest device's
    product: peers then repeat the same work, and a repetition lasts TARGET_REPETITION_S or
    more (on a busy machine a short repetition and a long one meet the noise differently)."""
    fastest: dict[tuple[str, str, str], float] = {}
    for t in timed:
        key = (classes[t.device.torch_device], t.dtype, t.shape.name)
        fastest[key] = min(fastest.get(key, math.inf), t.one_s / t.device.slowdown)
    for t in timed:
        one = max(fastest[(classes[t.device.torch_device], t.dtype, t.shape.name)], 1e-9)
        t.count = max(1, min(MAX_PRODUCTS_PER_REPETITION, math.ceil(TARGET_REPETITION_S / one)))


def _measure(timed: list[_Timed], classes: dict[str, str], budget_s: float, threshold: float,
             rng: np.random.Generator) -> pl.DataFrame:
    """Rounds of one timed repetition per test, in a shuffled order, until every device has a
    verdict or the budget is spent (:func:`~tracekit.validate.peers.rounds_done`)."""
    rows: list[tuple] = []
    deadline = time.perf_counter() + budget_s
    for round_ in itertools.count():
        for index in rng.permutation(len(timed)):
            t = timed[index]
            rows.append((t.device.label, classes[t.device.torch_device], t.dtype, t.shape.name,
                         round_, t.repeat()))
        frame = pl.DataFrame(rows, schema=TIMINGS_SCHEMA, orient="row")
        if rounds_done(frame, round_ + 1, deadline, UNIT, TEST, threshold):
            return frame
    return frame  # not reached: itertools.count() does not end


TIMINGS_SCHEMA = {"device": pl.String, "peer_class": pl.String, "dtype": pl.String,
                  "shape": pl.String, "round": pl.Int32, "seconds": pl.Float64}


def _describe(torch, timed: list[_Timed], host: str) -> pl.DataFrame:
    """One row per test: where it ran and what it computes."""
    return pl.DataFrame(
        [{"host": host, "device": t.device.label, "gpu": t.device.gpu,
          "bus_id": t.device.bus_id(torch), "dtype": t.dtype, "shape": t.shape.name,
          "m": t.shape.m, "n": t.shape.n, "k": t.shape.k, "flop": t.shape.flop,
          "products": t.count} for t in timed],
        schema_overrides={"gpu": pl.Int32, "bus_id": pl.String})


@contextmanager
def _cpu_threads(torch, threads: int | None) -> Iterator[None]:
    """Time logical CPU devices on one thread: with several, one thread descheduled by other
    work on a shared machine stalls the whole product, and the noise swamps the signal."""
    saved = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


@contextmanager
def _strict_fp32(torch, dtype: str) -> Iterator[None]:
    """FP32 means FP32: switch TF32 tensor-core products off while timing it."""
    matmul = torch.backends.cuda.matmul
    saved = matmul.allow_tf32
    matmul.allow_tf32 = saved and dtype != "fp32"
    try:
        yield
    finally:
        matmul.allow_tf32 = saved

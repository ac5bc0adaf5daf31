"""GEMM check on the CPU: a device doing three times the work is flagged, its peers are not;
the rounds loop and its stopping rule on injected timings."""

from __future__ import annotations

import itertools

import numpy as np
import polars as pl
import pytest

from tracekit.core.errors import TracekitError

torch = pytest.importorskip("torch")

from tracekit.validate.backend import device_info  # noqa: E402 - after the torch skip
from tracekit.validate.gemm import (  # noqa: E402
    GemmDevice,
    GemmShape,
    ModelShape,
    _measure,
    gemm_report,
    peer_class,
    run_gemm_check,
    supported_dtypes,
)
from tracekit.validate.peers import MIN_ROUNDS  # noqa: E402


def test_slowed_cpu_device_is_flagged_exactly():
    devices = [GemmDevice("cpu:0"), GemmDevice("cpu:1"), GemmDevice("cpu:2", slowdown=3),
               GemmDevice("cpu:3")]
    report = run_gemm_check(devices, shapes=[GemmShape("square-192", 192, 192, 192)],
                            budget_s=3, host="node-a")
    assert report.devices.filter("slow")["device"].to_list() == ["cpu:2"]
    slowed = report.devices.filter(device="cpu:2").row(0, named=True)
    assert slowed["low"] > 1.1 and 2.5 < slowed["slowdown"] < 3.5
    assert slowed["samples"] == 2 * report.rounds and slowed["peers"] == 3
    assert report.devices["tests"].to_list() == [2, 2, 2, 2]
    assert report.rounds >= MIN_ROUNDS
    results = report.results
    assert results.height == 8
    assert set(results["dtype"]) == {"bf16", "fp32"}
    assert results["rounds"].to_list() == [report.rounds] * 8
    assert results["flop"].to_list() == [2 * 192**3] * 8
    assert (results["tflops"] > 0).all()
    assert set(results["host"]) == {"node-a"}
    assert report.environment[0].startswith("node-a cpu: ")


class _Injected:
    """A test whose repetitions take injected times in turn: the rounds loop without hardware."""

    def __init__(self, label: str, *seconds: float):
        self.device, self.dtype = GemmDevice(label), "fp32"
        self.shape, self.seconds = GemmShape("s", 8, 8, 8), itertools.cycle(seconds)

    def repeat(self) -> float:
        return next(self.seconds)


def test_rounds_stop_once_every_device_is_decided_or_the_budget_is_spent():
    classes = {"cpu": "cpu"}
    clear = [_Injected(f"cpu:{i}", 2e-3 if i == 1 else 1e-3) for i in range(3)]
    frame = _measure(clear, classes, budget_s=60, threshold=0.1, rng=np.random.default_rng(0))
    assert frame["round"].max() + 1 == MIN_ROUNDS
    noisy = [_Injected("cpu:0", 1e-3), _Injected("cpu:1", 1e-3, 1.25e-3), _Injected("cpu:2", 1e-3)]
    frame = _measure(noisy, classes, budget_s=0.0, threshold=0.1, rng=np.random.default_rng(0))
    assert frame["round"].max() + 1 == MIN_ROUNDS  # 1.0x and 1.25x in turn: the budget decides
    tests = pl.DataFrame({"host": "h", "device": [f"cpu:{i}" for i in range(3)], "gpu": None,
                          "bus_id": None, "dtype": "fp32", "shape": "s", "m": 8, "n": 8,
                          "k": 8, "flop": 1024, "products": 1},
                         schema_overrides={"gpu": pl.Int32, "bus_id": pl.String})
    report = gemm_report(frame, tests, threshold=0.1)
    assert report.devices.select("device", "verdict").rows() == [
        ("cpu:0", "healthy"), ("cpu:1", "inconclusive"), ("cpu:2", "healthy")]


def test_a_lone_device_has_no_peers():
    report = run_gemm_check([GemmDevice("cpu:0")], dtypes=["fp32"],
                            shapes=[GemmShape("tiny", 32, 32, 32)], budget_s=0)
    device = report.devices.row(0, named=True)
    assert device["verdict"] == "no peers" and device["slow"] is None and device["peers"] == 0
    assert report.results.row(0, named=True)["slowdown"] is None
    assert report.rounds == MIN_ROUNDS


def test_logical_devices_on_one_gpu_and_cpu_peer_class():
    logical = GemmDevice("cuda:0/2")
    assert (logical.torch_device, logical.gpu) == ("cuda:0", 0)
    assert (GemmDevice("cpu:3").torch_device, GemmDevice("cpu:3").gpu) == ("cpu", None)
    assert peer_class("cpu") == device_info("cpu").name


def test_cpu_dtypes_and_unsupported_dtype_message():
    assert supported_dtypes("cpu") == ["bf16", "fp32"]
    with pytest.raises(TracekitError, match="cpu:0 does not support fp8; it supports bf16, fp32"):
        run_gemm_check([GemmDevice("cpu:0")], dtypes=["fp8"])


def test_megatron_layer_shapes():
    shapes = ModelShape(hidden_size=4096, seq_length=2048, micro_batch_size=2,
                        tensor_parallel=2).products()
    assert [(s.name, s.m, s.n, s.k) for s in shapes] == [
        ("qkv", 4096, 6144, 4096),
        ("attn-out", 4096, 4096, 2048),
        ("mlp-fc1", 4096, 8192, 4096),
        ("mlp-fc2", 4096, 4096, 8192),
    ]
    assert GemmShape("x", 100, 17, 16).aligned(16) == GemmShape("x", 112, 32, 16)
    with pytest.raises(TracekitError, match="hidden size 4096 is not divisible by tensor"):
        ModelShape(4096, 2048, 1, tensor_parallel=3).products()


def test_fp8_product_uses_scaled_mm_with_bf16_output():
    from tracekit.validate.gemm import _product

    out = _product(torch, "cpu", "fp8", GemmShape("x", 64, 32, 48))()
    assert tuple(out.shape) == (64, 32) and out.dtype == torch.bfloat16

"""GEMM check on the CPU: a device doing three times the work is flagged, its peers are not."""

from __future__ import annotations

import pytest

from tracekit.errors import TracekitError

torch = pytest.importorskip("torch")

from tracekit.validate.gemm import (  # noqa: E402 - after the torch skip
    GemmDevice,
    GemmShape,
    ModelShape,
    run_gemm_check,
    supported_dtypes,
)


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_slowed_cpu_device_is_flagged_exactly():
    # The logical devices share 2 busy cores, so healthy ones differ by up to ~20 % here; a
    # 50 % threshold keeps the test about the logic, not the machine's load.
    devices = [GemmDevice("cpu:0"), GemmDevice("cpu:1"), GemmDevice("cpu:2", slowdown=4),
               GemmDevice("cpu:3")]
    report = run_gemm_check(devices, shapes=[GemmShape("square-192", 192, 192, 192)],
                            threshold=0.5, host="node-a")
    flagged = report.devices.filter("slow")["device"].to_list()
    assert flagged == ["cpu:2"]
    slowed = report.devices.filter(device="cpu:2").row(0, named=True)
    assert 2.5 < slowed["slowdown"] < 6
    assert report.devices["tests"].to_list() == [2, 2, 2, 2]
    results = report.results
    assert results.height == 8
    assert set(results["dtype"]) == {"bf16", "fp32"}
    assert results["repetition_s"].list.len().to_list() == [3] * 8
    assert results["flop"].to_list() == [2 * 192**3] * 8
    assert results["peers"].to_list() == [3] * 8
    assert (results["tflops"] > 0).all()
    assert set(results["host"]) == {"node-a"}
    assert report.environment[0].startswith("node-a cpu: ")


def test_a_lone_device_has_no_peers():
    report = run_gemm_check([GemmDevice("cpu:0")], dtypes=["fp32"],
                            shapes=[GemmShape("tiny", 32, 32, 32)], repetitions=2)
    row = report.results.row(0, named=True)
    assert row["peers"] == 0 and row["slowdown"] is None and row["slow"] is None
    assert len(row["repetition_s"]) == 2


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

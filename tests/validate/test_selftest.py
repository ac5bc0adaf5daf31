"""What counts as a passed self-test: exactly the slowed unit named, nothing in the control."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tracekit.validate.selftest import SelfTest, self_test_devices  # noqa: E402


def outcome(control: list[str], test: list[str]) -> SelfTest:
    return SelfTest("gemm", "cpu:2", None, None, control, test, (1, 2))


def test_only_the_slowed_unit_named_passes():
    assert outcome([], ["cpu:2"]).passed
    assert outcome([], ["cpu:2"]).summary() == (
        "gemm self-test passed: with nothing slowed it named nothing (1 inconclusive); with "
        "cpu:2 slowed it named cpu:2 (2 inconclusive)")
    assert not outcome(["cpu:0"], ["cpu:2"]).passed  # a healthy device named
    assert not outcome([], ["cpu:2", "cpu:3"]).passed
    assert not outcome([], []).passed  # the slowed device missed
    assert outcome([], ["cpu:0"]).summary().startswith("gemm self-test FAILED: ")


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible: its devices are used")
def test_self_test_devices_without_a_gpu():
    assert [d.label for d in self_test_devices()] == ["cpu:0", "cpu:1", "cpu:2", "cpu:3"]

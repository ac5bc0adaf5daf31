"""Self-tests of the checks on whatever the machine has: each check runs twice, once with
nothing slowed (it must name nothing) and once with one unit, picked at random, made slower by a
known amount (it must name exactly that one). Undecided units are allowed in both runs: saying
"inconclusive" is the honest answer on a noisy machine, naming the wrong unit is the failure."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracekit.validate.backend import require_torch
from tracekit.validate.gemm import GemmDevice, GemmReport, run_gemm_check
from tracekit.validate.p2p import P2PGroup, P2PPlan, P2PReport, default_backend, run_p2p_check
from tracekit.validate.peers import SLOW_THRESHOLD

SELF_TEST_SLOWDOWN = 2
"""The slowed GEMM device does every product twice: the 2x of a badly throttled GPU."""
SELF_TEST_DELAY_S = 0.02
"""Added to every transfer of the delayed link: several times a 16 MiB gloo transfer (about
10 ms on loopback), hundreds of times a 64 MiB NVLink one."""
SELF_TEST_BUDGET_S = 10.0
"""Each of the two runs stops after this long, so a self-test takes seconds."""
LOGICAL_DEVICES = 4
"""Without enough GPUs, this many logical devices share one (or the CPU), or gloo ranks."""


@dataclass
class SelfTest:
    """The two runs of a self-test and what each named slow."""

    check: str
    slowed: str
    control: GemmReport | P2PReport
    test: GemmReport | P2PReport
    named_in_control: list[str]
    named_in_test: list[str]
    undecided: tuple[int, int]
    """Units left inconclusive in the control run and in the slowed one."""

    @property
    def passed(self) -> bool:
        return not self.named_in_control and self.named_in_test == [self.slowed]

    def summary(self) -> str:
        def named(units: list[str]) -> str:
            return ", ".join(units) or "nothing"

        outcome = "passed" if self.passed else "FAILED"
        return (f"{self.check} self-test {outcome}: with nothing slowed it named "
                f"{named(self.named_in_control)} ({self.undecided[0]} inconclusive); with "
                f"{self.slowed} slowed it named {named(self.named_in_test)} "
                f"({self.undecided[1]} inconclusive)")


def self_test_devices() -> list[GemmDevice]:
    """Every GPU when there are two or more; else logical devices on the one GPU or the CPU."""
    torch = require_torch()
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus >= 2:
        return [GemmDevice(f"cuda:{i}") for i in range(gpus)]
    prefix = "cuda:0/" if gpus else "cpu:"
    return [GemmDevice(f"{prefix}{i}") for i in range(LOGICAL_DEVICES)]


def gemm_self_test(*, budget_s: float = SELF_TEST_BUDGET_S, threshold: float = SLOW_THRESHOLD,
                   seed: int | None = None) -> SelfTest:
    """GEMM twice over :func:`self_test_devices`, in BF16 on GPUs and FP32 on the CPU: as is,
    then with a random device doing every product SELF_TEST_SLOWDOWN times."""
    rng = np.random.default_rng(seed)
    devices = self_test_devices()
    dtypes = ["bf16"] if devices[0].gpu is not None else ["fp32"]
    slowed = devices[int(rng.integers(len(devices)))].label
    runs = []
    for factors in ({}, {slowed: SELF_TEST_SLOWDOWN}):
        report = run_gemm_check([GemmDevice(d.label, factors.get(d.label, 1)) for d in devices],
                                dtypes=dtypes, budget_s=budget_s, threshold=threshold,
                                seed=int(rng.integers(2**31)))
        runs.append(report)
    named = [r.devices.filter("slow")["device"].to_list() for r in runs]
    undecided = tuple(int((r.devices["verdict"] == "inconclusive").sum()) for r in runs)
    return SelfTest("gemm", slowed, *runs, *named, undecided)


def p2p_self_test(*, budget_s: float = SELF_TEST_BUDGET_S, threshold: float = SLOW_THRESHOLD,
                  seed: int | None = None, timeout_s: float = 60.0) -> SelfTest:
    """P2P twice over a ring of every GPU (NCCL, two or more GPUs) or of LOGICAL_DEVICES gloo
    ranks: as is, then with one random direction of one link delayed by SELF_TEST_DELAY_S."""
    rng = np.random.default_rng(seed)
    torch = require_torch()
    backend = default_backend()
    ranks = torch.cuda.device_count() if backend == "nccl" else LOGICAL_DEVICES
    if ranks < 2:
        backend, ranks = "gloo", LOGICAL_DEVICES
    group = P2PGroup("self-test", tuple(range(ranks)), "ring")
    links = [pair for measured, _ in group.scheduled_passes() for pair in measured]
    slowed = links[int(rng.integers(len(links)))]
    hosts = dict.fromkeys(group.ranks, "local")
    runs = []
    for delays in ({}, {slowed: SELF_TEST_DELAY_S}):
        plan = P2PPlan([group], budget_s=budget_s, threshold=threshold, hosts=hosts,
                       delays_s=delays, seed=int(rng.integers(2**31)))
        runs.append(run_p2p_check(plan, backend=backend, timeout_s=timeout_s))
    named = [[f"{s}->{d}" for s, d in r.links.filter("slow").select("src_rank", "dst_rank").rows()]
             for r in runs]
    undecided = tuple(int((r.links["verdict"] == "inconclusive").sum()) for r in runs)
    return SelfTest("p2p", f"{slowed[0]}->{slowed[1]}", *runs, *named, undecided)


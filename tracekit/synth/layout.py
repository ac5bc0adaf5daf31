"""The parallel layout of a simulated job: model size, TP x DP x PP, ranks on hosts,
communicators in Megatron's rank order, and the inter-host links each communicator crosses.

Megatron-LM's default order ``tp-cp-ep-dp-pp`` makes tensor-parallel ranks consecutive, then
data-parallel, then pipeline stages: ``rank = tp_rank + TP * (dp_rank + DP * pp_rank)``
(``megatron/core/parallel_state.py``, ``RankGenerator``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import cached_property

from tracekit.core.errors import TracekitError


@dataclass(frozen=True)
class Model:
    """A GPT model and its batch: what sets byte counts and FLOPs."""

    name: str = "gpt-tiny"
    layers: int = 4
    hidden: int = 2048
    seq_len: int = 2048
    vocab: int = 50304
    micro_batch_size: int = 1
    micro_batches: int = 4
    """Micro-batches per DP replica per iteration (global batch / (micro batch x DP))."""
    fp16: bool = False
    """fp16 with a loss scaler (adds the found-inf all-reduce); bf16 otherwise."""

    def layer_forward_flops(self) -> float:
        """FLOPs of one transformer layer forward for one micro-batch (Narayanan et al. 2021,
        eq. 2 without recomputation: 24 B s h^2 (1 + s / 6h))."""
        b, s, h = self.micro_batch_size, self.seq_len, self.hidden
        return 24.0 * b * s * h * h * (1.0 + s / (6.0 * h))

    def layer_params(self) -> int:
        """Parameters of one transformer layer (QKV, projection, two MLP matrices, norms)."""
        h = self.hidden
        return 12 * h * h + 13 * h


MODELS: dict[str, Model] = {
    "gpt-tiny": Model(),
    "gpt2-7b": Model("gpt2-7b", layers=32, hidden=4096, seq_len=2048, micro_batches=8),
    "gpt2-11b": Model("gpt2-11b", layers=48, hidden=4096, seq_len=2048, micro_batches=8,
                      fp16=True),
    "gpt-175b": Model("gpt-175b", layers=96, hidden=12288, seq_len=2048, micro_batches=16),
    "gpt2-probe": Model("gpt2-probe", layers=4, hidden=4096, seq_len=2048, micro_batch_size=8,
                        micro_batches=4, fp16=True),
}
"""Named models; the two GPT2 ones are the Greyhound probing jobs (paper-notes.md).
``gpt2-probe`` is their shape cut to 4 layers for CI-sized jobs, with micro-batches of 8
sequences so that, like the real jobs, compute dominates the iteration (~80 % on A100)."""


@dataclass(frozen=True)
class Hardware:
    """Per-GPU speed and link classes. Defaults are an A100 node with 4 x 200 Gb/s RoCE NICs
    shared by 8 GPUs (Greyhound's A100 nodes)."""

    name: str = "a100"
    gpu_tflops: float = 150.0
    """Achieved dense bf16 TFLOP/s per GPU (about half of peak, a typical MFU)."""
    nvlink_gbps: float = 240.0
    """NVLink bus bandwidth inside a host, GB/s."""
    rdma_gbps: float = 12.5
    """RDMA bandwidth per GPU between hosts, GB/s (4 x 200 Gb/s shared by 8 GPUs)."""
    nvlink_latency_s: float = 8e-6
    rdma_latency_s: float = 25e-6
    sm_clock_mhz: int = 1410
    model_name: str = "NVIDIA A100-SXM4-80GB"
    tdp_w: float = 400.0
    nics_per_host: int = 4
    host_cpus: int = 256
    """Logical CPUs per host (DGX A100: 2 x 64-core EPYC 7742 with SMT), as node_exporter
    lists them."""


HARDWARE: dict[str, Hardware] = {
    "a100": Hardware(),
    "h800": Hardware("h800", gpu_tflops=400.0, nvlink_gbps=200.0, rdma_gbps=50.0,
                     sm_clock_mhz=1980, model_name="NVIDIA H800",
                     tdp_w=700.0, host_cpus=224),
}


@dataclass(frozen=True)
class Communicator:
    """One NCCL communicator: its kind (tp, dp, pp, world, embedding), index among its kind and
    member global ranks in communicator-rank order."""

    kind: str
    index: int
    ranks: tuple[int, ...]

    @property
    def name(self) -> str:
        return f"{self.kind}{self.index}"


LAYOUT_PATTERN = re.compile(r"^(?:(tp|dp|pp)(\d+))(?:-(tp|dp|pp)(\d+))*$")


@dataclass(frozen=True)
class Layout:
    """TP x DP x PP on hosts of ``gpus_per_host`` GPUs, plus the Megatron switches that change
    the call pattern."""

    tp: int = 2
    dp: int = 2
    pp: int = 1
    gpus_per_host: int = 8
    sequence_parallel: bool = False
    distributed_optimizer: bool = True
    model: Model = field(default_factory=Model)
    hardware: Hardware = field(default_factory=Hardware)

    @classmethod
    def parse(cls, text: str, **kwargs) -> Layout:
        """``tp2-dp4-pp1`` (any order, missing parts are 1) to a layout."""
        if not LAYOUT_PATTERN.match(text.strip().lower()):
            raise TracekitError(f"layout {text!r} is not like tp2-dp4-pp1")
        sizes = {"tp": 1, "dp": 1, "pp": 1}
        for part in text.strip().lower().split("-"):
            sizes[part[:2]] = int(part[2:])
        if min(sizes.values()) < 1:
            raise TracekitError(f"layout {text!r}: every size must be at least 1")
        layout = cls(**sizes, **kwargs)
        layout.check()
        return layout

    def check(self) -> None:
        if self.gpus_per_host not in (1, 2, 4, 8, 16):
            raise TracekitError(f"gpus per host must be 1, 2, 4, 8 or 16, not {self.gpus_per_host}")
        if self.model.layers % self.pp:
            raise TracekitError(f"{self.model.layers} layers do not split into {self.pp} stages")
        if self.world % self.gpus_per_host and self.world > self.gpus_per_host:
            raise TracekitError(f"{self.world} ranks do not fill hosts of {self.gpus_per_host}")
        if self.sequence_parallel and self.model.seq_len % self.tp:
            raise TracekitError("sequence parallelism needs seq_len divisible by TP")

    @property
    def label(self) -> str:
        return f"tp{self.tp}-dp{self.dp}-pp{self.pp}"

    @property
    def world(self) -> int:
        return self.tp * self.dp * self.pp

    @property
    def hosts(self) -> int:
        return max(1, math.ceil(self.world / self.gpus_per_host))

    @property
    def layers_per_stage(self) -> int:
        return self.model.layers // self.pp

    def rank(self, tp_rank: int, dp_rank: int, pp_rank: int) -> int:
        return tp_rank + self.tp * (dp_rank + self.dp * pp_rank)

    def coords(self, rank: int) -> tuple[int, int, int]:
        """(tp_rank, dp_rank, pp_rank) of a global rank."""
        return rank % self.tp, (rank // self.tp) % self.dp, rank // (self.tp * self.dp)

    def host_of(self, rank: int) -> int:
        return rank // self.gpus_per_host

    def local_gpu(self, rank: int) -> int:
        return rank % self.gpus_per_host

    def host_names(self, prefix: str = "gpu") -> list[str]:
        width = max(2, len(str(self.hosts)))
        return [f"{prefix}{i + 1:0{width}d}" for i in range(self.hosts)]

    @cached_property
    def communicators(self) -> tuple[Communicator, ...]:
        """Every communicator of the job, in the order Megatron creates them."""
        comms: list[Communicator] = [Communicator("world", 0, tuple(range(self.world)))]
        for p in range(self.pp):
            for d in range(self.dp):
                comms.append(Communicator("tp", p * self.dp + d, tuple(
                    self.rank(t, d, p) for t in range(self.tp))))
        for p in range(self.pp):
            for t in range(self.tp):
                comms.append(Communicator("dp", p * self.tp + t, tuple(
                    self.rank(t, d, p) for d in range(self.dp))))
        for d in range(self.dp):
            for t in range(self.tp):
                index = d * self.tp + t
                comms.append(Communicator("pp", index, tuple(
                    self.rank(t, d, p) for p in range(self.pp))))
                if self.pp > 1:
                    comms.append(Communicator("embedding", index, (
                        self.rank(t, d, 0), self.rank(t, d, self.pp - 1))))
        return tuple(comms)

    def comms_of_kind(self, kind: str) -> list[Communicator]:
        return [c for c in self.communicators if c.kind == kind]

    def ring_links(self, ranks: tuple[int, ...]) -> list[tuple[int, int]]:
        """Inter-host hops of the ring NCCL builds over ``ranks``: consecutive distinct hosts in
        member order, closed into a cycle; sorted host pairs, no repeats."""
        hosts = list(dict.fromkeys(self.host_of(r) for r in ranks))
        if len(hosts) < 2:
            return []
        hops = {tuple(sorted((hosts[i], hosts[(i + 1) % len(hosts)]))) for i in range(len(hosts))}
        return sorted(hops)

    def crossed_links(self) -> list[tuple[int, int]]:
        """Every inter-host hop of the job's rings (:meth:`ring_links` of each communicator),
        sorted: the links a congestion can slow."""
        return sorted({hop for c in self.communicators for hop in self.ring_links(c.ranks)})

    def crosses_hosts(self, ranks: tuple[int, ...]) -> bool:
        return len({self.host_of(r) for r in ranks}) > 1

"""What each pipeline stage does in one training cycle, in issue order: compute segments and
the NCCL calls Megatron-LM would make (TP all-reduces or SP all-gather / reduce-scatter per
layer, 1F1B pipeline send/recv, DP gradient buckets, the small per-iteration all-reduces).

Every rank of a stage runs the same sequence, so the schedule is built per stage. A *cycle* runs
from one world-wide synchronisation (the grad-norm all-reduce) to the next: the tail of the
previous iteration (optimizer step, parameter all-gather, logging, evaluation, checkpoint,
loading the next batch) then the head of this one (forward / backward, gradient sync, grad
norm). Ops that only run on some iterations carry a ``when`` mask name.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tracekit.synth.layout import Layout

BF16, FP16, FP32, INT64 = 9, 6, 7, 4
"""``ncclDataType_t`` codes (tracekit/ingest/nccl_names.py)."""

DDP_BUCKET_PARAMS = 40_000_000
"""Megatron DDP bucket size: max(40M, 1M x DP) parameters
(megatron/core/distributed/distributed_data_parallel.py)."""

TIMER_NAMES = (
    "forward-backward", "forward-compute", "backward-compute", "batch-generator",
    "forward-recv", "forward-send", "backward-recv", "backward-send",
    "forward-send-backward-recv", "backward-send-forward-recv",
    "layernorm-grads-all-reduce", "embedding-grads-all-reduce", "all-grads-sync",
    "params-all-gather", "optimizer-inner-step", "optimizer", "save-checkpoint", "evaluate",
)
"""Megatron timer names (megatron/core/timers.py users), logged at --timing-log-level 2."""


@dataclass(frozen=True)
class Op:
    """One step of a stage's schedule.

    ``kind``: ``compute`` (``gpu_s`` of GPU work, ``host_s`` of CPU launch / Python work that
    overlaps it), ``coll`` (a collective on communicator kind ``group``), ``p2p`` (a pipeline
    exchange with the next or previous stage: ``calls`` lists (NCCL op, peer stage) in issue
    order and ``key`` pairs it with the partner stage's op), or ``pause`` (a stall of
    ``pause`` named length, e.g. a checkpoint save).
    """

    kind: str
    timers: tuple[str, ...] = ()
    gpu_s: float = 0.0
    host_s: float = 0.0
    group: str = ""
    op: str = ""
    count: int = 0
    dtype: int = FP32
    nccl_op: int = 0
    calls: tuple[tuple[str, int], ...] = ()
    key: tuple = ()
    when: str | None = None
    tail: bool = False
    data: bool = False
    """A data-loading step: CPU work only, slowed by CPU contention."""


def dtype_bytes(code: int) -> int:
    return {BF16: 2, FP16: 2, FP32: 4, INT64: 8}[code]


@dataclass(frozen=True)
class Timing:
    """Constants of the compute model."""

    host_ratio: float = 0.7
    """CPU time to launch a segment's kernels relative to its GPU time. A segment takes the
    larger of the two, so CPU contention shows only once it slows the host side by more than
    1 / host_ratio, as on real GPU-bound jobs."""
    data_load_s: float = 0.004
    """Time to fetch and collate one micro-batch on the host (Megatron batch-generator)."""
    optimizer_bytes_per_param: float = 16.0
    """Adam reads and writes fp32 master weights, two moments and the gradient."""
    hbm_gbps: float = 1500.0
    optimizer_fixed_s: float = 0.002
    checkpoint_s: float = 30.0
    eval_iters: int = 2
    timers_allgather_count: int = len(TIMER_NAMES)


class StageSchedule:
    """Build the ops of every stage for one layout."""

    def __init__(self, layout: Layout, timing: Timing | None = None) -> None:
        self.layout = layout
        self.timing = timing or Timing()
        m, hw = layout.model, layout.hardware
        self.activation_count = m.seq_len * m.micro_batch_size * m.hidden
        fwd_flops = m.layer_forward_flops() / layout.tp
        rate = hw.gpu_tflops * 1e12
        s, h = m.seq_len, m.hidden
        attention_share = (8 * s * h * h + 4 * s * s * h) / (24 * s * h * h + 4 * s * s * h)
        self.attention_fwd_s = fwd_flops * attention_share / rate
        self.mlp_fwd_s = fwd_flops * (1 - attention_share) / rate

    # -- parameters and buckets ----------------------------------------------------------------

    def params_per_rank(self, stage: int) -> int:
        layout, m = self.layout, self.layout.model
        params = layout.layers_per_stage * m.layer_params() // layout.tp
        embedding = m.vocab * m.hidden // layout.tp
        if stage == 0:
            params += embedding
        if stage == layout.pp - 1 and layout.pp > 1:
            params += embedding
        return params

    def buckets(self, stage: int) -> list[int]:
        """Gradient bucket sizes (parameters) of a stage's ranks."""
        size = max(DDP_BUCKET_PARAMS, 1_000_000 * self.layout.dp)
        total = self.params_per_rank(stage)
        full, rest = divmod(total, size)
        return [size] * full + ([rest] if rest else [])

    # -- building blocks -----------------------------------------------------------------------

    def _compute(self, gpu_s: float, timers: tuple[str, ...], **kw) -> Op:
        return Op("compute", timers, gpu_s=gpu_s, host_s=gpu_s * self.timing.host_ratio, **kw)

    def _coll(self, group: str, op: str, count: int, dtype: int, timers: tuple[str, ...],
              nccl_op: int = 0, **kw) -> Op:
        return Op("coll", timers, group=group, op=op, count=count, dtype=dtype,
                  nccl_op=nccl_op, **kw)

    def _tp_forward(self, timers, **kw) -> list[Op]:
        """One layer forward: attention and MLP, each followed (SP: surrounded) by TP comms."""
        ops: list[Op] = []
        layout = self.layout
        for compute_s in (self.attention_fwd_s, self.mlp_fwd_s):
            if layout.tp > 1 and layout.sequence_parallel:
                shard = self.activation_count // layout.tp
                ops.append(self._coll("tp", "AllGather", shard, BF16, timers, **kw))
                ops.append(self._compute(compute_s, timers, **kw))
                ops.append(self._coll("tp", "ReduceScatter", shard, BF16, timers, **kw))
            else:
                ops.append(self._compute(compute_s, timers, **kw))
                if layout.tp > 1:
                    ops.append(self._coll("tp", "AllReduce", self.activation_count, BF16,
                                          timers, **kw))
        return ops

    def _tp_backward(self, timers, **kw) -> list[Op]:
        """One layer backward (twice the forward FLOPs), MLP first."""
        ops: list[Op] = []
        layout = self.layout
        for compute_s in (self.mlp_fwd_s, self.attention_fwd_s):
            if layout.tp > 1 and layout.sequence_parallel:
                shard = self.activation_count // layout.tp
                ops.append(self._coll("tp", "AllGather", shard, BF16, timers, **kw))
                ops.append(self._coll("tp", "AllGather", shard, BF16, timers, **kw))
                ops.append(self._compute(2 * compute_s, timers, **kw))
                ops.append(self._coll("tp", "ReduceScatter", shard, BF16, timers, **kw))
            else:
                ops.append(self._compute(2 * compute_s, timers, **kw))
                if layout.tp > 1:
                    ops.append(self._coll("tp", "AllReduce", self.activation_count, BF16,
                                          timers, **kw))
        return ops

    def _get_batch(self, stage: int, **kw) -> list[Op]:
        """Load a micro-batch and broadcast it over TP (get_batch_on_this_tp_rank): tokens and
        position ids on the first stage, labels and loss mask on the last."""
        layout, m = self.layout, self.layout.model
        first, last = stage == 0, stage == layout.pp - 1
        if not (first or last):
            return []
        ops = [Op("compute", ("batch-generator",), host_s=self.timing.data_load_s, data=True,
                  **kw)]
        if layout.tp > 1:
            tokens = m.micro_batch_size * m.seq_len
            names = ([("tokens", INT64)] if first else []) + (
                [("labels", INT64), ("loss_mask", FP32)] if last else []) + (
                [("position_ids", INT64)] if first else [])
            for _, dtype in names:
                ops.append(self._coll("tp", "Broadcast", tokens, dtype, ("batch-generator",),
                                      **kw))
        return ops

    def _forward(self, stage: int, timers=("forward-compute",), **kw) -> list[Op]:
        ops = self._get_batch(stage, **kw)
        for _ in range(self.layout.layers_per_stage):
            ops += self._tp_forward(timers, **kw)
        if stage == self.layout.pp - 1 and self.layout.dp > 1:
            # loss_func averages the reporting loss (sum, tokens) over the DP group
            ops.append(self._coll("dp", "AllReduce", 2, FP32, timers, **kw))
        return ops

    def _backward(self, **kw) -> list[Op]:
        ops: list[Op] = []
        for _ in range(self.layout.layers_per_stage):
            ops += self._tp_backward(("backward-compute",), **kw)
        return ops

    # -- pipeline ------------------------------------------------------------------------------

    def _p2p(self, stage: int, counters: dict[tuple[int, int], int], send_next=False,
             recv_next=False, send_prev=False, recv_prev=False, timer="", **kw) -> list[Op]:
        """One batched exchange (Megatron ``_communicate``): isend/irecv with the previous
        stage, then with the next, as one NCCL group; pairs with the neighbour's exchange."""
        pp = self.layout.pp
        ops: list[Op] = []
        for link, peer, sends, recvs in ((stage - 1, stage - 1, send_prev, recv_prev),
                                         (stage, stage + 1, send_next, recv_next)):
            if not (0 <= peer < pp) or not (sends or recvs):
                continue
            calls = (("Send", peer),) * sends + (("Recv", peer),) * recvs
            number = counters.get((link, stage), 0)
            counters[(link, stage)] = number + 1
            timers = (timer,) if timer == "evaluate" else ("forward-backward", timer)
            ops.append(Op("p2p", timers, calls=calls,
                          count=self.activation_count // (
                              self.layout.tp if self.layout.sequence_parallel else 1),
                          dtype=BF16, key=(link, number), **kw))
        return ops

    def _one_f_one_b(self, stage: int, counters: dict[tuple[int, int], int]) -> list[Op]:
        """forward_backward_pipelining_without_interleaving (megatron/core/pipeline_parallel/
        schedules.py) for one stage."""
        pp, micro = self.layout.pp, self.layout.model.micro_batches
        fb = ("forward-backward",)
        warmup = min(pp - stage - 1, micro)
        remaining = micro - warmup
        ops: list[Op] = []

        def forward() -> list[Op]:
            return [self._retime(op, fb) for op in self._forward(stage)]

        def backward() -> list[Op]:
            return [self._retime(op, fb) for op in self._backward()]

        for _ in range(warmup):
            ops += self._p2p(stage, counters, recv_prev=True, timer="forward-recv")
            ops += forward()
            ops += self._p2p(stage, counters, send_next=True, timer="forward-send")
        if remaining:
            ops += self._p2p(stage, counters, recv_prev=True, timer="forward-recv")
        for i in range(remaining):
            last = i == remaining - 1
            ops += forward()
            ops += self._p2p(stage, counters, send_next=True, recv_next=True,
                             timer="forward-send-backward-recv")
            ops += backward()
            if last:
                ops += self._p2p(stage, counters, send_prev=True, timer="backward-send")
            else:
                ops += self._p2p(stage, counters, send_prev=True, recv_prev=True,
                                 timer="backward-send-forward-recv")
        for _ in range(warmup):
            ops += self._p2p(stage, counters, recv_next=True, timer="backward-recv")
            ops += backward()
            ops += self._p2p(stage, counters, send_prev=True, timer="backward-send")
        return ops

    def _forward_only(self, stage: int, counters: dict[tuple[int, int], int],
                      when: str) -> list[Op]:
        """Evaluation: forward-only pipeline over eval_iters x micro-batches."""
        ops: list[Op] = []
        for _ in range(self.timing.eval_iters * self.layout.model.micro_batches):
            ops += self._p2p(stage, counters, recv_prev=True, when=when, tail=True,
                             timer="evaluate")
            ops += [self._retime(op, ("evaluate",)) for op in
                    self._forward(stage, timers=(), when=when, tail=True)]
            ops += self._p2p(stage, counters, send_next=True, when=when, tail=True,
                             timer="evaluate")
        return ops

    @staticmethod
    def _retime(op: Op, extra: tuple[str, ...]) -> Op:
        return replace(op, timers=extra + op.timers)

    # -- the cycle -----------------------------------------------------------------------------

    def stage_ops(self) -> list[list[Op]]:
        """The ops of each stage for one cycle (tail of the previous iteration, then head)."""
        counters: dict[tuple[int, int], int] = {}
        tails = [self._tail(stage, counters) for stage in range(self.layout.pp)]
        heads = [self._head(stage, counters) for stage in range(self.layout.pp)]
        return [t + h for t, h in zip(tails, heads, strict=True)]

    def _head(self, stage: int, counters: dict[tuple[int, int], int]) -> list[Op]:
        layout = self.layout
        # per-rank stalls (GC pauses, allocator cache misses) land before the first forward
        ops = [Op("pause", ("forward-backward",), key=("stall",))]
        ops += self._one_f_one_b(stage, counters)
        sync = ("all-grads-sync",)
        if layout.sequence_parallel and layout.tp > 1:
            ops.append(self._coll("tp", "AllReduce", 4 * layout.model.hidden
                                  * layout.layers_per_stage, FP32,
                                  sync + ("layernorm-grads-all-reduce",)))
        if layout.pp > 1 and stage in (0, layout.pp - 1):
            ops.append(self._coll("embedding", "AllReduce",
                                  layout.model.vocab * layout.model.hidden // layout.tp, FP32,
                                  sync + ("embedding-grads-all-reduce",)))
        if layout.dp > 1:
            for bucket in self.buckets(stage):
                if layout.distributed_optimizer:
                    ops.append(self._coll("dp", "ReduceScatter", -(-bucket // layout.dp), FP32,
                                          sync))
                else:
                    ops.append(self._coll("dp", "AllReduce", bucket, FP32, sync))
        if layout.model.fp16:
            ops.append(self._coll("world", "AllReduce", 1, FP32, ("optimizer",), nccl_op=2))
        ops.append(self._coll("world", "AllReduce", 1, FP32, ("optimizer",)))
        return ops

    def _tail(self, stage: int, counters: dict[tuple[int, int], int]) -> list[Op]:
        layout, timing = self.layout, self.timing
        params = self.params_per_rank(stage)
        shard = params / (layout.dp if layout.distributed_optimizer else 1)
        step_s = timing.optimizer_fixed_s + shard * timing.optimizer_bytes_per_param / (
            timing.hbm_gbps * 1e9)
        ops = [self._compute(step_s, ("optimizer", "optimizer-inner-step"), tail=True)]
        if layout.dp > 1 and layout.distributed_optimizer:
            ops += [self._coll("dp", "AllGather", -(-b // layout.dp), BF16,
                               ("optimizer", "params-all-gather"), tail=True)
                    for b in self.buckets(stage)]
        ops.append(self._coll("world", "AllGather", timing.timers_allgather_count, FP32, (),
                              when="log", tail=True))
        save = ("save-checkpoint",)
        ops.append(self._coll("world", "AllReduce", 1, FP32, save, when="checkpoint", tail=True))
        ops.append(Op("pause", save, key=("checkpoint",), when="checkpoint", tail=True))
        ops.append(self._coll("world", "AllReduce", 1, FP32, save, when="checkpoint", tail=True))
        ops += self._forward_only(stage, counters, when="eval")
        return ops

"""Simulate the timing of many training cycles at once, with real synchronisation.

Clocks are a numpy array ``[cycles, pp, dp, tp]`` of seconds since the cycle started (every
cycle starts right after a world-wide all-reduce, so all ranks start together). The stages'
schedules are walked in lock step; each op updates the clocks of every cycle at once:

* compute: a rank's clock advances by max(GPU time x its GPU slowdown, host time x its host
  slowdown), so a slow GPU or a starved CPU delays only that rank;
* collective: every member leaves at (latest arrival over the members) + transfer time, so one
  late rank delays its whole group, and the delay spreads at the next shared collective;
* pipeline exchange: the two neighbouring stages rendezvous the same way;
* transfer time follows the ring algorithm over NVLink inside a host or RDMA between hosts,
  times the congestion factor of the slowest link the group's ring crosses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tracekit.synth.layout import Layout
from tracekit.synth.schedule import TIMER_NAMES, Op, dtype_bytes

COUPLED_GROUPS = ("world", "embedding")


@dataclass
class Conditions:
    """Per-cycle inputs of one chunk of cycles (``n`` rows each).

    ``gpu_factor`` / ``host_factor`` ``[n, world]`` multiply GPU and host time of each rank;
    ``pauses`` maps a pause name to seconds ``[n, world]``; ``masks`` maps a ``when`` name (and
    ``head`` / ``tail``) to a bool ``[n]``; ``link_factor`` maps a congested target (a host
    index for a NIC, a sorted host pair for a link) to a slowdown ``[n]``.
    """

    gpu_factor: np.ndarray
    host_factor: np.ndarray
    pauses: dict[str, np.ndarray]
    masks: dict[str, np.ndarray]
    link_factor: dict[object, np.ndarray] = field(default_factory=dict)

    @property
    def cycles(self) -> int:
        return self.gpu_factor.shape[0]


@dataclass
class CallRecord:
    """One call op of one stage over a chunk: when each rank issued it and when it ended."""

    stage: int
    position: int
    op: Op
    active: np.ndarray
    arrival_s: np.ndarray
    end_s: np.ndarray


@dataclass
class CycleResult:
    end_s: np.ndarray
    """Cycle length ``[n]`` in seconds (all ranks leave the closing all-reduce together)."""
    calls: list[CallRecord]
    timers_s: np.ndarray | None
    """Per-rank timer totals ``[n, pp, dp, tp, 2 x timers]``: head ops first, then the tail
    ops, which belong to the previous iteration."""


class Simulator:
    """Walks a layout's stage schedules; reusable across chunks of cycles."""

    def __init__(self, layout: Layout, stage_ops: list[list[Op]]) -> None:
        self.layout = layout
        self.stage_ops = stage_ops
        self.keys = [self._coupling_keys(ops) for ops in stage_ops]
        self.timer_index = {name: i for i, name in enumerate(TIMER_NAMES)}
        self._base: dict[tuple, np.ndarray] = {}
        self._links: dict[tuple, list[list[object]]] = {}

    # -- static structure ----------------------------------------------------------------------

    @staticmethod
    def _coupling_keys(ops: list[Op]) -> list[tuple | None]:
        """Which ops of different stages run together: p2p ops by (link, number), world and
        embedding collectives by their occurrence number."""
        seen: dict[str, int] = {}
        keys: list[tuple | None] = []
        for op in ops:
            if op.kind == "p2p":
                keys.append(("p2p", *op.key))
            elif op.kind == "coll" and op.group in COUPLED_GROUPS:
                number = seen.get(op.group, 0)
                seen[op.group] = number + 1
                keys.append((op.group, number))
            else:
                keys.append(None)
        return keys

    def _participants(self, key: tuple) -> tuple[int, ...]:
        pp = self.layout.pp
        if key[0] == "p2p":
            return (key[1], key[1] + 1)
        if key[0] == "embedding":
            return (0, pp - 1)
        return tuple(range(pp))

    def _instance_ranks(self, group: str, stage: int) -> list[tuple[int, ...]]:
        """Member ranks of each group instance touching ``stage``, in the order the clock
        axes enumerate them."""
        L = self.layout
        if group == "tp":
            return [tuple(L.rank(t, d, stage) for t in range(L.tp)) for d in range(L.dp)]
        if group == "dp":
            return [tuple(L.rank(t, d, stage) for d in range(L.dp)) for t in range(L.tp)]
        if group == "world":
            return [tuple(range(L.world))]
        if group == "embedding":
            return [(L.rank(t, d, 0), L.rank(t, d, L.pp - 1))
                    for d in range(L.dp) for t in range(L.tp)]
        if group == "p2p":  # stage is the link: ranks of stage and stage + 1
            return [(L.rank(t, d, stage), L.rank(t, d, stage + 1))
                    for d in range(L.dp) for t in range(L.tp)]
        raise ValueError(group)

    def _transfer_base(self, op: Op, stage: int) -> np.ndarray:
        """Healthy transfer seconds of ``op`` for each group instance (ring algorithm)."""
        group = "p2p" if op.kind == "p2p" else op.group
        cache_key = (group, stage, op.op, op.count, op.dtype)
        if cache_key not in self._base:
            hw = self.layout.hardware
            out = []
            for ranks in self._instance_ranks(group, stage):
                n = len(ranks)
                inter = self.layout.crosses_hosts(ranks)
                bw = (hw.rdma_gbps if inter else hw.nvlink_gbps) * 1e9
                lat = hw.rdma_latency_s if inter else hw.nvlink_latency_s
                size = op.count * dtype_bytes(op.dtype)
                if group == "p2p":
                    t = size / bw + lat
                elif n == 1:
                    t = 0.0
                elif op.op == "AllReduce":
                    t = 2 * (n - 1) / n * size / bw + 2 * (n - 1) * lat
                elif op.op in ("AllGather", "ReduceScatter"):
                    t = (n - 1) * size / bw + (n - 1) * lat
                else:  # Broadcast: pipelined along the ring
                    t = size / bw + (n - 1) * lat
                out.append(t)
            self._base[cache_key] = np.asarray(out)
        return self._base[cache_key]

    def _congestion(self, group: str, stage: int, cond: Conditions) -> np.ndarray | None:
        """Per-instance congestion factor ``[n, instances]``, or None when nothing is
        congested on this group's links."""
        if not cond.link_factor:
            return None
        cache_key = (group, stage)
        if cache_key not in self._links:
            links = []
            for ranks in self._instance_ranks(group, stage):
                hops = self.layout.ring_links(ranks)
                hosts = sorted({h for hop in hops for h in hop})
                links.append([*hops, *hosts])
            self._links[cache_key] = links
        factor = None
        for target, series in cond.link_factor.items():
            hit = np.array([target in links for links in self._links[cache_key]])
            if not hit.any():
                continue
            contribution = np.where(hit[None, :], series[:, None], 1.0)
            factor = contribution if factor is None else np.maximum(factor, contribution)
        return factor

    # -- the walk ------------------------------------------------------------------------------

    def run(self, cond: Conditions, record: bool = True) -> CycleResult:
        L = self.layout
        n = cond.cycles
        shape = (n, L.pp, L.dp, L.tp)
        clock = np.zeros(shape)
        gpu = cond.gpu_factor.reshape(shape)
        host = cond.host_factor.reshape(shape)
        pauses = {k: v.reshape(shape) for k, v in cond.pauses.items()}
        timers = np.zeros((*shape, 2 * len(TIMER_NAMES))) if record else None
        calls: list[CallRecord] = []
        pointer = [0] * L.pp
        lengths = [len(ops) for ops in self.stage_ops]

        while any(p < q for p, q in zip(pointer, lengths, strict=True)):
            progressed = False
            for stage in range(L.pp):
                while pointer[stage] < lengths[stage]:
                    key = self.keys[stage][pointer[stage]]
                    stages = (stage,) if key is None else self._participants(key)
                    if any(pointer[s] >= lengths[s] or self.keys[s][pointer[s]] != key
                           for s in stages):
                        break
                    self._execute(stages, pointer, clock, gpu, host, pauses, cond, timers,
                                  calls, record)
                    for s in stages:
                        pointer[s] += 1
                    progressed = True
            if not progressed:
                raise RuntimeError(f"schedule deadlock at {pointer}")
        return CycleResult(clock.reshape(n, -1).max(axis=1), calls, timers)

    def _active(self, op: Op, cond: Conditions) -> np.ndarray:
        active = cond.masks["tail" if op.tail else "head"]
        if op.when is not None:
            active = active & cond.masks[op.when]
        return active

    def _execute(self, stages, pointer, clock, gpu, host, pauses, cond, timers, calls,
                 record) -> None:
        ops = [self.stage_ops[s][pointer[s]] for s in stages]
        op = ops[0]
        active = self._active(op, cond)
        if not active.any():
            return
        before = clock[:, list(stages)].copy() if record else None
        mask = active[:, None, None, None]
        if op.kind in ("compute", "pause"):
            s = stages[0]
            if op.kind == "pause":
                step = pauses[op.key[0]][:, s]
            elif op.data:
                step = op.host_s * host[:, s]
            else:
                step = np.maximum(op.gpu_s * gpu[:, s], op.host_s * host[:, s])
            clock[:, s] += np.where(mask[:, 0], step, 0.0)
            arrival = None
        else:
            arrival = clock[:, list(stages)].copy()
            end = self._synchronise(op, stages, arrival, cond)
            clock[:, list(stages)] = np.where(mask, end, arrival)
        if not record:
            return
        for i, s in enumerate(stages):
            elapsed = clock[:, s] - before[:, i]
            offset = len(TIMER_NAMES) if ops[i].tail else 0
            for name in ops[i].timers:
                timers[:, s, :, :, offset + self.timer_index[name]] += elapsed
            if arrival is not None:
                calls.append(CallRecord(s, pointer[s], ops[i], active, arrival[:, i],
                                        clock[:, s].copy()))

    def _synchronise(self, op: Op, stages, arrival: np.ndarray, cond: Conditions) -> np.ndarray:
        """End time of a call for every participant: latest member arrival plus transfer."""
        L = self.layout
        n = arrival.shape[0]
        if op.kind == "p2p":
            link = stages[0]
            base = self._transfer_base(op, link).reshape(1, L.dp, L.tp)
            factor = self._congestion("p2p", link, cond)
            transfer = base if factor is None else base * factor.reshape(n, L.dp, L.tp)
            latest = arrival.max(axis=1)
            return (latest + transfer)[:, None]
        if op.group == "world":
            base = self._transfer_base(op, 0)[0]
            factor = self._congestion("world", 0, cond)
            transfer = base if factor is None else base * factor[:, 0]
            latest = arrival.reshape(n, -1).max(axis=1)
            return np.broadcast_to((latest + transfer)[:, None, None, None], arrival.shape)
        if op.group == "embedding":
            base = self._transfer_base(op, 0).reshape(1, L.dp, L.tp)
            factor = self._congestion("embedding", 0, cond)
            transfer = base if factor is None else base * factor.reshape(n, L.dp, L.tp)
            return (arrival.max(axis=1) + transfer)[:, None]
        stage = stages[0]
        clocks = arrival[:, 0]
        base = self._transfer_base(op, stage)
        factor = self._congestion(op.group, stage, cond)
        transfer = base[None, :] if factor is None else base[None, :] * factor
        if op.group == "tp":  # instances along dp, members along tp
            end = clocks.max(axis=2) + transfer
            return end[:, None, :, None]
        end = clocks.max(axis=1) + transfer  # dp: instances along tp, members along dp
        return end[:, None, None, :]

"""P2P check: measure every link a communicator uses with the O(1) pass schedule.

Each group (the global ranks of one communicator, in communicator order) is split into passes
(:mod:`tracekit.validate.schedule`); in each pass all of its links transfer at once, each rank in
at most one transfer, so a group of any size costs 4 to 8 passes (both directions) per message
size and round. The receiver times each transfer (CUDA events with NCCL, the wall clock with
gloo); each round, each link's time is compared with the median of its peers
(:mod:`tracekit.validate.peers`): the other links of the same group, of the same reach (inside a
host or between hosts) and message size. Rounds go on until every link's interval clears the
threshold or the time budget is spent.

The same code runs one process per rank under ``torchrun`` (NCCL on GPUs) or spawns local
processes itself (gloo on CPUs, or NCCL on the GPUs of one machine).
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import queue
import time
from dataclasses import dataclass, field
from datetime import timedelta

import numpy as np
import polars as pl

from tracekit.core.errors import TracekitError
from tracekit.validate.backend import device_info, require_torch
from tracekit.validate.peers import (
    BUDGET_S,
    SLOW_THRESHOLD,
    compare,
    rounds_done,
    with_verdicts,
)
from tracekit.validate.schedule import Topology, both_directions, companions, passes

MiB = 1 << 20
MESSAGE_SIZES_BYTES = (16 * MiB, 32 * MiB, 64 * MiB)
"""Greyhound (ATC 2025, section 4.3) sends 16, 32 and 64 MB per link: at NVLink or NIC speeds
tens of microseconds or more, far above the few-microsecond latency."""
CPU_MESSAGE_SIZES_BYTES = (4 * MiB, 8 * MiB, 16 * MiB)
"""Gloo on CPUs moves a few GB/s on loopback, so these take milliseconds, far above its ~0.1 ms
latency: bandwidth, not latency, is timed."""
TIMEOUT_S = 60.0


@dataclass(frozen=True)
class P2PGroup:
    """One communicator to validate: its global ranks in communicator order and its topology."""

    name: str
    ranks: tuple[int, ...]
    topology: Topology = "ring"

    def scheduled_passes(self) -> list[tuple[list[tuple[int, int]], list[tuple[int, int]]]]:
        """The group's passes, both directions, as (timed links, companion transfers) of
        (sender, receiver) global-rank pairs; every pass has as many transfers as the widest."""
        schedule = both_directions(passes(self.topology, len(self.ranks)))
        width = max((len(p) for p in schedule), default=0)

        def global_pairs(links):
            return [(self.ranks[link.src], self.ranks[link.dst]) for link in links]

        return [(global_pairs(p), global_pairs(companions(p, len(self.ranks), width)))
                for p in schedule]


@dataclass
class P2PPlan:
    """What to measure. ``hosts`` maps a global rank to its host (from the dataset's ``comms``)
    so links are compared within their reach; ``delays_s`` adds that many seconds to every
    transfer on a (sender, receiver) link — a self-test of the check, injected in the transport."""

    groups: list[P2PGroup]
    sizes_bytes: tuple[int, ...] | None = None
    budget_s: float = BUDGET_S
    threshold: float = SLOW_THRESHOLD
    hosts: dict[int, str] = field(default_factory=dict)
    delays_s: dict[tuple[int, int], float] = field(default_factory=dict)
    seed: int = 0
    """Seeds the order of the passes and sizes, shuffled in each round so that no link is
    always timed right after another (on a busy host the position in a round shows)."""

    @property
    def world_size(self) -> int:
        return max((r for g in self.groups for r in g.ranks), default=-1) + 1

    def check(self, world_size: int) -> None:
        """A clear error when the plan cannot run on ``world_size`` ranks."""
        if not any(len(g.ranks) >= 2 for g in self.groups):
            raise TracekitError("nothing to measure: every group needs at least 2 ranks")
        for group in self.groups:
            if len(set(group.ranks)) != len(group.ranks):
                raise TracekitError(f"group {group.name} lists a rank twice: {group.ranks}")
            if max(group.ranks) >= world_size or min(group.ranks) < 0:
                raise TracekitError(
                    f"group {group.name} uses ranks {min(group.ranks)}..{max(group.ranks)} but "
                    f"the run has {world_size} ranks; launch as many ranks as the job had")


@dataclass
class P2PReport:
    """Per link and message size: timings, bandwidth and the median ratio to its peers; per
    link: the verdict with its confidence interval."""

    results: pl.DataFrame
    links: pl.DataFrame
    threshold: float
    backend: str
    environment: list[str] = field(default_factory=list)
    rounds: int = 0


class _Transport:
    """Timed blocking transfers over torch.distributed. A one-byte handshake goes first and the
    receiver starts its clock when it arrives, so the time is the message's alone, not the
    skew of the ranks leaving the barrier before it. The self-test delays are slept by the
    sender between handshake and message, so the receiver sees the data late, as over a slow
    link."""

    def __init__(self, torch, delays_s: dict[tuple[int, int], float], device):
        self.torch, self.dist, self.delays_s = torch, torch.distributed, delays_s
        self.rank, self.cuda = self.dist.get_rank(), device.type == "cuda"
        self.handshake = torch.zeros(1, dtype=torch.uint8, device=device)

    def transfer(self, tensor, pair: tuple[int, int]) -> float:
        """Send or receive ``tensor`` over ``pair``; the receiver returns the seconds it took."""
        src, dst = pair
        if self.rank == src:
            self.dist.send(self.handshake, dst)
            delay = self.delays_s.get(pair, 0.0)
            if delay:
                time.sleep(delay)
            self.dist.send(tensor, dst)
            if self.cuda:
                self.torch.cuda.synchronize()
            return 0.0
        self.dist.recv(self.handshake, src)
        if not self.cuda:
            start = time.perf_counter()
            self.dist.recv(tensor, src)
            return time.perf_counter() - start
        start, end = (self.torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        self.dist.recv(tensor, src)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3


TIMINGS_SCHEMA = {"group": pl.String, "topology": pl.String, "pass": pl.Int32,
                  "src_rank": pl.Int32, "dst_rank": pl.Int32, "size_bytes": pl.Int64,
                  "round": pl.Int32, "seconds": pl.Float64}
UNIT = ["src_rank", "dst_rank"]
TEST = ["group", "topology", "reach", "size_bytes"]


def measure_links(plan: P2PPlan) -> pl.DataFrame | None:
    """Run the plan on this rank of an initialised process group; rank 0 gets every link's
    timings, the other ranks None. Every rank walks the same schedule, with a barrier before
    each transfer, so the transfers of a pass start together; after each round rank 0 decides,
    for all, whether every link has a verdict or the budget is spent."""
    torch = require_torch()
    dist = torch.distributed
    rank, world_size = dist.get_rank(), dist.get_world_size()
    plan.check(world_size)
    cuda = dist.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    sizes = plan.sizes_bytes or (MESSAGE_SIZES_BYTES if cuda else CPU_MESSAGE_SIZES_BYTES)
    buffer = torch.zeros(max(sizes), dtype=torch.uint8, device=device)
    transport = _Transport(torch, plan.delays_s, device)
    schedule = [(group, index, measured, next(((s, d) for s, d in measured + load
                                               if rank in (s, d)), None))
                for group in plan.groups
                for index, (measured, load) in enumerate(group.scheduled_passes())]
    for *_, mine in schedule:  # untimed: connections are set up on the first transfer
        dist.barrier()
        if mine is not None:
            transport.transfer(buffer[: sizes[0]], mine)
    steps = [(*entry, size) for entry in schedule for size in sizes]
    order = np.random.default_rng(plan.seed)  # the same on every rank: they walk one schedule
    rows: list[tuple] = []
    deadline = time.perf_counter() + plan.budget_s
    for round_ in itertools.count():
        mine_now = []
        for step in order.permutation(len(steps)):
            group, index, measured, mine, size = steps[step]
            dist.barrier()
            if mine is None:
                continue
            seconds = transport.transfer(buffer[:size], mine)
            if mine[1] == rank and mine in measured:
                mine_now.append((group.name, group.topology, index, *mine, size, round_,
                                 seconds))
        gathered = [None] * world_size if rank == 0 else None
        dist.gather_object(mine_now, gathered, dst=0)
        stop = [False]
        if rank == 0:
            rows += [row for part in gathered for row in part]
            stop = [rounds_done(_with_reach(_frame(rows), plan.hosts), round_ + 1, deadline,
                                UNIT, TEST, plan.threshold)]
        dist.broadcast_object_list(stop, src=0)
        if stop[0]:
            return _frame(rows) if rank == 0 else None
    return None  # not reached: itertools.count() does not end


def _frame(rows: list[tuple]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=TIMINGS_SCHEMA, orient="row")


def _with_reach(timings: pl.DataFrame, hosts: dict[int, str]) -> pl.DataFrame:
    """Add each link's hosts and its reach: intra-host (NVLink, shared memory) or inter-host
    (the NIC), the link classes whose members are peers; unknown without hosts."""
    table = pl.DataFrame({"rank": list(hosts), "host": list(hosts.values())},
                         schema={"rank": pl.Int32, "host": pl.String})
    return (
        timings.join(table.rename({"rank": "src_rank", "host": "src_host"}), on="src_rank",
                     how="left")
        .join(table.rename({"rank": "dst_rank", "host": "dst_host"}), on="dst_rank", how="left")
        .with_columns(
            pl.when(pl.col("src_host").is_null() | pl.col("dst_host").is_null())
            .then(pl.lit("unknown"))
            .when(pl.col("src_host") == pl.col("dst_host"))
            .then(pl.lit("intra-host"))
            .otherwise(pl.lit("inter-host"))
            .alias("reach"))
    )


def summarise(timings: pl.DataFrame, plan: P2PPlan, backend: str,
              environment: list[str] | None = None) -> P2PReport:
    """Bandwidth per link and size, each link against its peers round by round, and one
    verdict per link over all its sizes and rounds."""
    timings = _with_reach(timings, plan.hosts)
    per_test, verdicts = compare(timings, UNIT, TEST, plan.threshold)
    link_columns = ["group", "topology", "pass", *UNIT, "src_host", "dst_host", "reach"]
    results = (
        timings.select(link_columns).unique()
        .join(per_test, on=[*UNIT, "group", "topology", "reach"])
        .select(*link_columns, "size_bytes", "mean_s", "std_s", "rounds", "slowdown")
        .with_columns((pl.col("size_bytes") / pl.col("mean_s") / 1e9).alias("bandwidth_gb_s"))
        .sort("group", "topology", "pass", "src_rank", "size_bytes")
    )
    units = results.group_by(*link_columns, maintain_order=True).agg(
        pl.col("bandwidth_gb_s").mean())
    links = with_verdicts(units, verdicts, UNIT)
    rounds = int(timings["round"].max() + 1) if timings.height else 0
    return P2PReport(results, links, plan.threshold, backend, environment or [], rounds)


def default_backend() -> str:
    """NCCL where GPUs are visible, gloo otherwise."""
    return "nccl" if require_torch().cuda.is_available() else "gloo"


def run_p2p_check(plan: P2PPlan, *, nprocs: int | None = None, backend: str | None = None,
                  timeout_s: float = TIMEOUT_S) -> P2PReport | None:
    """Validate the plan's links. Under ``torchrun`` (``RANK`` and ``WORLD_SIZE`` set) this
    process is one rank and rank 0 returns the report (the others None); otherwise ``nprocs``
    local processes (default: the plan's world size) are spawned and the report returned."""
    backend = backend or default_backend()
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        timings = _run_as_launched_rank(plan, backend, timeout_s)
    else:
        timings = _run_spawned(plan, nprocs or plan.world_size, backend, timeout_s)
    if timings is None:
        return None
    device = "cuda:0" if backend == "nccl" else "cpu"
    return summarise(timings, plan, backend, [f"{backend}: {device_info(device).describe()}"])


def _run_as_launched_rank(plan: P2PPlan, backend: str, timeout_s: float) -> pl.DataFrame | None:
    torch = require_torch()
    dist = torch.distributed
    owned = not dist.is_initialized()
    if owned:
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
    try:
        return measure_links(plan)
    finally:
        if owned:
            dist.destroy_process_group()


def _run_spawned(plan: P2PPlan, nprocs: int, backend: str, timeout_s: float) -> pl.DataFrame:
    """Spawn ``nprocs`` ranks on this machine around a rendezvous store on a port the OS
    picks; a rank's failure or a timeout is an error naming the rank."""
    torch = require_torch()
    plan.check(nprocs)
    if not torch.distributed.is_backend_available(backend):
        raise TracekitError(f"torch.distributed backend {backend!r} is not available here; "
                            "use gloo (CPUs) or nccl (GPUs)")
    if backend == "nccl" and nprocs > torch.cuda.device_count():
        raise TracekitError(f"{nprocs} ranks need {nprocs} GPUs with NCCL, this machine has "
                            f"{torch.cuda.device_count()}; use --backend gloo or fewer ranks")
    store = torch.distributed.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                                       timeout=timedelta(seconds=timeout_s))
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["torch", __name__])
    messages = context.Queue()
    processes = [
        context.Process(target=_spawned_rank, daemon=True,
                        args=(rank, nprocs, store.port, plan, backend, timeout_s, messages))
        for rank in range(nprocs)
    ]
    for process in processes:
        process.start()
    try:
        return _wait_for_rank_zero(processes, messages, timeout_s + plan.budget_s)
    finally:
        for process in processes:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join()


def _wait_for_rank_zero(processes, messages, timeout_s: float) -> pl.DataFrame:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            message = messages.get(timeout=0.2)
        except queue.Empty:
            dead = [(r, p.exitcode) for r, p in enumerate(processes)
                    if p.exitcode not in (None, 0)]
            if dead:
                raise TracekitError(f"P2P rank {dead[0][0]} died with exit code {dead[0][1]}"
                                    ) from None
            continue
        if message[0] == "error":
            raise TracekitError(f"P2P rank {message[1]} failed: {message[2]}")
        return message[1]
    raise TracekitError(f"P2P check did not finish within {timeout_s:.0f} s; raise --timeout or "
                        "check that every rank can reach the others")


def _spawned_rank(rank: int, world_size: int, port: int, plan: P2PPlan, backend: str,
                  timeout_s: float, messages) -> None:
    """One spawned rank: join the store, run the plan, hand rank 0's timings to the parent."""
    try:
        torch = require_torch()
        dist = torch.distributed
        if backend == "nccl":
            torch.cuda.set_device(rank)
        else:
            torch.set_num_threads(1)
        store = dist.TCPStore("127.0.0.1", port, is_master=False,
                              timeout=timedelta(seconds=timeout_s))
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                                timeout=timedelta(seconds=timeout_s))
        try:
            timings = measure_links(plan)
        finally:
            dist.destroy_process_group()
        if rank == 0:
            messages.put(("ok", timings))
    except Exception as error:  # handed to the parent, which raises it as one clear line
        messages.put(("error", rank, f"{type(error).__name__}: {error}"))

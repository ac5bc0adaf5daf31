"""Real PyTorch profiler traces of a small data-parallel job with one slow rank.

The simulator (:mod:`tracekit.synth.job`) writes the formats real tools print; this module
runs the real thing instead: ``world_size`` processes train a small MLP with
``DistributedDataParallel`` on the gloo backend (CPU, no GPU needed) under ``torch.profiler``,
and each writes its own Kineto trace, as ``tensorboard_trace_handler`` users get them. One rank
can be made slow in one of the ways a real job is:

- ``compute``: it does ``slow_factor`` times the forward / backward work (a slower device);
- ``data``: its data loader sleeps ``slow_ms`` before each batch (input pipeline, host);
- ``send``: after each step the ranks pass activations along a chain (``send`` to the next
  rank, as pipeline stages do) and the slow rank sleeps ``slow_ms`` before sending, so the
  rank after it waits in ``recv``.

Everything else about the ranks is equal, so their traces differ by the slowdown and by
scheduling noise only. torch is an optional dependency (the ``gpu`` extra): it is imported
when a job runs.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

SLOW_KINDS = ("compute", "data", "send")
JOIN_TIMEOUT_S = 120.0
"""How long the ranks may take together before the job is called hung (a rank that died
leaves the others waiting in a collective)."""


@dataclass(frozen=True)
class ProfiledJob:
    """What to run. ``slow_rank`` None is a balanced job; ``slow_from_step`` lets the slowdown
    start mid-trace (an onset to detect) rather than from the first profiled step."""

    world_size: int = 2
    steps: int = 4
    """Profiled steps (``ProfilerStep#1`` .. ``#steps``); one warm-up step comes first."""
    slow_rank: int | None = None
    slow_kind: str = "compute"
    slow_factor: int = 4
    """``compute``: the slow rank's forward / backward passes per step."""
    slow_ms: float = 30.0
    """``data`` and ``send``: the sleep per step."""
    slow_from_step: int = 0
    hidden: int = 256
    batch: int = 64
    layers: int = 3
    gzip: bool = True
    second_group: bool = False
    """Also all-reduce each step's loss on a second process group of every rank (described
    ``loss``), as jobs with several groups (data, tensor, pipeline parallel) do."""
    python_exporter: bool = False
    """Write with torch's Python exporter (2.13+, one event per line) instead of libkineto's."""
    seed: int = 0

    def __post_init__(self):
        if self.slow_kind not in SLOW_KINDS:
            raise ValueError(f"slow_kind must be one of {SLOW_KINDS}, not {self.slow_kind!r}")
        if self.slow_rank is not None and not 0 <= self.slow_rank < self.world_size:
            raise ValueError(f"slow_rank {self.slow_rank} is not a rank of {self.world_size}")


def trace_name(rank: int, job: ProfiledJob) -> str:
    """File name of a rank's trace: ``rank<N>.pt.trace.json[.gz]``, rank first as
    ``tensorboard_trace_handler``'s worker names put the host first."""
    return f"rank{rank}.pt.trace.json" + (".gz" if job.gzip else "")


@dataclass(frozen=True)
class ProfiledRun:
    """The traces of a run and what the operating system did to each rank meanwhile:
    ``held_s[rank]``, seconds per profiled step its threads (computing, and gloo's workers)
    were runnable but waited for a CPU (the kernel's schedstat; None where the system keeps
    none). A balanced job is balanced as run only when these are alike: on a machine busy
    with other work the scheduler holds one rank back more than another, and its trace
    rightly shows it slower."""

    traces: list[Path]
    held_s: dict[int, float | None]


def run_profiled_job(job: ProfiledJob, folder: str | Path) -> ProfiledRun:
    """Run ``job`` and write one trace per rank into ``folder``.

    The ranks are forked from this process (torch is imported once, so a 2-rank job of a few
    steps takes a few seconds) and meet through a store this process serves; this process only
    waits meanwhile. The ranks are not pinned to cores: on a machine busy with other work a
    pinned rank cannot leave a loaded core, and the ranks' run delays grew further apart. A
    rank that fails makes this raise with its exit code."""
    import torch.distributed as dist  # imported before forking, so children share it

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    # this process serves the ranks' store on a port the system picks: no port to guess
    store = dist.TCPStore("127.0.0.1", 0, job.world_size + 1, is_master=True,
                          wait_for_workers=False)
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    timings = context.SimpleQueue()
    ranks = [context.Process(target=_rank_main,
                             args=(rank, job, str(folder), store.port, timings))
             for rank in range(job.world_size)]
    for process in ranks:
        process.start()
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    for process in ranks:
        process.join(max(deadline - time.monotonic(), 0.1))
    hung = [p for p in ranks if p.is_alive()]
    for process in hung:
        process.kill()
        process.join()
    del store
    failed = {rank: p.exitcode for rank, p in enumerate(ranks) if p.exitcode != 0}
    if failed:
        raise RuntimeError(f"profiled job failed: rank exit codes {failed} "
                           f"({'hung' if hung else 'crashed'}; job {asdict(job)})")
    held = dict(timings.get() for _ in range(job.world_size))
    return ProfiledRun([folder / trace_name(rank, job) for rank in range(job.world_size)],
                       held)


def _rank_main(rank: int, job: ProfiledJob, folder: str, port: int, timings) -> None:
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    torch.set_num_threads(1)
    torch.manual_seed(job.seed)
    store = dist.TCPStore("127.0.0.1", port, job.world_size + 1, is_master=False)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=job.world_size)
    layers = []
    for _ in range(job.layers):
        layers += [torch.nn.Linear(job.hidden, job.hidden), torch.nn.ReLU()]
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(*layers))
    second = (dist.new_group(list(range(job.world_size)), group_desc="loss")
              if job.second_group else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    path = os.path.join(folder, trace_name(rank, job))

    def export(profiler) -> None:
        profiler.export_chrome_trace(path, **(
            {"use_python_export": True} if job.python_exporter else {}))

    generator = torch.Generator().manual_seed(job.seed * 1000 + rank)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 schedule=schedule(wait=0, warmup=1, active=job.steps),
                 on_trace_ready=export) as profiler:
        for step in range(job.steps + 1):  # step 0 is the warm-up
            if step == 1:
                before = _run_delays_ns()
            slow = rank == job.slow_rank and step >= job.slow_from_step + 1
            with record_function("## data ##"):
                if slow and job.slow_kind == "data":
                    time.sleep(job.slow_ms / 1e3)
                batch = torch.randn(job.batch, job.hidden, generator=generator)
            passes = job.slow_factor if slow and job.slow_kind == "compute" else 1
            for _ in range(passes - 1):  # the extra work of a slow device, outside DDP's hooks
                with model.no_sync():
                    model(batch).square().mean().backward()
            loss = model(batch).square().mean()
            loss.backward()
            if second is not None:
                dist.all_reduce(loss.detach(), group=second)
            optimizer.step()
            optimizer.zero_grad()
            if job.slow_kind == "send":
                _chain(rank, job, batch, slow)
            if step == job.steps:  # before its step() exports the trace
                after = _run_delays_ns()
            profiler.step()
    dist.destroy_process_group()
    held = None if before is None or after is None else sum(
        ns - before.get(task, 0) for task, ns in after.items()) / job.steps / 1e9
    timings.put((rank, held))


def _run_delays_ns() -> dict[str, int] | None:
    """Per thread of this process, ns it has been runnable without a CPU (the second field of
    ``/proc/self/task/*/schedstat``); None where the system keeps no such count. A thread
    that ends between two readings drops out of their difference."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    delays = {}
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/schedstat") as stat:
                delays[task] = int(stat.read().split()[1])
        except (OSError, IndexError, ValueError):  # ended since the listing
            continue
    return delays or None


def _chain(rank: int, job: ProfiledJob, batch, slow: bool) -> None:
    """Pass a batch along the ranks (0 -> 1 -> ... -> last) as pipeline stages pass
    activations; the slow rank sends late."""
    import torch.distributed as dist

    if rank > 0:
        dist.recv(batch, rank - 1)
    if rank < job.world_size - 1:
        if slow:
            time.sleep(job.slow_ms / 1e3)
        dist.send(batch, rank + 1)

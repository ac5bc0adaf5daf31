"""Run one function over many partitions: in a local loop, or mapped over a Dask cluster.

Every heavy step of tracekit is a function over one partition (one source file for ingest, a
batch of ranks for analysis) that reads and writes Parquet and keeps no process-wide state. The
executor is the only place that knows where such a function runs, so a laptop and a cluster run
the same code and produce the same rows. Without a cluster nothing about Dask is imported.

Cluster addresses (``--cluster``): ``local`` starts a LocalCluster with one worker process per
CPU, ``local:N`` one with N workers (a worker is one core: one thread, native pools capped by
:data:`ONE_CORE_ENVIRONMENT`), ``tcp://host:port`` connects to a running scheduler
(dask-jobqueue on Slurm, the Dask Kubernetes operator, ``dask scheduler`` by hand; see
``docs/scale-out.md``). Workers must see the input and dataset folders at the same paths.
"""

from __future__ import annotations

import importlib
import logging
import math
import os
import re
import resource
import socket
import sys
import threading
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import polars as pl

from tracekit.core import schema
from tracekit.core.dataset import Dataset
from tracekit.core.errors import TracekitError

RETRIES = 1
"""A partition whose worker was lost is run this many more times before it is reported as
failed: a worker lost to the OOM killer or a flaky network filesystem should not fail a job's
ingest. Only such losses are retried (:data:`WORKER_LOSS`): tracekit's own errors say what is
wrong with the input, and any other exception is a bug, raised where it happened."""

WORKER_LOSS: tuple[type[BaseException], ...] = (MemoryError, OSError)
"""What a partition raises when its machine, not its input, failed: out of memory, an I/O error
of a (network) filesystem. Dask adds a worker that died (``KilledWorker``) and a lost
connection to it."""

CONNECT_TIMEOUT_S = 10.0
"""How long to wait for a scheduler at ``tcp://host:port`` before giving up with a clear error."""

ONE_CORE_ENVIRONMENT = {
    "POLARS_MAX_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1"}
"""Environment of a LocalCluster worker process, set before it imports polars or numpy: a
worker is one core. Without it every worker's polars and BLAS start a thread per CPU, so
``local:1`` already uses every core and N workers oversubscribe them N times (standard Dask
practice; ``docs/scale-out.md`` sets the same on Slurm and Kubernetes workers)."""

UNSET_ENVIRONMENT = {"MALLOC_TRIM_THRESHOLD_": None}
"""What Dask's default worker environment sets and a tracekit worker must not get (Dask leaves
out a variable whose value is None). Dask sets ``MALLOC_TRIM_THRESHOLD_=65536`` to hand freed
memory back sooner; setting any glibc malloc threshold turns off its dynamic mmap threshold, so
every numpy array over 128 KiB is mapped and faulted in afresh: reconstructing 64 ranks x
10,000 iterations on one core took 1.4x the CPU (system time 6.1-6.2 s against 2.4-2.7) for a
peak 5 % lower."""

WARM_UP = ("tracekit.ingest.pipeline", "tracekit.iterations", "tracekit.attribute",
           "tracekit.detect.episodes:load_kernels", "tracekit.ingest.nccl_coll_scan:compiled",
           "tracekit.ingest.hook_csv_scan:compiled")
"""What every Dask worker imports (``module``) and loads (``module:function``) as soon as the
executor opens, in a thread beside its task thread, so that the first partition of each stage
starts warm. Measured per worker process (one thread): the detectors' imports (scipy.special)
~0.45 s of CPU, the compiled kernels under 1 ms each (C, built once and cached,
:mod:`tracekit.core.compiled`), the rest ~0.1 s. A worker pays this once either way; warming
moves it out of the first detection partition into the cluster's start and the client's own
work, when the worker would idle."""

QUIET_DASK_CONFIG = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "500ms",
    "distributed.admin.system-monitor.interval": "2s",
    "distributed.worker.memory.monitor-interval": "1s",
}
"""Dask settings of the clusters tracekit starts and of its clients: Dask's defaults sample
each worker's stack every 10 ms (the dashboard's profile), check every event loop for blocking
every 20 ms and poll memory and system load several times a second. On an idle LocalCluster of
two workers that cost 0.97 CPU-s every 10 s (client with its in-process scheduler 0.39,
workers and nannies 0.58), 5 % of a 2-core machine taken from the partitions; with these,
0.17. Workers started by hand or by a job system keep their own settings (``docs/scale-out.md``
shows how to set the same)."""

CLUSTER_FORMS = "`local`, `local:N` (N workers on this machine) or `tcp://host:port` (a running " \
                "Dask scheduler)"

Report = Callable[..., None]
"""Given to a partition function that reports progress: ``report(**info)`` with small
JSON-like values (``source=..., bytes=..., rows=...``)."""

ProgressHandler = Callable[[str, dict[str, Any]], None]
"""Called as ``progress(partition_key, info)`` for each report, on the calling machine."""


@dataclass
class Outcome:
    """What one partition gave: its value, or why it failed after every attempt."""

    key: str
    """What the partition is, in the user's words (a source file, ``ranks 0-15``)."""
    value: Any = None
    error: str | None = None
    attempts: int = 1

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def failure(self) -> str:
        """The failure as one line naming the partition, for summaries and warnings."""
        tries = f"failed {self.attempts} times; " if self.attempts > 1 else ""
        return f"{self.key}: {self.error} ({tries}the other partitions completed)"


class Executor(Protocol):
    """Where partition functions run. ``map_partitions`` returns outcomes in partition order,
    whatever order they finished in, so results do not depend on the executor."""

    description: dict[str, Any]
    """How work is run, as recorded in the dataset manifest's ``build`` section."""

    in_process: bool
    """Whether partitions run in this process, sharing its cores (``at_once`` then splits
    them), rather than on workers of their own."""

    def map_partitions(
        self,
        function: Callable[..., Any],
        partitions: Sequence[Any],
        key: Callable[[Any], str] = str,
        progress: ProgressHandler | None = None,
        on_done: Callable[[Outcome], None] | None = None,
        at_once: int = 1,
    ) -> list[Outcome]:
        """Run ``function(partition)`` for every partition (``function(partition, report)``
        when ``progress`` is given). ``on_done`` sees each outcome as it finishes. The local
        loop runs ``at_once`` partitions at a time on threads, for a function that releases
        the GIL in most of its work and shares no state between calls (``on_done`` then sees
        outcomes in partition order); a cluster runs as many as it has workers."""
        ...

    def worker_peak_rss_bytes(self) -> dict[str, int]:
        """Peak resident memory of every worker process so far, by worker name."""
        ...


def _reason(error: BaseException) -> str:
    """An exception as a user reads it: tracekit's own errors say it all already."""
    if isinstance(error, TracekitError):
        return str(error)
    return f"{type(error).__name__}: {error}"


@dataclass
class _Raised:
    """A partition's exception other than a lost worker's, sent back from a Dask worker as a
    value so that Dask does not retry it (Dask retries whatever a task raises)."""

    error: BaseException
    traceback: str


def _settled(function: Callable[..., Any], *arguments: Any) -> Any:
    """``function(*arguments)`` on a Dask worker: a worker loss is raised (and retried), any
    other exception comes back as :class:`_Raised`."""
    try:
        return function(*arguments)
    except WORKER_LOSS:
        raise
    except Exception as error:  # noqa: BLE001 (reported or raised again on the client)
        import traceback

        return _Raised(error, traceback.format_exc())


def _peak_rss_bytes() -> int:
    """This process's peak resident set size (``ru_maxrss`` is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


class LocalExecutor:
    """The partitions one after another in this process: the default, with no dependency."""

    description: dict[str, Any]
    in_process = True

    def __init__(self, retries: int = RETRIES) -> None:
        self.retries = retries
        self.description = {"engine": "local", "workers": 1, "retries": retries}

    def map_partitions(self, function, partitions, key=str, progress=None, on_done=None,
                       at_once=1):
        reported = threading.Lock()  # a handler may read and update its totals

        def report(name: str, info: dict[str, Any]) -> None:
            with reported:
                progress(name, info)

        def run(partition: Any) -> Outcome:
            name = key(partition)
            arguments = (partition,) if progress is None else (
                partition, lambda **info: report(name, info))
            outcome = Outcome(name)
            for attempt in range(1, self.retries + 2):
                outcome.attempts = attempt
                try:
                    outcome.value, outcome.error = function(*arguments), None
                    break
                except TracekitError as error:
                    outcome.error = str(error)
                    break
                except WORKER_LOSS as error:
                    outcome.error = _reason(error)
            return outcome

        outcomes = []
        pool = ThreadPoolExecutor(at_once, "tracekit-partition") if at_once > 1 else None
        try:
            for outcome in pool.map(run, partitions) if pool else map(run, partitions):
                if on_done is not None:
                    on_done(outcome)
                outcomes.append(outcome)
        finally:
            if pool is not None:
                pool.shutdown(cancel_futures=True)
        return outcomes

    def worker_peak_rss_bytes(self) -> dict[str, int]:
        return {"local": _peak_rss_bytes()}


PROGRESS_DRAIN_S = 5.0
"""After the last partition, how long to wait for progress events still in flight from workers
(they travel worker -> scheduler -> client on their own, after the results)."""


@dataclass
class _TopicReport:
    """A partition's ``report`` on a Dask worker: an event on the partition's topic, which the
    scheduler forwards to the client that subscribed to it."""

    topic: str
    key: str
    sent: int = 0

    def __call__(self, **info: Any) -> None:
        from distributed import get_worker

        get_worker().log_event(self.topic, {"key": self.key, **info})
        self.sent += 1


def _with_report(function: Callable[..., Any], topic: str, key: str, partition: Any) -> Any:
    """Run a reporting partition; also return how many events it sent."""
    report = _TopicReport(topic, key)
    return function(partition, report), report.sent


class _ProgressRelay:
    """Client side of the reports: hands each event to the caller's handler (on Dask's event
    loop thread) and counts them, so the caller can wait for the last ones."""

    def __init__(self, handler: ProgressHandler) -> None:
        self.handler = handler
        self.received: dict[str, int] = {}
        self.changed = threading.Condition()

    def __call__(self, event: tuple[float, dict[str, Any]]) -> None:
        message = dict(event[1])
        key = message.pop("key")
        self.handler(key, message)
        with self.changed:
            self.received[key] = self.received.get(key, 0) + 1
            self.changed.notify_all()

    def drain(self, expected: dict[str, int], timeout_s: float = PROGRESS_DRAIN_S) -> None:
        with self.changed:
            self.changed.wait_for(lambda: all(self.received.get(k, 0) >= n
                                              for k, n in expected.items()), timeout=timeout_s)


class DaskExecutor:
    """The partitions as tasks on a Dask cluster; Dask retries a task whose worker died or that
    raised a :data:`WORKER_LOSS`, and results come back to this process."""

    description: dict[str, Any]
    in_process = False

    def __init__(self, client, address: str, retries: int = RETRIES) -> None:
        self.client = client
        self.retries = retries
        workers = len(client.scheduler_info(n_workers=-1).get("workers", {}))
        self.description = {"engine": "dask", "cluster": address, "workers": workers,
                            "retries": retries}

    def map_partitions(self, function, partitions, key=str, progress=None, on_done=None,
                       at_once=1):
        import functools

        from distributed import as_completed

        names = [key(p) for p in partitions]
        run_id = uuid.uuid4().hex[:12]
        topic = f"tracekit-progress-{run_id}"
        relay = None if progress is None else _ProgressRelay(progress)
        if relay is not None:
            self.client.subscribe_topic(topic, relay)
        with warnings.catch_warnings():
            # partitions carry their data (an episode's cut of the job) so that a retry on any
            # worker can rerun them; Dask's hint to load large inputs through Dask instead is
            # advice for graph authors, not for the user of a command
            warnings.filterwarnings("ignore", "Sending large graph", UserWarning)
            futures = [
                self.client.submit(
                    _settled, function if relay is None else functools.partial(
                        _with_report, function, topic, name),
                    partition, key=f"tracekit-{run_id}-{index}", retries=self.retries,
                    pure=False)
                for index, (name, partition) in enumerate(zip(names, partitions, strict=True))
            ]
        index_of = {future.key: index for index, future in enumerate(futures)}
        outcomes: list[Outcome | None] = [None] * len(futures)
        sent: dict[str, int] = {}
        try:
            for future in as_completed(futures):
                index = index_of[future.key]
                outcome = Outcome(names[index])
                try:
                    outcome.value = future.result()
                except Exception as error:  # noqa: BLE001 (a lost worker, after its retries)
                    outcome.error = _reason(error)
                    outcome.attempts = self.retries + 1
                if isinstance(outcome.value, _Raised):
                    raised, outcome.value = outcome.value, None
                    if not isinstance(raised.error, TracekitError):  # a bug: fail loudly
                        self.client.cancel(futures)
                        raised.error.add_note(f"in partition {outcome.key} on a Dask worker:\n"
                                              f"{raised.traceback}")
                        raise raised.error
                    outcome.error = str(raised.error)
                if relay is not None and outcome.ok:
                    outcome.value, sent[outcome.key] = outcome.value
                outcomes[index] = outcome
                future.release()
                if on_done is not None:
                    on_done(outcome)
            if relay is not None:
                relay.drain(sent)
        finally:
            if relay is not None:
                self.client.unsubscribe_topic(topic)
        return [o for o in outcomes if o is not None]

    def worker_peak_rss_bytes(self) -> dict[str, int]:
        return {str(worker): int(peak) for worker, peak in
                self.client.run(_peak_rss_bytes).items()}


def warm_up(targets: Sequence[str] = WARM_UP) -> None:
    """Import and load :data:`WARM_UP`; results do not change, only when their cost is paid."""
    for target in targets:
        module, _, function = target.partition(":")
        loaded = importlib.import_module(module)
        if function:
            getattr(loaded, function)()


def _start_warm_up() -> None:
    """On a worker (``client.run``): :func:`warm_up` in a daemon thread, returning at once so
    the worker's event loop and its first tasks are not held up (a task that needs a module
    being imported waits for that import, it does not repeat it)."""
    threading.Thread(target=warm_up, name="tracekit-warm-up", daemon=True).start()


def map_all(executor: Executor, function: Callable[[Any], Any], partitions: Sequence[Any],
            key: Callable[[Any], str] = str) -> list[Any]:
    """Every partition's value, in partition order, for a step whose result is only right when
    complete (a detection without some ranks would name the wrong culprits): partitions that
    still fail after their retries raise one error naming each of them, and nothing is kept."""
    outcomes = executor.map_partitions(function, partitions, key=key)
    failed = [outcome.failure for outcome in outcomes if not outcome.ok]
    if failed:
        raise TracekitError(f"{len(failed)} of {len(outcomes)} partitions failed, nothing was "
                            "written: " + "; ".join(failed))
    return [outcome.value for outcome in outcomes]


PARTITIONS_PER_WORKER = 4
"""Partitions per worker a step aims for when there are several workers: with a few per
worker, handed out largest first, no worker idles while another runs the last big one."""


RANKS_PER_BLOCK = 16
"""Ranks of one partition of the detect stage (``tracekit detect --cluster``): a block of
ranks' rows a detector runs together, and a block of ranks whose own times are read (one rank
at a time within it, a rank's calls joined to its own iterations only, so a worker holds one
rank's calls whatever the job). Blocks are fixed by rank order, never by the number of
workers, because BOCD steps a block's rows together and prunes run lengths jointly (kept while
any row needs one), so a rank's change points can depend on its block (1-6 of 256 ranks of
10,000 iterations move between one block of 256 and blocks of 16); detectors that read each
row alone (the sliding window) give the same result for any split. With the compiled
recursion small blocks cost nothing per rank, and they spread a job over the workers."""


def partition_size(items: int, executor: Executor, most: int) -> int:
    """Items per partition: at most ``most`` (a partition's memory), and with several workers
    small enough for :data:`PARTITIONS_PER_WORKER` partitions each. The local loop keeps
    ``most``: smaller partitions would only repeat per-partition reads."""
    workers = executor.description.get("workers", 1)
    if workers <= 1:
        return most
    return max(1, min(most, math.ceil(items / (workers * PARTITIONS_PER_WORKER))))


RANK_FOLDER = re.compile(r"rank=(\d+)")
"""A table's folder of one rank's parts (``collectives/rank=5/``), as ingest writes them."""

RankScans = Mapping[int, pl.LazyFrame]
"""Each rank's rows of a table, one lazy scan per rank: what a partition that reads its ranks
one at a time (a worker holds one rank's rows) is handed."""


def rank_scans(dataset: Dataset, table: str, ranks: Iterable[int]) -> dict[int, pl.LazyFrame]:
    """Each of ``ranks``' rows of ``table``, each scan opening only the parts of its
    ``rank=N`` folder (and any part outside such a folder, whose ranks only its rows tell),
    from one listing of the parts. Filtering the whole table by rank instead opens every
    part's footer for every rank: quadratic in the ranks (iterations' per-rank reads took
    0.014 CPU-s a rank at 16 ranks, 0.018 at 32)."""
    by_rank: dict[int | None, list[Path]] = {}
    for part in dataset.parts(table):
        folder = RANK_FOLDER.fullmatch(part.parent.name)
        by_rank.setdefault(None if folder is None else int(folder.group(1)), []).append(part)
    spec = schema.table(table)
    scans = {}
    for rank in ranks:
        parts = sorted([*by_rank.get(None, []), *by_rank.get(rank, [])])
        scan = (pl.scan_parquet(parts, schema=spec.schema, hive_partitioning=False) if parts
                else spec.empty().lazy())
        scans[rank] = scan.filter(pl.col("rank") == rank)
    return scans


def per_rank(rows: pl.LazyFrame | RankScans, ranks: Iterable[int]) -> dict[int, pl.LazyFrame]:
    """Each of ``ranks``' rows: ``rows`` itself when already one scan per rank
    (:func:`rank_scans`), else ``rows`` filtered to each rank."""
    if isinstance(rows, Mapping):
        return {rank: rows[rank] for rank in ranks}
    return {rank: rows.filter(pl.col("rank") == rank) for rank in ranks}


def record_build(dataset: Dataset, stage: str, executor: Executor, **details: Any) -> None:
    """Note in the manifest's ``build`` section what ran ``stage`` (saved with the manifest)."""
    dataset.record_build(stage, {**executor.description, **details})


def _local_workers(spec: str) -> int:
    """Worker count of ``local`` (one per CPU) or ``local:N``."""
    if spec == "local":
        return os.cpu_count() or 1
    count = spec.removeprefix("local:")
    if not count.isdigit() or int(count) < 1:
        raise TracekitError(f"--cluster {spec!r}: the worker count must be a positive whole "
                            "number, e.g. local:4")
    return int(count)


def _check_reachable(address: str, timeout_s: float) -> None:
    """Fail within ``timeout_s`` with a message naming the address when nothing listens there,
    instead of Dask's retries until its own, longer timeout."""
    host, _, port = address.removeprefix("tcp://").rpartition(":")
    if not host or not port.isdigit():
        raise TracekitError(f"--cluster {address!r} is not an address; use {CLUSTER_FORMS}")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as error:
        raise TracekitError(
            f"cannot reach a Dask scheduler at {address} ({error.strerror or error}); start one "
            "(`dask scheduler`, dask-jobqueue, the Kubernetes operator) or check the address and "
            "that this machine can connect to it") from None


def _one_core_cluster(local_cluster: Callable[..., Any], workers: int) -> Any:
    """A LocalCluster of ``workers`` single-threaded processes capped to one core each.

    The cap must be in a worker's environment before it starts: a spawned worker re-imports
    the main module (the CLI, a script), which imports polars before Dask applies a Nanny's
    ``env``. Dask's ``pre-spawn-environ`` sets it in this process's environment to pass it on
    (also when a worker is restarted); this process's environment is put back afterwards."""
    import dask

    spawn_environment = {**dask.config.get("distributed.nanny.pre-spawn-environ", {}),
                         **ONE_CORE_ENVIRONMENT, **UNSET_ENVIRONMENT}
    saved = {name: os.environ.get(name) for name in spawn_environment}
    try:
        with dask.config.set({"distributed.nanny.pre-spawn-environ": spawn_environment,
                              **QUIET_DASK_CONFIG}):
            return local_cluster(n_workers=workers, threads_per_worker=1, processes=True,
                                 dashboard_address=None, silence_logs=logging.ERROR)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextmanager
def open_executor(
    cluster: str | None = None,
    retries: int = RETRIES,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
) -> Iterator[Executor]:
    """The executor for a ``--cluster`` value (None: the local loop). A LocalCluster started
    here is shut down on exit; a remote scheduler is only disconnected from."""
    if cluster is None:
        yield LocalExecutor(retries)
        return
    spec = cluster.strip()
    if not (spec == "local" or spec.startswith(("local:", "tcp://"))):
        raise TracekitError(f"--cluster {cluster!r} is not understood; use {CLUSTER_FORMS}")
    local = spec.startswith("local")
    workers = _local_workers(spec) if local else 0
    if not local:
        _check_reachable(spec, connect_timeout_s)
    try:
        import dask
        from distributed import Client, LocalCluster
    except ImportError:
        raise TracekitError("--cluster needs Dask: install tracekit's distributed extra "
                            "(pip install 'tracekit[distributed]')") from None
    if local:
        # one single-threaded worker process per core: partitions hold the GIL in parts, and a
        # process per worker gives each its own bounded memory
        started = _one_core_cluster(LocalCluster, workers)
        with dask.config.set(QUIET_DASK_CONFIG):
            client = Client(started)
    else:
        started = None
        try:
            with dask.config.set(QUIET_DASK_CONFIG):
                client = Client(spec, timeout=connect_timeout_s)
        except Exception as error:  # noqa: BLE001 (any handshake failure means the same)
            raise TracekitError(
                f"cannot connect to a Dask scheduler at {spec}: {_reason(error)}; check that "
                "it is a Dask scheduler and that client and workers run the same Dask "
                "version") from None
    try:
        client.run(_start_warm_up)
        yield DaskExecutor(client, spec, retries)
    finally:
        client.close()
        if started is not None:
            started.close()

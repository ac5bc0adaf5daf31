"""Nsight Systems SQLite exports written by hand, table for table as ``nsys export --type
sqlite`` lays them out (export schema 3.24, Nsight Systems 2026.1; the older ``TARGET_INFO_GPU``
layout with bus, memory and SM count), and a small GPU job simulated into them: per rank and
step, compute kernels on one stream and one NCCL all-reduce per data-parallel pair on another,
started when the rank arrives and ended when its last peer has arrived and the data moved.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

SCHEMA = """
CREATE TABLE StringIds(id INTEGER PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE META_DATA_EXPORT(name TEXT NOT NULL, value TEXT);
CREATE TABLE TARGET_INFO_SESSION_START_TIME(utcEpochNs INTEGER, utcTime TEXT, localTime TEXT);
CREATE TABLE TARGET_INFO_SYSTEM_ENV(globalVid INTEGER, devStateName TEXT NOT NULL,
 name TEXT NOT NULL, nameEnum INTEGER NOT NULL, value TEXT NOT NULL);
CREATE TABLE TARGET_INFO_GPU(id INTEGER NOT NULL, name TEXT, busLocation TEXT,
 totalMemory INTEGER, smCount INTEGER, chipName TEXT, memoryBandwidth INTEGER, uuid TEXT);
CREATE TABLE TARGET_INFO_CUDA_DEVICE(gpuId INTEGER, cudaId INTEGER, pid INTEGER, uuid TEXT,
 numMultiprocessors INTEGER);
CREATE TABLE NVTX_EVENTS(start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL,
 rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER,
 endGlobalTid INTEGER, textId INTEGER, domainId INTEGER, jsonText TEXT);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME(start INTEGER NOT NULL, end INTEGER NOT NULL,
 eventClass INTEGER NOT NULL, globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL,
 returnValue INTEGER NOT NULL, callchainId INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL(start INTEGER NOT NULL, end INTEGER NOT NULL,
 deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, greenContextId INTEGER,
 streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
 demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, graphNodeId INTEGER,
 graphId INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY(start INTEGER NOT NULL, end INTEGER NOT NULL,
 deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, greenContextId INTEGER,
 streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, bytes INTEGER NOT NULL,
 copyKind INTEGER NOT NULL, srcKind INTEGER, dstKind INTEGER, graphNodeId INTEGER);
"""

SESSION_START_NS = 1_790_000_000_000_000_000
COMPUTE_STREAM, NCCL_STREAM = 7, 20
GEMM = "ampere_sgemm_128x64_nn"
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


def global_pid(pid: int) -> int:
    return (1 << 56) | (pid << 24)


@dataclass
class Export:
    """One rank's (one process's) rows, in the tables' column order."""

    rank: int
    host: str
    device: int
    pid: int
    nvtx: list[tuple] = field(default_factory=list)
    runtime: list[tuple] = field(default_factory=list)
    kernels: list[tuple] = field(default_factory=list)
    memcpy: list[tuple] = field(default_factory=list)
    correlation: int = 0

    def launch(self, at_ns: int, start_ns: int, end_ns: int, name_id: int, stream: int) -> None:
        self.correlation += 1
        tid = global_pid(self.pid) | self.pid
        self.runtime.append((at_ns - SESSION_START_NS, at_ns + 4_000 - SESSION_START_NS, 1, tid,
                             self.correlation, 3, 0, None))
        self.kernels.append((start_ns - SESSION_START_NS, end_ns - SESSION_START_NS,
                             self.device, 1, None, stream, self.correlation,
                             global_pid(self.pid), name_id, name_id, None, None))


STRINGS = [(1, GEMM), (2, ALLREDUCE), (3, "cudaLaunchKernel")]


def write_export(path: Path, exports: list[Export]) -> Path:
    """One export holding ``exports`` (one per process), with the GPUs of their devices."""
    db = sqlite3.connect(path)
    db.executescript(SCHEMA)
    db.executemany("INSERT INTO StringIds VALUES (?, ?)", STRINGS)
    db.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '3.24.14')")
    db.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, '', '')",
               (SESSION_START_NS,))
    db.execute("INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (1, 'Host', 'Hostname', 1, ?)",
               (f"{exports[0].host}.cluster.local",))
    for device in range(max(e.device for e in exports) + 1):
        db.execute("INSERT INTO TARGET_INFO_GPU VALUES (?, 'NVIDIA A100-SXM4-80GB', ?, ?, 108, "
                   "'GA100', 2039000000000, ?)",
                   (device, f"0000:{0x07 + device:02X}:00.0", 85_899_345_920,
                    f"GPU-{device:08x}-aaaa-bbbb-cccc-000000000000"))
    for export in exports:
        db.execute("INSERT INTO TARGET_INFO_CUDA_DEVICE VALUES (?, 0, ?, '', 108)",
                   (export.device, export.pid))
        db.executemany("INSERT INTO NVTX_EVENTS VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", export.nvtx)
        db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,?,?,?,?)",
                       export.runtime)
        db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                       export.kernels)
        db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES "
                       "(?,?,?,?,?,?,?,?,?,?,?,?,?)", export.memcpy)
    db.commit()
    db.close()
    return path


@dataclass(frozen=True)
class Job:
    """A data-parallel GPU job: ``ranks`` ranks, ``ranks_per_host`` per host, all-reduces in
    pairs (2k, 2k + 1) or over every rank (``pairs=False``). From step ``slow_from`` on,
    ``slow_rank``'s compute kernels take ``compute_factor`` x as long, its host launches each
    step ``host_delay_us`` late, and the transfers of the pairs crossing ``slow_link`` (a host
    pair) take ``transfer_factor`` x as long."""

    ranks: int = 4
    ranks_per_host: int = 1
    steps: int = 12
    pairs: bool = True
    slow_rank: int | None = None
    slow_from: int = 0
    compute_factor: float = 1.0
    host_delay_us: int = 0
    slow_link: tuple[str, str] | None = None
    transfer_factor: float = 1.0
    compute_us: int = 1_000
    transfer_us: int = 600

    def host(self, rank: int) -> str:
        return f"node{rank // self.ranks_per_host:02d}"

    def peers(self, rank: int) -> list[int]:
        if not self.pairs:
            return list(range(self.ranks))
        first = rank - rank % 2
        return [first, first + 1]


def simulate(job: Job) -> list[Export]:
    """Each rank's rows. A step: the host launches four GEMMs 10 us apart, the all-reduce
    after the second (it waits for it on the GPU), and a fifth GEMM (the optimizer) once the
    all-reduce is done; the step's NVTX range ends 20 us after its last kernel, and the next
    step starts when every rank's has ended."""
    exports = [Export(r, job.host(r), r % job.ranks_per_host, 1000 + r)
               for r in range(job.ranks)]
    start = SESSION_START_NS + 1_000_000
    for step in range(job.steps):
        arrivals, state = {}, {}
        for export in exports:
            slow = export.rank == job.slow_rank and step >= job.slow_from
            compute = int(job.compute_us * 1_000 * (job.compute_factor if slow else 1.0))
            at = start + (job.host_delay_us * 1_000 if slow else 0)
            gpu_free, ends = at, []
            for k in range(4):
                launch = at + k * 10_000
                begin = max(launch + 5_000, gpu_free)
                gpu_free = begin + compute
                export.launch(launch, begin, gpu_free, 1, COMPUTE_STREAM)
                ends.append(gpu_free)
            arrivals[export.rank] = ends[1]
            state[export.rank] = (at, ends[-1])
        for export in exports:
            peers = job.peers(export.rank)
            crossing = {job.host(p) for p in peers}
            factor = (job.transfer_factor if job.slow_link and step >= job.slow_from
                      and set(job.slow_link) <= crossing else 1.0)
            last = max(arrivals[p] for p in peers)
            done = last + int(job.transfer_us * 1_000 * factor)
            at, compute_end = state[export.rank]
            export.launch(at + 15_000, arrivals[export.rank], done, 2, NCCL_STREAM)
            begin = max(done, compute_end)
            slow = export.rank == job.slow_rank and step >= job.slow_from
            optimizer = int(job.compute_us * 500 * (job.compute_factor if slow else 1.0))
            export.launch(at + 40_000, begin, begin + optimizer, 1, COMPUTE_STREAM)
            state[export.rank] = (at, begin + optimizer + 20_000)
        for export in exports:
            tid = global_pid(export.pid) | export.pid
            export.nvtx.append((start - SESSION_START_NS,
                                state[export.rank][1] - SESSION_START_NS, 59, None, None,
                                None, f"ProfilerStep#{step}", tid, None, None, None, None))
        start = max(end for _, end in state.values())
    return exports


def write_job(folder: Path, job: Job) -> Path:
    """One export per rank (``report_<rank>.sqlite``) as ``nsys profile -o report_%q{RANK}``
    writes them."""
    folder.mkdir(parents=True, exist_ok=True)
    for export in simulate(job):
        write_export(folder / f"report_{export.rank}.sqlite", [export])
    return folder

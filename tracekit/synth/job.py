"""Generate one labeled job folder: simulate the job chunk by chunk, stream every raw format
to disk, then write the labels and the per-iteration ground truth.

Folder layout::

    JOB/synth.json                    what was generated (spec, seed, tracekit version)
    JOB/labels.parquet                the labels table (fail-slows and benign noise episodes)
    JOB/truth.parquet                 per-iteration ground truth
    JOB/ranks/rank<N>.hook.csv        collective calls, hook CSV (--collectives hook)
    JOB/ranks/nccl.<host>.<pid>.log   or NCCL_DEBUG=INFO logs per process (--collectives nccl)
    JOB/megatron/train.log            stdout of the last rank (iteration lines, timers)
    JOB/monitoring/<host>/...         dcgm-exporter, node_exporter (CPU) scrapes, mlx5
                                      hw_counters and ipmitool sensor snapshots
"""

from __future__ import annotations

import json
import shutil
import tarfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from tracekit.errors import TracekitError
from tracekit.synth import faults as F
from tracekit.synth.calls import CallBuilder, Identity
from tracekit.synth.labels import label_frame, mark_truth, truth_frame
from tracekit.synth.layout import Layout
from tracekit.synth.schedule import TIMER_NAMES, StageSchedule, Timing
from tracekit.synth.timing import Conditions, Simulator
from tracekit.synth.writers.hook_csv import HookCsvWriter
from tracekit.synth.writers.megatron_log import MegatronLogWriter
from tracekit.synth.writers.monitoring import write_monitoring
from tracekit.synth.writers.nccl_debug import NcclDebugWriter

CHUNK_CYCLES = 128
"""Cycles simulated at once. Random draws are made per chunk, so this is part of the seed's
meaning: changing it changes the output of a seed."""

DEFAULT_START_NS = 1_760_432_400 * 10**9
"""2025-10-14 09:00:00 UTC: the default wall-clock start of a synthetic job."""

COLLECTIVE_FORMATS = ("hook", "nccl", "none")
MONITORING_FILES = ("series", "scrapes")
"""Collective logs: tracekit hook CSV per rank, NCCL_DEBUG=INFO log per process, or none.
One format per job: both would give every call twice in one dataset."""


@dataclass(frozen=True)
class JobSpec:
    """Everything that defines a synthetic job; the same spec and seed give the same bytes."""

    layout: Layout = field(default_factory=Layout)
    iterations: int = 3000
    seed: int = 0
    injections: tuple[F.Injection, ...] = ()
    noise: F.Noise = field(default_factory=F.Noise)
    policy: F.LabelPolicy = field(default_factory=F.LabelPolicy)
    timing: Timing = field(default_factory=Timing)
    collectives: str = "hook"
    nccl_timestamps: bool = True
    """NCCL 2.26+ ``NCCL_DEBUG_TIMESTAMP_LEVELS=INFO``: without timestamps an NCCL log has no
    timing, so they are on unless asked otherwise."""
    monitoring: bool = True
    monitoring_files: str = "series"
    """``series``: one file per exporter and host with a marker per scrape; ``scrapes``: one
    file per scrape named by exporter, host and time, as collectors leave them
    (:mod:`tracekit.synth.writers.scrape_files`)."""
    job: str = "synth-job"
    start_ns: int = DEFAULT_START_NS
    host_prefix: str = "gpu"

    def check(self) -> None:
        self.layout.check()
        if self.iterations < 2:
            raise TracekitError("a job needs at least 2 iterations")
        if self.monitoring_files not in MONITORING_FILES:
            raise TracekitError(f"monitoring files {self.monitoring_files!r} is not one of "
                                f"{', '.join(MONITORING_FILES)}")
        if self.collectives not in COLLECTIVE_FORMATS:
            raise TracekitError(f"collectives format {self.collectives!r} is not one of "
                                f"{', '.join(COLLECTIVE_FORMATS)}")


@dataclass
class JobResult:
    path: Path
    labels: pl.DataFrame
    truth: pl.DataFrame
    iteration_s: float
    """Healthy iteration time without noise (what start / duration in wall time convert with)."""


class JobRun:
    """One simulation in progress: plan, simulator, and the streaming writers."""

    def __init__(self, spec: JobSpec) -> None:
        spec.check()
        self.spec = spec
        self.layout = spec.layout
        self.hosts = self.layout.host_names(spec.host_prefix)
        self.schedule = StageSchedule(self.layout, spec.timing)
        self.simulator = Simulator(self.layout, self.schedule.stage_ops())
        plan_rng = np.random.default_rng([spec.seed, 0])
        self.identity = Identity.draw(self.layout, self.hosts, plan_rng)
        self.iteration_s = self.nominal_iteration_s()
        slowing = [i for i in spec.injections if not i.is_decoy]
        self.faults = F.resolve(slowing, self.layout, spec.iterations, self.iteration_s,
                                plan_rng, self.hosts)
        # decoys draw from their own stream: adding one changes nothing else about the job
        self.faults += F.resolve([i for i in spec.injections if i.is_decoy], self.layout,
                                 spec.iterations, self.iteration_s,
                                 np.random.default_rng([spec.seed, 7]), self.hosts,
                                 first_episode=len(slowing))
        self.events = F.draw_noise(spec.noise, self.layout, spec.iterations, plan_rng)
        self.dp_of_rank = np.array([self.layout.coords(r)[1] for r in range(self.layout.world)])

    def nominal_iteration_s(self) -> float:
        """One healthy cycle without noise or extra work."""
        w = self.layout.world
        one = np.ones((1, w))
        cond = Conditions(one, one, {"stall": 0 * one, "checkpoint": 0 * one},
                          {k: np.array([k in ("head", "tail")]) for k in
                           ("head", "tail", "log", "eval", "checkpoint")})
        return float(self.simulator.run(cond, record=False).end_s[0])

    def conditions(self, k0: int, k1: int, healthy: bool) -> Conditions:
        """Inputs of cycles [k0, k1): noise always, faults unless ``healthy``."""
        spec, L, noise = self.spec, self.layout, self.spec.noise
        n, m = spec.iterations, k1 - k0
        k = np.arange(k0, k1)
        it = np.minimum(k, n - 1)
        rng = np.random.default_rng([spec.seed, 1, k0 // CHUNK_CYCLES])
        common = rng.lognormal(0.0, noise.jitter_sigma, m)
        sequence = rng.lognormal(0.0, noise.sequence_sigma, (m, L.dp))
        per_rank = rng.lognormal(0.0, noise.rank_sigma, (m, L.world))
        host = rng.lognormal(0.0, noise.rank_sigma, (m, L.world))
        warmup = np.ones(m)
        early = it < len(noise.warmup)
        warmup[early] = np.asarray(noise.warmup)[it[early]]
        gpu = (common * warmup)[:, None] * sequence[:, self.dp_of_rank] * per_rank
        links: dict[object, np.ndarray] = {}
        if not healthy:
            for fault in (f for f in self.faults if f.slows_job):
                factor = fault.factor(it)
                if fault.cause.startswith("gpu"):
                    gpu[:, fault.rank] *= factor
                elif fault.cause == "cpu-contention":
                    on_host = np.arange(L.world) // L.gpus_per_host == fault.host
                    host[:, on_host] *= factor[:, None]
                else:
                    target = fault.congestion_target
                    links[target] = np.maximum(links.get(target, 1.0), factor)
        stall = np.zeros((m, L.world))
        checkpoint = np.zeros(m)
        for event in self.events:
            if not k0 <= event.iteration < k1:
                continue
            if event.rank is not None:
                stall[event.iteration - k0, event.rank] += event.seconds
            elif event.cause == "checkpoint":
                checkpoint[event.iteration - k0] = event.seconds
        masks = {
            "head": k < n,
            "tail": k >= 1,
            "log": (k >= 1) & (k % noise.log_interval == 0),
            "eval": (k >= 1) & (k < n) & (k % noise.eval_interval == 0),
            "checkpoint": (k >= 1) & (k < n) & (k % noise.save_interval == 0),
        }
        return Conditions(gpu, host, {"stall": stall,
                                      "checkpoint": np.repeat(checkpoint[:, None], L.world, 1)},
                          masks, links)


def generate_job(out: Path, spec: JobSpec, pack: bool = False) -> JobResult:
    """Simulate ``spec`` and write the job folder ``out`` (replacing an earlier synthetic job
    there; refusing to touch a folder that holds anything else). ``pack`` replaces the raw
    sub-folders by ``.tar.xz`` archives (what ingest reads as well) for committed data."""
    out = Path(out)
    _prepare(out)
    run = JobRun(spec)
    (out / SYNTH_MARKER).write_text(json.dumps(_describe(spec, run), indent=2, default=str)
                                    + "\n")
    L, n = run.layout, spec.iterations
    writers = []
    if spec.collectives == "hook":
        writers.append(HookCsvWriter(out / "ranks", L, run.identity))
    elif spec.collectives == "nccl":
        writers.append(NcclDebugWriter(out / "ranks", L, run.identity, spec.seed, spec.start_ns,
                                       spec.nccl_timestamps))
    megatron = MegatronLogWriter(out / "megatron" / "train.log", spec, run,
                                 np.random.default_rng([spec.seed, 3]))
    calls_of = CallBuilder(L)
    starts_ns = np.zeros(n + 1, dtype=np.int64)
    lengths_ns = np.zeros(n + 1, dtype=np.int64)
    healthy_s = np.zeros(n + 1)
    excluded_s = np.zeros(n + 1)
    timer_count = len(TIMER_NAMES)
    unlogged = [TIMER_NAMES.index("evaluate"), TIMER_NAMES.index("save-checkpoint")]
    cursor_ns = spec.start_ns
    head_before: np.ndarray | None = None
    for k0 in range(0, n + 1, CHUNK_CYCLES):
        k1 = min(n + 1, k0 + CHUNK_CYCLES)
        cond = run.conditions(k0, k1, healthy=False)
        result = run.simulator.run(cond, record=True)
        healthy_s[k0:k1] = (
            run.simulator.run(run.conditions(k0, k1, healthy=True), record=False).end_s
            if any(f.slows_job for f in run.faults) else result.end_s)
        lengths = np.round(result.end_s * 1e9).astype(np.int64)
        starts_ns[k0:k1] = cursor_ns + np.concatenate([[0], np.cumsum(lengths)[:-1]])
        lengths_ns[k0:k1] = lengths
        cursor_ns = int(starts_ns[k1 - 1] + lengths[-1])
        if writers:
            calls = calls_of.frame(result, starts_ns[k0:k1], k0)
            for writer in writers:
                writer.write(calls)
        # head timers of cycle k and tail timers of cycle k + 1 make iteration k
        timers = result.timers_s.reshape(k1 - k0, L.world, 2, timer_count)
        excluded_s[k0:k1] = timers[:, :, 1, unlogged].sum(axis=2).max(axis=1)
        for j, k in enumerate(range(k0, k1)):
            if head_before is not None:
                i = k - 1
                megatron.add(i, int(starts_ns[i] + lengths_ns[i]), lengths_ns[i] / 1e9,
                             excluded_s[i], head_before + timers[j, :, 1])
                if cond.masks["checkpoint"][j]:
                    megatron.checkpoint(k, timers[j, :, 1, unlogged[1]])
            head_before = timers[j, :, 0]
    megatron.close()
    if spec.monitoring:
        write_monitoring(out, run, starts_ns[:n], starts_ns[:n] + lengths_ns[:n],
                         scrape_files=spec.monitoring_files == "scrapes")
    truth = truth_frame(spec, starts_ns[:n], lengths_ns[:n], healthy_s[:n])
    labels = label_frame(spec, run, truth)
    truth = mark_truth(truth, labels)
    labels.write_parquet(out / "labels.parquet")
    truth.write_parquet(out / "truth.parquet")
    if pack:
        for folder in PACKED_FOLDERS:
            if (out / folder).is_dir():
                pack_folder(out / folder)
    return JobResult(out, labels, truth, run.iteration_s)


PACKED_FOLDERS = ("ranks", "megatron", "monitoring")


def pack_folder(folder: Path) -> Path:
    """Replace ``folder`` by ``folder.tar.xz`` with reproducible bytes: members sorted, owner,
    mode and time fixed, so the same seed still gives the same archive."""
    archive = folder.with_name(folder.name + ".tar.xz")
    with tarfile.open(archive, "w:xz", format=tarfile.PAX_FORMAT, preset=6) as tar:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            info = tarfile.TarInfo(path.relative_to(folder.parent).as_posix())
            info.size, info.mode, info.mtime = path.stat().st_size, 0o644, 0
            with path.open("rb") as stream:
                tar.addfile(info, stream)
    shutil.rmtree(folder)
    return archive


SYNTH_MARKER = "synth.json"


def _prepare(out: Path) -> None:
    if out.exists() and any(out.iterdir()):
        if not (out / SYNTH_MARKER).is_file():
            raise TracekitError(f"{out} exists and is not a synthetic job folder; choose an "
                                "empty or new folder")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)


def _describe(spec: JobSpec, run: JobRun) -> dict:
    return {
        "generator": "tracekit synth",
        "job": spec.job,
        "seed": spec.seed,
        "iterations": spec.iterations,
        "layout": spec.layout.label,
        "world": spec.layout.world,
        "hosts": run.hosts,
        "nominal_iteration_s": run.iteration_s,
        "spec": asdict(spec),
    }

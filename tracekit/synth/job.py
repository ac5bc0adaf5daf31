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
                                      hw_counters and ipmitool sensor snapshots (or as
                                      another --dump-layout lays them out)
"""

from __future__ import annotations

import json
import shutil
import tarfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import polars as pl

from tracekit.core.errors import TracekitError
from tracekit.synth.calls import CallBuilder
from tracekit.synth.labels import label_frame, mark_truth, truth_frame
from tracekit.synth.run import CHUNK_CYCLES, JobRun, JobSpec
from tracekit.synth.schedule import TIMER_NAMES
from tracekit.synth.writers.dump_layout import arrange
from tracekit.synth.writers.hook_csv import HookCsvWriter
from tracekit.synth.writers.megatron_log import MegatronLogWriter
from tracekit.synth.writers.monitoring import write_monitoring
from tracekit.synth.writers.nccl_debug import NcclDebugWriter


@dataclass
class JobResult:
    path: Path
    labels: pl.DataFrame
    truth: pl.DataFrame
    iteration_s: float
    """Healthy iteration time without noise (what start / duration in wall time convert with)."""


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
                         scrape_files=spec.monitoring_files == "scrapes"
                         and spec.dump_layout == "per-host")
        arrange(out / "monitoring", run.hosts, spec.dump_layout, spec.job)
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

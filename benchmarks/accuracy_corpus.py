"""The fresh-seed corpus of ``python -m benchmarks accuracy``: jobs drawn from a seed, each a
parallel layout on 2-8 hosts, a dump layout (how the files lie on disk) and a scenario (which
episodes, back to back or overlapping, with decoys), written by the synthesizer.

A dump layout is a :class:`DumpLayout`: the synthesizer's options (its collective log, its
monitoring files, where they lie: ``synth --dump-layout``, and how hosts are named) plus a
function that moves or rewrites the written files. A new layout is one entry in
:data:`DUMP_LAYOUTS`.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from tracekit.synth.corpus import CI_HOST, PROBE_MODEL
from tracekit.synth.faults import Component, Injection
from tracekit.synth.job import JobSpec, generate_job
from tracekit.synth.layout import Layout

ITERATIONS = 300
"""Iterations per job."""

MODEL = replace(PROBE_MODEL, layers=2, micro_batches=2, hidden=8192)
"""Two wide layers: iterations of 0.7-3 s (as the steps of production jobs), so that an
episode of 40-90 iterations lasts 30 s to 4 min of 15 s scrapes, and few calls per iteration,
so that a job takes seconds. Narrower layers gave 0.2-0.8 s iterations: episodes shorter than
two DCGM scrapes, which no monitoring signal can show."""

PARALLEL = ((2, 2, 1, 2), (1, 4, 1, 2), (2, 3, 1, 2), (2, 4, 1, 2), (2, 2, 2, 2),
            (1, 4, 2, 2), (2, 4, 1, 1), (1, 4, 2, 1), (4, 2, 1, 4), (2, 2, 2, 4))
"""(TP, DP, PP, GPUs per host): 2 to 8 hosts, at most 8 ranks so a job takes seconds."""


def _flatten(job: Path) -> None:
    """Every scrape file straight under ``monitoring/``: the host is only in its name (the
    ipmitool snapshots, one file per host with the host inside, stay in their folders)."""
    monitoring = job / "monitoring"
    for path in sorted(monitoring.glob("*/*")):
        if path.parent.name in path.name:
            path.rename(monitoring / path.name)


def _repeat_dcgm_collects(job: Path) -> None:
    """dcgm-exporter's 30 s collect under a 15 s scrape: every other DCGM scrape file serves
    the values of the one before it (the file keeps its own name, so its own time)."""
    for folder in {p.parent for p in job.glob("monitoring/**/dcgm.*.prom")}:
        by_host: dict[str, list[Path]] = {}
        for path in folder.glob("dcgm.*.prom"):
            host, _, stamp = path.name.removeprefix("dcgm.").removesuffix(".prom").rpartition(".")
            by_host.setdefault(host, []).append(path)
        for paths in by_host.values():
            paths.sort(key=lambda p: int(p.name.split(".")[-2]))
            for first, repeat in zip(paths[::2], paths[1::2], strict=False):
                shutil.copyfile(first, repeat)


EXPORTERS = {"dcgm": "dcgm_exporter.prom", "node": "node_exporter.prom",
             "rnic": "mlx5_hw_counters.txt", "ipmi": "ipmitool_sensor.txt"}
"""The synthesizer's series file of each exporter (the per-host-series layout)."""


def _only(*kept: str) -> Callable[[Path], None]:
    """A rewrite that leaves only the ``kept`` exporters' files, as a site that runs only some
    (none: the collective log alone), so that verdicts resting on timing alone, or on a cause
    by elimination, are drawn and their confidence measured."""
    def rewrite(job: Path) -> None:
        for exporter, name in EXPORTERS.items():
            if exporter not in kept:
                for path in job.glob(f"monitoring/*/{name}"):
                    path.unlink()
    return rewrite


@dataclass(frozen=True)
class DumpLayout:
    collectives: str
    monitoring_files: str
    rewrite: Callable[[Path], None] | None = None
    dump_layout: str = "per-host"
    host_prefix: str = "gpu"


DUMP_LAYOUTS: dict[str, DumpLayout] = {
    "hook/per-host-series": DumpLayout("hook", "series"),
    "nccl/per-host-series": DumpLayout("nccl", "series"),
    "nccl/per-host-scrapes": DumpLayout("nccl", "scrapes"),
    "nccl/flat-scrapes": DumpLayout("nccl", "scrapes", _flatten),
    "nccl/scrapes-dcgm-30s": DumpLayout("nccl", "scrapes", _repeat_dcgm_collects),
    "nccl/flat-node-hosts": DumpLayout("nccl", "scrapes", dump_layout="flat",
                                       host_prefix="node-"),
    "nccl/per-exporter": DumpLayout("nccl", "scrapes", dump_layout="per-exporter"),
    "nccl/per-day": DumpLayout("nccl", "scrapes", dump_layout="per-day"),
    "nccl/sysfs-names": DumpLayout("nccl", "scrapes", dump_layout="sysfs-names"),
    "nccl/site-names": DumpLayout("nccl", "scrapes", dump_layout="site-names"),
    "hook/prometheus-job": DumpLayout("hook", "series", dump_layout="prometheus-job"),
}
"""Collective log format, monitoring files, where they lie and how hosts are named, and what
is done to them after writing."""

PARTIAL_MONITORING: dict[str, DumpLayout] = {
    "nccl/no-monitoring": DumpLayout("nccl", "series", _only()),
    "nccl/dcgm-only": DumpLayout("nccl", "series", _only("dcgm")),
    "nccl/no-rnic": DumpLayout("nccl", "series", _only("dcgm", "node", "ipmi")),
    "hook/no-monitoring": DumpLayout("hook", "series", _only()),
    "hook/dcgm-only": DumpLayout("hook", "series", _only("dcgm")),
    "hook/node-only": DumpLayout("hook", "series", _only("node", "ipmi")),
}
"""What many sites have: some exporters, or none. Their verdicts rest on timing alone or on
fewer signals, and cannot name every cause, so the benchmark scores their causes apart."""
DUMP_LAYOUTS.update(PARTIAL_MONITORING)

SCENARIOS = ("clean", "clean", "gpu-thermal", "gpu-degradation", "cpu-contention",
             "network-congestion", "compound", "back-to-back", "two-causes", "decoy",
             "thermal+decoy")
"""Drawn uniformly (clean twice, so about a fifth of the jobs are healthy)."""

SEVERITY = {"gpu-thermal": (1.2, 1.6), "gpu-degradation": (1.2, 1.6),
            "cpu-contention": (1.8, 3.0), "network-congestion": (1.3, 3.0)}


@dataclass(frozen=True)
class DrawnJob:
    name: str
    layout: str
    scenario: str
    spec: JobSpec


def _component(cause: str, layout: Layout, rng: np.random.Generator) -> Component:
    """A cause at a target drawn here, so that two episodes can share it."""
    if cause.startswith("gpu"):
        return Component(cause, "rank", str(int(rng.integers(layout.world))))
    if cause == "cpu-contention":
        return Component(cause, "host", str(int(rng.integers(layout.hosts))))
    crossed = sorted({hop for c in layout.communicators for hop in layout.ring_links(c.ranks)})
    a, b = crossed[int(rng.integers(len(crossed)))]
    return Component(cause, "link", f"{a}-{b}")


def _episode(components: tuple[Component, ...], start: int, length: int,
             rng: np.random.Generator) -> Injection:
    low, high = max(SEVERITY[c.cause] for c in components)
    return Injection(components, start, "it", length, "it",
                     float(np.round(rng.uniform(low, high), 2)))


def _injections(scenario: str, layout: Layout, rng: np.random.Generator
                ) -> tuple[Injection, ...]:
    n = ITERATIONS
    length = int(rng.integers(40, 90))
    start = int(rng.integers(60, n - length - 30))
    one = lambda cause: _component(cause, layout, rng)  # noqa: E731
    if scenario == "clean":
        return ()
    if scenario in SEVERITY:
        return (_episode((one(scenario),), start, length, rng),)
    if scenario == "compound":
        return (_episode((one("network-congestion"), one("gpu-thermal")), start, length, rng),)
    if scenario == "back-to-back":
        cause = str(rng.choice(list(SEVERITY)))
        target, gap, first = one(cause), int(rng.integers(2, 12)), int(rng.integers(25, 45))
        start = int(rng.integers(60, n - 2 * first - gap - 30))
        return (_episode((target,), start, first, rng),
                _episode((target,), start + first + gap, first, rng))
    if scenario == "two-causes":
        a, b = rng.choice(list(SEVERITY), size=2, replace=False)
        first = int(rng.integers(30, 50))
        return (_episode((one(str(a)),), 50, first, rng),
                _episode((one(str(b)),), int(rng.integers(50 + first + 40, n - first - 20)),
                         first, rng))
    decoy = Injection((Component("cnp-surge"),), int(rng.integers(20, n - 100)), "it",
                      int(rng.integers(40, 90)), "it", float(np.round(rng.uniform(1.3, 3.0), 2)))
    if scenario == "decoy":
        return (decoy,)
    return (_episode((one("gpu-thermal"),), start, length, rng), decoy)


def draw_jobs(count: int, seed: int, dumps: tuple[str, ...] = tuple(DUMP_LAYOUTS),
              scenarios: tuple[str, ...] = SCENARIOS) -> list[DrawnJob]:
    """``count`` jobs from ``seed``: dump layouts in turn, parallel layouts and scenarios
    drawn (from ``dumps`` and ``scenarios``, to hunt one kind of miss)."""
    unknown = sorted(set(dumps) - set(DUMP_LAYOUTS)) + sorted(set(scenarios) - set(SCENARIOS))
    if unknown:
        raise ValueError(f"unknown dump layout or scenario: {', '.join(unknown)}")
    rng = np.random.default_rng([seed, 36])
    jobs = []
    for number in range(count):
        tp, dp, pp, per_host = PARALLEL[int(rng.integers(len(PARALLEL)))]
        layout = Layout(tp=tp, dp=dp, pp=pp, gpus_per_host=per_host, model=MODEL,
                        hardware=CI_HOST)
        dump = dumps[number % len(dumps)]
        scenario = str(rng.choice(list(scenarios)))
        name = f"fresh-{number:03d}"
        spec = JobSpec(layout, ITERATIONS, int(rng.integers(2**31)),
                       _injections(scenario, layout, rng),
                       collectives=DUMP_LAYOUTS[dump].collectives,
                       monitoring_files=DUMP_LAYOUTS[dump].monitoring_files,
                       dump_layout=DUMP_LAYOUTS[dump].dump_layout,
                       host_prefix=DUMP_LAYOUTS[dump].host_prefix, job=name)
        jobs.append(DrawnJob(name, dump, scenario, spec))
    return jobs


def write_job(job: DrawnJob, root: Path) -> Path:
    """The job's folder under ``root``, laid out as its dump layout says."""
    folder = root / job.name
    generate_job(folder, job.spec)
    rewrite = DUMP_LAYOUTS[job.layout].rewrite
    if rewrite is not None:
        rewrite(folder)
    return folder

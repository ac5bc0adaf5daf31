"""The fresh-seed corpus of ``python -m benchmarks accuracy``: jobs drawn from a seed, each a
parallel layout on 2-8 hosts, a dump layout (how the files lie on disk) and a scenario (which
episodes, back to back or overlapping, with decoys), written by the synthesizer.

A dump layout is a :class:`DumpLayout`: the synthesizer's options (its collective log, its
monitoring files, where they lie: ``synth --dump-layout``, and how hosts are named) plus a
function that moves or rewrites the written files. A new layout is one entry in
:data:`DUMP_LAYOUTS`.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import tarfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from tracekit.core.thresholds import WARMUP_ITERATIONS
from tracekit.synth.corpus import CI_HOST, PROBE_MODEL
from tracekit.synth.faults import Component, Injection
from tracekit.synth.job import JobSpec, generate_job
from tracekit.synth.layout import Layout
from tracekit.synth.run import JobRun
from tracekit.synth.timing import Conditions

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

BIG_PARALLEL = ((2, 8, 1, 8), (8, 2, 1, 8), (4, 4, 2, 8), (8, 2, 2, 8), (4, 6, 1, 8))
"""16 to 32 ranks, 8 GPUs per host on 2 to 4 hosts (``nccl/big-jobs``)."""


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


# -- a site's own names, files and clocks (rewrites of what the synthesizer wrote) ----------

DOMAIN = "cluster.example.com"
"""The DNS domain of the FQDN layouts."""

_TIME_IN_NAME = re.compile(r"(?<=[._-])(1\d{9})(?=\.)")
"""The scrape time in a scrape file's name (``dcgm.gpu01.1760432400.prom``)."""


def _hosts(job: Path) -> list[str]:
    return json.loads((job / "synth.json").read_text())["hosts"]


def _rename_host(job: Path, spell: Callable[[str], str], contents: bool) -> None:
    """Every monitoring folder and file name that holds a host spelled ``spell(host)``, and with
    ``contents`` the hosts inside (DCGM ``Hostname``, ``# host=`` markers) too; the NCCL logs
    keep the short name (NCCL truncates ``gethostname()`` at the first dot)."""
    hosts = sorted(_hosts(job), key=len, reverse=True)
    word = re.compile(r"(?<![A-Za-z0-9])(" + "|".join(map(re.escape, hosts)) + r")(?![A-Za-z0-9-])")
    for path in sorted((job / "monitoring").rglob("*"), key=lambda p: -len(p.parts)):
        if contents and path.is_file():
            text = path.read_text()
            path.write_text(re.sub(r'(Hostname="|host=)([^"\s]+)',
                                   lambda m: m.group(1) + spell(m.group(2)), text))
        renamed = word.sub(lambda m: spell(m.group(1)), path.name)
        if renamed != path.name:
            path.rename(path.with_name(renamed))


def _fqdn_monitoring(job: Path) -> None:
    """The monitoring host's FQDN everywhere a collector writes it (``hostname -f``: folder,
    file names, DCGM ``Hostname``, ipmitool markers); NCCL Init lines keep the short name."""
    _rename_host(job, lambda host: f"{host}.{DOMAIN}", contents=True)


def _upper_file_names(job: Path) -> None:
    """Folders and file names spell the host in upper case (a site's inventory names), DCGM's
    labels in lower case as the exporter reads them."""
    _rename_host(job, str.upper, contents=False)


def _gzip_scrapes(job: Path) -> None:
    """Every monitoring file compressed where it lies (``dcgm.gpu01.1760432400.prom.gz``), as
    log rotation leaves them."""
    for path in sorted(p for p in (job / "monitoring").rglob("*") if p.is_file()):
        with path.open("rb") as raw, gzip.open(path.with_name(path.name + ".gz"), "wb") as out:
            shutil.copyfileobj(raw, out)
        path.unlink()


def _tar_gz_dump(job: Path) -> None:
    """The whole dump (collective logs, Megatron log, monitoring) as one ``<job>.tar.gz`` of a
    ``<job>/`` folder, as a site hands it over; labels and the synthesizer's notes beside it."""
    folders = [job / name for name in ("ranks", "megatron", "monitoring") if (job / name).is_dir()]
    with tarfile.open(job / f"{job.name}.tar.gz", "w:gz") as tar:
        for folder in folders:
            tar.add(folder, arcname=f"{job.name}/{folder.name}")
    for folder in folders:
        shutil.rmtree(folder)


def _scrape_every_60s(job: Path) -> None:
    """A 60 s scrape interval: only the scrape files on a minute are kept."""
    for path in (job / "monitoring").rglob("*"):
        stamp = _TIME_IN_NAME.search(path.name)
        if stamp is not None and int(stamp.group(1)) % 60:
            path.unlink()


def _scrape_every_5s(job: Path) -> None:
    """A 5 s scrape interval: two scrapes between each two 15 s ones, every value read on the
    way from the one to the other (a counter at a steady rate, a gauge moving), but for the
    clock-event bitmask, which holds until the next reading."""
    groups: dict[tuple[Path, str], list[tuple[int, Path]]] = {}
    for path in (job / "monitoring").rglob("*"):
        if (stamp := _TIME_IN_NAME.search(path.name)) is not None:
            key = (path.parent, path.name.replace(stamp.group(1), "{}", 1))
            groups.setdefault(key, []).append((int(stamp.group(1)), path))
    for (folder, name), scrapes in groups.items():
        scrapes.sort()
        for (ts, first), (_, second) in zip(scrapes, scrapes[1:], strict=False):
            pairs = list(zip(first.read_text().splitlines(), second.read_text().splitlines(),
                             strict=True))
            for step in (1, 2):
                lines = [_between(a, b, step / 3) for a, b in pairs]
                (folder / name.format(ts + 5 * step)).write_text("\n".join(lines) + "\n")


def _between(first: str, second: str, share: float) -> str:
    """A sample line ``share`` of the way from ``first`` to ``second`` (``name{...} value`` or
    sysfs ``path:value``)."""
    if first.startswith("#") or "REASONS" in first:
        return first
    cut = " " if "{" in first or " " in first else ":"
    head, _, a = first.rpartition(cut)
    b = second.rpartition(cut)[2]
    value = float(a) + share * (float(b) - float(a))
    return f"{head}{cut}{round(value) if '.' not in a else f'{value:f}'}"


def _clock_offsets(job: Path) -> None:
    """Each host's monitoring clock off by up to 7 s from the collective log's (and from the
    other hosts'), in the flat scrape files' names, which is where their time is (less than a
    scrape, so no two names meet)."""
    offsets = {host: zlib.crc32(f"{job.name}/{host}".encode()) % 15 - 7 for host in _hosts(job)}
    for path in list((job / "monitoring").rglob("*")):
        host = next((h for h in offsets if f".{h}." in path.name), None)
        if host is not None and (stamp := _TIME_IN_NAME.search(path.name)) is not None:
            moved = int(stamp.group(1)) + offsets[host]
            path.rename(path.with_name(path.name.replace(stamp.group(1), str(moved), 1)))


_NCCL_STAMP = re.compile(r"^\[([^\]]+)\] ")


_WORLD_RANK = re.compile(r"ncclCommInitRank\w* comm \S+ rank (\d+) ")


def _nccl_per_host(job: Path) -> None:
    """One NCCL log per host (``srun --label --output=nccl-%N.log`` without
    ``NCCL_DEBUG_FILE``): the host's processes' lines interleaved in time order, each after
    its task's ``N: `` label."""
    ranks = job / "ranks"
    for host in _hosts(job):
        paths = sorted(ranks.glob(f"nccl.{host}.*.log"))
        lines = []
        for path in paths:
            text = path.read_text()
            label = f"{_WORLD_RANK.search(text).group(1)}: "
            lines += [(m.group(1) if (m := _NCCL_STAMP.match(line)) else "", label + line)
                      for line in text.splitlines()]
        lines = [line for _, line in sorted(lines, key=lambda pair: pair[0])]
        (ranks / f"nccl-{host}.log").write_text("\n".join(lines) + "\n")
        for path in paths:
            path.unlink()


_OP_COUNT = re.compile(r":(\d+):\d+ \[\d+\] NCCL INFO (\w+): opCount (\w+) .* comm (0x[0-9a-f]+) ")


def _nccl_2_26(job: Path) -> None:
    """NCCL 2.26's logs: its version line, and ``opCount`` advancing on every communicator of
    a process (once per launch: a Send / Recv pair shares one), where 2.27 leaves NVLink-only
    ones at 0."""
    for path in sorted((job / "ranks").glob("nccl*.log")):
        counts: dict[tuple[str, str], int] = {}
        last: dict[tuple[str, str], str] = {}
        out = []
        for line in path.read_text().splitlines():
            line = line.replace("NCCL version 2.27.5+cuda12.9", "NCCL version 2.26.2+cuda12.8")
            if (call := _OP_COUNT.search(line)) is not None:
                pid, op, count, pointer = call.groups()
                comm = (pid, pointer)
                paired = {op, last.get(comm)} == {"Send", "Recv"}
                counts[comm] = counts.get(comm, -1) + (0 if paired else 1)
                last[comm] = "" if paired else op
                line = line.replace(f"opCount {count} ", f"opCount {counts[comm]:x} ", 1)
            out.append(line)
        path.write_text("\n".join(out) + "\n")


def _date_time_names(job: Path) -> None:
    """Scrape times in the names as ``date +%Y%m%d-%H%M%S`` writes them, not epoch seconds."""
    for path in list((job / "monitoring").rglob("*")):
        if (stamp := _TIME_IN_NAME.search(path.name)) is not None:
            when = datetime.fromtimestamp(int(stamp.group(1)), UTC).strftime("%Y%m%d-%H%M%S")
            path.rename(path.with_name(path.name.replace(stamp.group(1), when, 1)))


def _address_file_names(job: Path) -> None:
    """Files named by the scrape target's address (``hw_counters/10.20.0.1_<unix>.txt``), as
    collectors that loop over Prometheus targets name them: only DCGM's samples say the host."""
    addresses = {host: f"10.20.0.{index + 1}" for index, host in enumerate(_hosts(job))}
    for path in list((job / "monitoring").rglob("*")):
        host = next((h for h in addresses if path.name.startswith((f"{h}_", f"{h}."))), None)
        if host is not None:
            path.rename(path.with_name(addresses[host] + path.name.removeprefix(host)))


def _instance_host_ports(job: Path) -> None:
    """A Prometheus export whose targets are ``<fqdn>:<port>`` (node_exporter :9100,
    dcgm-exporter :9400) rather than addresses."""
    hosts = _hosts(job)
    for path in (job / "monitoring").glob("prometheus-*.json"):
        document = json.loads(path.read_text())
        for series in document["data"]["result"]:
            address, _, port = series["metric"]["instance"].rpartition(":")
            host = hosts[int(address.rsplit(".", 1)[1]) - 1]
            series["metric"]["instance"] = f"{host}.{DOMAIN}:{port}"
        path.write_text(json.dumps(document) + "\n")


def _chain(*rewrites: Callable[[Path], None]) -> Callable[[Path], None]:
    def rewrite(job: Path) -> None:
        for each in rewrites:
            each(job)
    return rewrite


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
    parallel: tuple[tuple[int, int, int, int], ...] = PARALLEL
    """(TP, DP, PP, GPUs per host) drawn from."""
    iterations: int = ITERATIONS
    nccl_timestamps: bool = True
    """NCCL 2.26+'s ``NCCL_DEBUG_TIMESTAMP_LEVELS=INFO``; without it (every NCCL before 2.26,
    and 2.26+ by default) the log gives call order only, and time comes from Megatron's."""


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
    # a site's own host names, files and clocks
    "nccl/fqdn-hyphen-hosts": DumpLayout("nccl", "scrapes", _fqdn_monitoring,
                                         host_prefix="a100-rack3-n"),
    "nccl/flat-upper-names": DumpLayout("nccl", "scrapes", _upper_file_names,
                                        dump_layout="flat", host_prefix="node-"),
    "nccl/gzip-scrapes": DumpLayout("nccl", "scrapes", _gzip_scrapes, dump_layout="per-day"),
    "nccl/tar-gz-dump": DumpLayout("nccl", "scrapes", _tar_gz_dump,
                                   dump_layout="per-exporter"),
    "nccl/scrapes-60s": DumpLayout("nccl", "scrapes", _scrape_every_60s),
    "nccl/clock-offsets": DumpLayout("nccl", "scrapes", _clock_offsets, dump_layout="flat"),
    "nccl/per-host-logs-2.26": DumpLayout("nccl", "scrapes", _chain(_nccl_per_host, _nccl_2_26),
                                          host_prefix="gpu-b"),
    "hook/prometheus-fqdn-ports": DumpLayout("hook", "series", _instance_host_ports,
                                             dump_layout="prometheus-job",
                                             host_prefix="dgx-a-"),
    "nccl/upper-case-hosts": DumpLayout("nccl", "scrapes", host_prefix="DGX-H100-"),
    "nccl/scrapes-5s": DumpLayout("nccl", "scrapes", _scrape_every_5s, host_prefix="gpu-"),
    "nccl/date-time-names": DumpLayout("nccl", "scrapes", _date_time_names,
                                       dump_layout="per-exporter", host_prefix="a100-"),
    "nccl/address-file-names": DumpLayout("nccl", "scrapes", _address_file_names,
                                          dump_layout="per-exporter",
                                          host_prefix="a100-rack3-n"),
    "nccl/federate-addresses": DumpLayout("nccl", "series", dump_layout="federate",
                                          host_prefix="a100-rack3-n"),
    "nccl/no-timestamps": DumpLayout("nccl", "scrapes", nccl_timestamps=False),
    "nccl/big-jobs": DumpLayout("nccl", "scrapes", parallel=BIG_PARALLEL, iterations=600),
}
"""Collective log format, monitoring files, where they lie and how hosts are named, and what
is done to them after writing."""

SHAPES = ("near-threshold", "short", "close-pair", "on-off", "after-warmup", "at-end")
"""Fail-slows of the shapes an independent generator draws beyond the causes above: barely over
the definition (x1.10 over 20 iterations), 20-30 iterations long, twice on one target 1-20
iterations apart, on and off 3-6 times, starting as the warm-up ends, lasting to the last
iteration."""

BENIGN = ("benign-mild", "benign-burst", "benign-spike", "benign-drift")
"""Slowdowns that are no fail-slow by the definition, which detection must not flag: x1.05 at
most for a long stretch, x1.5 for 5-10 iterations, one slow iteration, a drift under 10 %."""

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
             "thermal+decoy", *SHAPES, *BENIGN)
"""Drawn uniformly (clean twice; with the decoy and the benign shapes a third of the jobs are
healthy)."""

SEVERITY = {"gpu-thermal": (1.2, 1.6), "gpu-degradation": (1.2, 1.6),
            "cpu-contention": (1.8, 3.0), "network-congestion": (1.3, 3.0)}
"""The culprit's slowdown factor per cause, drawn uniformly: the job slows by less (a thermal
GPU's compute is part of its step, a contended host's work a smaller part)."""

NEAR_THRESHOLD = (1.12, 1.2)
"""The job's slowdown of a ``near-threshold`` fail-slow, just over the definition's x1.10 (the
culprit's factor is found to give it, :func:`_culprit_factor`; the realised slowdown with the
job's noise is the labels' judge, so a few fall under x1.10 and are healthy)."""

BENIGN_SLOWDOWN = {"benign-mild": (1.03, 1.06), "benign-drift": (1.05, 1.09),
                   "benign-burst": (1.4, 1.6), "benign-spike": (2.0, 4.0)}
"""The job's slowdown of each benign shape (a drift's at its top)."""


def _culprit_factor(layout: Layout, component: Component, slowdown: float) -> float:
    """The culprit's factor that slows one noiseless step of the job ``slowdown`` times: a
    thermal GPU's x1.2 slows a pipeline of two stages x1.05, a contended host's x1.2 hardly
    at all. Interpolated between factors simulated as one batch of steps."""
    run = JobRun(JobSpec(layout, 2, collectives="none", monitoring=False))
    factors = np.geomspace(1.0, 30.0, 256)
    n, world = factors.size, layout.world
    gpu, host, links = np.ones((n, world)), np.ones((n, world)), {}
    if component.cause.startswith("gpu"):
        gpu[:, int(component.target_value)] = factors
    elif component.cause == "cpu-contention":
        host[:, np.arange(world) // layout.gpus_per_host == int(component.target_value)] = \
            factors[:, None]
    else:
        links[tuple(int(h) for h in component.target_value.split("-"))] = factors
    masks = {k: np.full(n, k in ("head", "tail")) for k in ("head", "tail", "log", "eval",
                                                              "checkpoint")}
    cond = Conditions(gpu, host, {"stall": 0 * gpu, "checkpoint": 0 * gpu}, masks, links)
    steps = run.simulator.run(cond, record=False).end_s / run.iteration_s
    return float(np.round(np.interp(slowdown, np.maximum.accumulate(steps), factors), 3))


def _injection(target: Component, layout: Layout, start: int, length: int, slowdown: float,
               steps: int = 1) -> Injection:
    return Injection((target,), start, "it", length, "it",
                     _culprit_factor(layout, target, slowdown), steps)


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
    crossed = layout.crossed_links()
    a, b = crossed[int(rng.integers(len(crossed)))]
    return Component(cause, "link", f"{a}-{b}")


def _episode(components: tuple[Component, ...], start: int, length: int,
             rng: np.random.Generator) -> Injection:
    low, high = max(SEVERITY[c.cause] for c in components)
    return Injection(components, start, "it", length, "it",
                     float(np.round(rng.uniform(low, high), 2)))


def _shape(scenario: str, target: Component, layout: Layout, rng: np.random.Generator
           ) -> tuple[Injection, ...]:
    """The injections of one of :data:`SHAPES` or :data:`BENIGN` on ``target``."""
    n = ITERATIONS
    if scenario == "near-threshold":
        length = int(rng.integers(20, 90))
        return (_injection(target, layout, int(rng.integers(30, n - length - 10)), length,
                           rng.uniform(*NEAR_THRESHOLD)),)
    if scenario in ("short", "after-warmup", "at-end"):
        length = int(rng.integers(20, 31)) if scenario == "short" else int(rng.integers(20, 90))
        start = {"short": int(rng.integers(30, n - length - 10)),
                 "after-warmup": WARMUP_ITERATIONS + int(rng.integers(0, 4)),
                 "at-end": n - length}[scenario]
        return (_episode((target,), start, length, rng),)
    if scenario in ("close-pair", "on-off"):
        count = 2 if scenario == "close-pair" else int(rng.integers(3, 7))
        lengths = rng.integers(20, 46 if count == 2 else 26, size=count)
        gaps = rng.integers(1, 21 if count == 2 else 16, size=count - 1)
        start = int(rng.integers(30, n - int(lengths.sum() + gaps.sum()) - 5))
        starts = start + np.concatenate(([0], np.cumsum(lengths[:-1] + gaps)))
        return tuple(_episode((target,), int(a), int(b), rng) for a, b in zip(starts, lengths,
                                                                                strict=True))
    slowdown = rng.uniform(*BENIGN_SLOWDOWN[scenario])
    length = (int(rng.integers(100, 240)) if scenario in ("benign-mild", "benign-drift")
              else int(rng.integers(5, 11)) if scenario == "benign-burst" else 1)
    steps = int(rng.integers(3, 7)) if scenario == "benign-drift" else 1
    return (_injection(target, layout, int(rng.integers(30, n - length)), length, slowdown,
                       steps),)


def _injections(scenario: str, layout: Layout, rng: np.random.Generator
                ) -> tuple[Injection, ...]:
    n = ITERATIONS
    length = int(rng.integers(40, 90))
    start = int(rng.integers(60, n - length - 30))
    one = lambda cause: _component(cause, layout, rng)  # noqa: E731
    if scenario == "clean":
        return ()
    if scenario in SHAPES or scenario in BENIGN:
        return _shape(scenario, one(str(rng.choice(list(SEVERITY)))), layout, rng)
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
        dump = dumps[number % len(dumps)]
        parallel = DUMP_LAYOUTS[dump].parallel
        tp, dp, pp, per_host = parallel[int(rng.integers(len(parallel)))]
        layout = Layout(tp=tp, dp=dp, pp=pp, gpus_per_host=per_host, model=MODEL,
                        hardware=CI_HOST)
        scenario = str(rng.choice(list(scenarios)))
        name = f"fresh-{number:03d}"
        spec = JobSpec(layout, DUMP_LAYOUTS[dump].iterations, int(rng.integers(2**31)),
                       _injections(scenario, layout, rng),
                       collectives=DUMP_LAYOUTS[dump].collectives,
                       monitoring_files=DUMP_LAYOUTS[dump].monitoring_files,
                       dump_layout=DUMP_LAYOUTS[dump].dump_layout,
                       host_prefix=DUMP_LAYOUTS[dump].host_prefix,
                       nccl_timestamps=DUMP_LAYOUTS[dump].nccl_timestamps, job=name)
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

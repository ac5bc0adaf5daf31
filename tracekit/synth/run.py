"""The plan of one synthetic job: its spec, and the run that turns the spec into per-cycle
conditions (faults resolved, noise drawn). :mod:`tracekit.synth.job` writes what it simulates;
:mod:`tracekit.synth.labels` labels it."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tracekit.core.errors import TracekitError
from tracekit.synth import faults as F
from tracekit.synth.calls import Identity
from tracekit.synth.layout import Layout
from tracekit.synth.schedule import StageSchedule, Timing
from tracekit.synth.timing import Conditions, Simulator
from tracekit.synth.writers.dump_layout import DUMP_LAYOUTS

CHUNK_CYCLES = 128
"""Cycles simulated at once. Random draws are made per chunk, so this is part of the seed's
meaning: changing it changes the output of a seed."""

DEFAULT_START_NS = 1_760_432_400 * 10**9
"""2025-10-14 09:00:00 UTC: the default wall-clock start of a synthetic job."""

COLLECTIVE_FORMATS = ("hook", "nccl", "none")
"""Collective logs: tracekit hook CSV per rank, NCCL_DEBUG=INFO log per process, or none.
One format per job: both would give every call twice in one dataset."""

MONITORING_FILES = ("series", "scrapes")
"""Monitoring exports: one file per exporter and host with a marker per scrape, or one file per
scrape named by exporter, host and time, as collectors leave them
(:mod:`tracekit.synth.writers.scrape_files`)."""


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
    """One of :data:`MONITORING_FILES`."""
    dump_layout: str = "per-host"
    """Where the monitoring files lie and how they are named: one of
    :data:`~tracekit.synth.writers.dump_layout.DUMP_LAYOUTS` (any but ``per-host`` implies one
    file per scrape, or one Prometheus export)."""
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
        if self.dump_layout not in DUMP_LAYOUTS:
            raise TracekitError(f"dump layout {self.dump_layout!r} is not one of "
                                f"{', '.join(DUMP_LAYOUTS)}")
        if self.collectives not in COLLECTIVE_FORMATS:
            raise TracekitError(f"collectives format {self.collectives!r} is not one of "
                                f"{', '.join(COLLECTIVE_FORMATS)}")


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

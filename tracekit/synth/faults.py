"""Injected fail-slows, natural noise, and the label policy that tells them apart.

An injection is written ``CAUSE[:TARGET][+CAUSE[:TARGET]...]@START+DURATION[xSEVERITY[~STEPS]]``:

* CAUSE: ``gpu-thermal`` (``thermal``), ``gpu-degradation`` (``gpu``), ``cpu-contention``
  (``cpu``), ``network-congestion`` (``congestion``); several joined by ``+`` make one compound
  episode. ``cnp-surge`` (``decoy``) is a benign CNP surge that does not slow the job.
* TARGET: ``rank=13`` for a GPU, ``host=3`` (index or name) for CPU contention, ``link=2-5``
  (two hosts) or ``nic=4`` for congestion; drawn at random from the seed when omitted (a
  decoy's: a link the job does not use, else one NIC of a host).
* START, DURATION: iterations (``900``, ``900it``) or wall time (``90s``, ``15m``, ``2h``),
  converted with the job's healthy iteration time.
* SEVERITY: the culprit's slowdown factor (``x1.4`` = 40 % slower compute, host work or
  transfers); ``~STEPS`` ramps up to it in equal steps (a gradual degradation).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from tracekit.core.errors import TracekitError
from tracekit.core.thresholds import FAIL_SLOW_MIN_ITERATIONS, FAIL_SLOW_RATIO
from tracekit.synth.layout import Layout

CAUSES = {
    "gpu-thermal": "gpu-thermal", "thermal": "gpu-thermal",
    "gpu-degradation": "gpu-degradation", "gpu": "gpu-degradation",
    "degradation": "gpu-degradation",
    "cpu-contention": "cpu-contention", "cpu": "cpu-contention",
    "network-congestion": "network-congestion", "congestion": "network-congestion",
    "network": "network-congestion",
    "cnp-surge": "cnp-surge", "decoy": "cnp-surge",
}
KIND_OF_CAUSE = {"gpu-thermal": "compute", "gpu-degradation": "compute",
                 "cpu-contention": "compute", "network-congestion": "communication",
                 "cnp-surge": "noise"}
DECOY = "cnp-surge"
"""A decoy: a CNP / ECN surge from traffic that is not the job's (another tenant's flows on a
link the job does not use, a burst on one NIC), which does not slow the job. Greyhound
(paper-notes.md): a CNP surge on a shared link need not slow this job, so attribution must
not take a surge alone for a culprit. Labeled benign (kind ``noise``, ``fail_slow = false``)."""
TIME_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}

_TIMING = re.compile(r"^(?P<start>[\d.]+)(?P<su>it|s|m|h)?\+(?P<dur>[\d.]+)(?P<du>it|s|m|h)?"
                     r"(?:x(?P<sev>[\d.]+)(?:~(?P<steps>\d+))?)?$")
_COMPONENT = re.compile(r"^(?P<cause>[a-z-]+)(?::(?P<key>rank|host|link|nic)=(?P<value>[\w.-]+))?$")


@dataclass(frozen=True)
class Component:
    cause: str
    target_key: str | None = None
    target_value: str | None = None


@dataclass(frozen=True)
class Injection:
    """One requested episode, as parsed from the command line or drawn by a preset."""

    components: tuple[Component, ...]
    start: float
    start_unit: str
    duration: float
    duration_unit: str
    severity: float = 1.5
    steps: int = 1

    @property
    def is_decoy(self) -> bool:
        return all(c.cause == DECOY for c in self.components)

    @classmethod
    def parse(cls, text: str) -> Injection:
        causes, at, timing = text.strip().lower().partition("@")
        match = _TIMING.match(timing)
        if not at or not match:
            raise TracekitError(
                f"injection {text!r} is not CAUSE[:TARGET]@START+DURATION[xSEVERITY[~STEPS]], "
                "e.g. congestion:link=0-1@900+600x1.4")
        components = []
        if DECOY in {CAUSES.get(p.partition(":")[0]) for p in causes.split("+")} and "+" in causes:
            raise TracekitError(f"injection {text!r}: a decoy CNP surge is an episode of its "
                                "own; inject it separately")
        for part in causes.split("+"):
            m = _COMPONENT.match(part)
            if not m or m["cause"] not in CAUSES:
                raise TracekitError(f"injection {text!r}: unknown cause {part!r}; known: "
                                    f"{', '.join(sorted(set(CAUSES.values())))}")
            components.append(Component(CAUSES[m["cause"]], m["key"], m["value"]))
        severity = float(match["sev"] or 1.5)
        if severity < 1.0:
            raise TracekitError(f"injection {text!r}: severity must be >= 1 (a slowdown factor)")
        return cls(tuple(components), float(match["start"]), match["su"] or "it",
                   float(match["dur"]), match["du"] or "it", severity, int(match["steps"] or 1))


@dataclass(frozen=True)
class Fault:
    """One resolved component of an episode: a concrete target and iteration range."""

    episode: int
    cause: str
    start_iteration: int
    end_iteration: int
    """Last affected iteration (inclusive)."""
    severity: float
    steps: int
    rank: int | None = None
    host: int | None = None
    link: tuple[int, int] | None = None
    nic: int | None = None
    """A decoy on one NIC of ``host`` (mlx5_<nic>); None: every NIC of the host or link."""

    @property
    def slows_job(self) -> bool:
        return self.cause != DECOY

    def factor(self, iterations: np.ndarray) -> np.ndarray:
        """Slowdown factor of the culprit at each iteration (1 outside the episode)."""
        inside = (iterations >= self.start_iteration) & (iterations <= self.end_iteration)
        span = self.end_iteration - self.start_iteration + 1
        step = np.floor((iterations - self.start_iteration) * self.steps / span) + 1
        level = 1.0 + (self.severity - 1.0) * np.clip(step, 1, self.steps) / self.steps
        return np.where(inside, level, 1.0)

    @property
    def congestion_target(self) -> object:
        return self.link if self.link is not None else self.host


@dataclass(frozen=True)
class Noise:
    """Natural disturbances that are not fail-slows (Greyhound: GC, allocator cache misses,
    uneven sequence lengths), with their rates."""

    jitter_sigma: float = 0.01
    """Per-iteration common compute jitter (log-normal sigma); with the terms below it gives
    the 1-3 % iteration-time noise of healthy jobs."""
    sequence_sigma: float = 0.012
    """Per-iteration, per-DP-replica compute variation from variable sequence lengths."""
    rank_sigma: float = 0.003
    warmup: tuple[float, ...] = (3.0, 1.8, 1.3, 1.12, 1.05)
    """Compute slowdown of the first iterations (autotuning, allocator warm-up)."""
    gc_interval_iterations: float = 300.0
    gc_pause_s: tuple[float, float] = (0.15, 0.6)
    allocator_probability: float = 0.002
    allocator_spike_s: tuple[float, float] = (0.02, 0.08)
    log_interval: int = 10
    eval_interval: int = 1000
    save_interval: int = 1000
    checkpoint_s: tuple[float, float] = (20.0, 45.0)


@dataclass(frozen=True)
class LabelPolicy:
    """What counts as a fail-slow: an injected episode of at least ``min_iterations``
    iterations whose realised job slowdown over the whole episode (its mean iteration time over
    the healthy counterfactual with the same noise) is at least ``min_slowdown``. A gradual ramp
    is judged on that mean, so one ending 13 % slow but averaging under 10 % is healthy.
    Greyhound verifies change points with the same 10 % threshold (paper-notes.md, BOCD+V)."""

    min_slowdown: float = FAIL_SLOW_RATIO - 1.0
    min_iterations: int = FAIL_SLOW_MIN_ITERATIONS


@dataclass
class NoiseEvent:
    cause: str
    iteration: int
    rank: int | None
    seconds: float


def resolve(injections: list[Injection], layout: Layout, iterations: int, iteration_s: float,
            rng: np.random.Generator, hosts: list[str], first_episode: int = 0) -> list[Fault]:
    """Turn injections into faults with concrete targets and iteration ranges."""
    faults: list[Fault] = []
    for episode, injection in enumerate(injections, start=first_episode):
        start = _iterations(injection.start, injection.start_unit, iteration_s)
        length = max(1, _iterations(injection.duration, injection.duration_unit, iteration_s))
        if start >= iterations:
            raise TracekitError(f"injection {episode} starts at iteration {start}, after the "
                                f"job's {iterations} iterations")
        end = min(iterations - 1, start + length - 1)
        for component in injection.components:
            target = _target(component, layout, rng, hosts)
            faults.append(Fault(episode, component.cause, start, end, injection.severity,
                                injection.steps, **target))
    return faults


def _iterations(value: float, unit: str, iteration_s: float) -> int:
    if unit == "it":
        return int(value)
    return int(round(value * TIME_UNITS[unit] / iteration_s))


def _host_index(value: str, hosts: list[str]) -> int:
    if value in hosts:
        return hosts.index(value)
    if value.isdigit() and int(value) < len(hosts):
        return int(value)
    raise TracekitError(f"unknown host {value!r}; hosts are 0..{len(hosts) - 1} or "
                        f"{hosts[0]}..{hosts[-1]}")


def _target(component: Component, layout: Layout, rng: np.random.Generator,
            hosts: list[str]) -> dict:
    cause, key, value = component.cause, component.target_key, component.target_value
    if cause.startswith("gpu"):
        if key not in (None, "rank"):
            raise TracekitError(f"{cause} targets a GPU: use rank=N")
        rank = int(value) if value is not None else int(rng.integers(layout.world))
        if not 0 <= rank < layout.world:
            raise TracekitError(f"rank {rank} is outside the job's {layout.world} ranks")
        return {"rank": rank, "host": layout.host_of(rank)}
    if cause == "cpu-contention":
        if key not in (None, "host"):
            raise TracekitError("cpu-contention targets a host: use host=N")
        host = _host_index(value, hosts) if value is not None else int(rng.integers(layout.hosts))
        return {"host": host}
    if key not in (None, "link", "nic"):
        raise TracekitError(f"{cause} targets a link (link=A-B) or a NIC (nic=H)")
    crossed = layout.crossed_links()
    if cause == DECOY:
        return _decoy_target(key, value, layout, crossed, rng, hosts)
    if not crossed:
        raise TracekitError("network congestion needs a job that spans at least two hosts")
    if key == "nic":
        return {"host": _host_index(value, hosts)}
    if key == "link":
        a, _, b = value.partition("-")
        pair = tuple(sorted((_host_index(a, hosts), _host_index(b, hosts))))
        return {"link": pair}
    return {"link": crossed[int(rng.integers(len(crossed)))]}


def _decoy_target(key: str | None, value: str | None, layout: Layout,
                  crossed: list[tuple[int, int]], rng: np.random.Generator,
                  hosts: list[str]) -> dict:
    """A link the job's rings do not cross (drawn when omitted), else one NIC of a host."""
    if key == "link":
        a, _, b = value.partition("-")
        return {"link": tuple(sorted((_host_index(a, hosts), _host_index(b, hosts))))}
    unused = [(a, b) for a in range(layout.hosts) for b in range(a + 1, layout.hosts)
              if (a, b) not in crossed]
    if key is None and unused:
        return {"link": unused[int(rng.integers(len(unused)))]}
    host = _host_index(value, hosts) if key == "nic" else int(rng.integers(layout.hosts))
    return {"host": host, "nic": int(rng.integers(layout.hardware.nics_per_host))}


def draw_noise(noise: Noise, layout: Layout, iterations: int,
               rng: np.random.Generator) -> list[NoiseEvent]:
    """GC pauses and allocator spikes (sparse, per rank), checkpoints and evaluations."""
    events: list[NoiseEvent] = []
    gaps = rng.exponential(noise.gc_interval_iterations, size=iterations // 10 + 2)
    for it in np.cumsum(gaps).astype(int):
        if it >= iterations:
            break
        events.append(NoiseEvent("gc-pause", int(it), int(rng.integers(layout.world)),
                                 float(rng.uniform(*noise.gc_pause_s))))
    spikes = np.flatnonzero(rng.random(iterations) < noise.allocator_probability)
    for it in spikes:
        events.append(NoiseEvent("allocator-cache-miss", int(it), int(rng.integers(layout.world)),
                                 float(rng.uniform(*noise.allocator_spike_s))))
    # a save or evaluation after printed iteration P lands in the window of 0-based iteration P
    for it in range(noise.save_interval, iterations, noise.save_interval):
        events.append(NoiseEvent("checkpoint", it, None, float(rng.uniform(*noise.checkpoint_s))))
    for it in range(noise.eval_interval, iterations, noise.eval_interval):
        events.append(NoiseEvent("evaluation", it, None, 0.0))
    return sorted(events, key=lambda e: (e.iteration, e.cause))


def duration_distribution_s(kind: str, rng: np.random.Generator, large: bool = False) -> float:
    """An episode duration drawn from a log-normal shaped like Greyhound's Figure 1: compute
    episodes around 10 min, communication episodes from under a minute to over 100 min
    (mean ~24 min), episodes of large jobs longer (mean ~72 min)."""
    mean_s = 72 * 60.0 if large else (10 * 60.0 if kind == "compute" else 24 * 60.0)
    sigma = 0.6 if kind == "compute" else 1.1
    mu = math.log(mean_s) - sigma * sigma / 2
    return float(rng.lognormal(mu, sigma))

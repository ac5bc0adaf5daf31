"""Scenario presets for one job and corpus presets shaped like Greyhound's probing campaigns.

Corpus mix (paper-notes.md, Table 1): 1-node probing 386 clean / 4 CPU contention / 2 GPU
degradation of 392; 4-node probing 64 clean / 1 CPU / 42 congestion of 107; large jobs 11
clean / 13 congestion / 3 several causes of 27.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import polars as pl

from tracekit.core.errors import TracekitError
from tracekit.core.thresholds import FAIL_SLOW_MIN_ITERATIONS
from tracekit.synth.faults import Component, Injection, duration_distribution_s
from tracekit.synth.job import JobSpec, generate_job
from tracekit.synth.layout import HARDWARE, MODELS, Layout


def _fraction(components, start, length, severity, steps=1) -> tuple:
    return (tuple(Component(c) for c in components), start, length, severity, steps)


SCENARIOS: dict[str, list[tuple]] = {
    "clean": [],
    "thermal": [_fraction(["gpu-thermal"], 0.30, 0.20, 1.3)],
    "cpu": [_fraction(["cpu-contention"], 0.30, 0.15, 2.5)],
    "congestion": [_fraction(["network-congestion"], 0.25, 0.40, 1.6)],
    "compound": [_fraction(["network-congestion", "gpu-thermal"], 0.30, 0.30, 2.0)],
    "gradual": [_fraction(["gpu-degradation"], 0.20, 0.60, 1.3, 5)],
    "blips": [_fraction(["network-congestion"], f, 0.01, 2.0) for f in (0.2, 0.45, 0.7)],
    "decoy": [_fraction(["cnp-surge"], 0.30, 0.30, 2.0)],
    "thermal-decoy": [_fraction(["gpu-thermal"], 0.30, 0.20, 1.3),
                      _fraction(["cnp-surge"], 0.25, 0.35, 2.0)],
}
"""Scenario name -> episodes as (causes, start, duration as fractions of the job, severity,
steps)."""


def scenario_injections(name: str, iterations: int) -> list[Injection]:
    if name not in SCENARIOS:
        raise TracekitError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
    return [Injection(components, int(start * iterations), "it",
                      max(1, int(length * iterations)), "it", severity, steps)
            for components, start, length, severity, steps in SCENARIOS[name]]


def job_spec(*, layout: str, iterations: int, inject: list[str], scenario: str | None,
             model: str, hardware: str, gpus_per_host: int, sequence_parallel: bool,
             distributed_optimizer: bool, collectives: str, monitoring: bool, seed: int,
             job: str, nccl_timestamps: bool = True,
             monitoring_files: str = "series", dump_layout: str = "per-host",
             host_prefix: str = "gpu") -> JobSpec:
    """A job spec from command-line style arguments."""
    if model not in MODELS:
        raise TracekitError(f"unknown model {model!r}; known: {', '.join(MODELS)}")
    if hardware not in HARDWARE:
        raise TracekitError(f"unknown hardware {hardware!r}; known: {', '.join(HARDWARE)}")
    parsed = Layout.parse(layout, gpus_per_host=gpus_per_host,
                          sequence_parallel=sequence_parallel,
                          distributed_optimizer=distributed_optimizer, model=MODELS[model],
                          hardware=HARDWARE[hardware])
    injections = [Injection.parse(text) for text in inject]
    if scenario:
        injections = scenario_injections(scenario, iterations) + injections
    return JobSpec(parsed, iterations, seed, tuple(injections), collectives=collectives,
                   nccl_timestamps=nccl_timestamps, monitoring=monitoring,
                   monitoring_files=monitoring_files, dump_layout=dump_layout, job=job,
                   host_prefix=host_prefix)


@dataclass(frozen=True)
class CorpusPreset:
    layout: Layout
    iterations: int
    mix: dict[str, int]
    """Category -> jobs in the paper's campaign (Table 1)."""
    large: bool = False
    collectives: str = "hook"
    decoys: int = 0
    """Decoy CNP surges per job (benign; 0 keeps the committed ``ci`` corpus as it is)."""


PROBE_MODEL = MODELS["gpt2-probe"]
"""The probing jobs' GPT2 shape with 4 layers, so a CI-sized job keeps the per-layer call
pattern and byte counts of the real model at a fraction of the calls."""

CI_HOST = replace(HARDWARE["a100"], host_cpus=32)
"""A100 hosts of 2 GPUs and 32 CPUs: the committed corpus keeps two hosts (so congestion has a
link to hit) at a size CI can hold."""

PRESETS: dict[str, CorpusPreset] = {
    "probing-1node": CorpusPreset(
        Layout(tp=2, dp=1, pp=2, gpus_per_host=4, model=PROBE_MODEL, hardware=HARDWARE["h800"]),
        3000, {"clean": 386, "cpu-contention": 4, "gpu-degradation": 2}),
    "probing-4node": CorpusPreset(
        Layout(tp=2, dp=16, pp=1, gpus_per_host=8, model=replace(PROBE_MODEL, fp16=False)),
        2000, {"clean": 64, "cpu-contention": 1, "network-congestion": 42}),
    "large": CorpusPreset(
        Layout(tp=8, dp=16, pp=4, gpus_per_host=8, sequence_parallel=True,
               model=replace(MODELS["gpt-175b"], layers=8, micro_batches=8),
               hardware=HARDWARE["h800"]),
        600, {"clean": 11, "network-congestion": 13, "network-congestion+gpu-thermal": 3},
        large=True, collectives="none"),
    "ci": CorpusPreset(
        Layout(tp=2, dp=2, pp=1, gpus_per_host=2,
               model=replace(PROBE_MODEL, layers=2, micro_batches=2), hardware=CI_HOST),
        300, {"clean": 2, "cpu-contention": 1, "gpu-degradation": 1, "network-congestion": 2,
              "network-congestion+gpu-thermal": 1}),
    "congestion-4host": CorpusPreset(
        Layout(tp=2, dp=4, pp=1, gpus_per_host=2,
               model=replace(PROBE_MODEL, layers=2, micro_batches=2), hardware=CI_HOST),
        300, {"network-congestion": 1}),
}
"""Greyhound's campaigns: 1-node GPT2-11B on 4 x H800 (TP 2, PP 2), 4-node GPT2-7B on
4 x 8 A100 (TP 2; the paper's DP 4 would leave 24 GPUs idle, so DP fills the 32), large jobs
of 512 H800 GPUs. ``ci`` is the committed corpus: every cause of the three campaigns (Table 1)
and clean jobs, at 4 ranks on 2 hosts and 300 iterations. ``congestion-4host``: ``ci``'s
jobs on 4 hosts, every one congested (a culprit link among 4), for the dump layouts'
benchmark (``benchmarks/bench_layouts.py``)."""

SEVERITY_RANGE = {"compute": (1.15, 1.6), "cpu": (1.8, 3.0), "communication": (1.2, 3.0),
                  "large": (1.5, 5.0)}
"""Culprit slowdowns drawn per category; the paper's JCT slowdowns (11.8 %, 15.5 %, 34.6 % on
average, 20 % of large jobs slowed > 50 %) come out of these after synchronisation. CPU
contention slows the host side, which GPU work hides until it is 1 / Timing.host_ratio (1.43x)
slower, so its range starts higher."""


def allocate(mix: dict[str, int], jobs: int) -> dict[str, int]:
    """Jobs per category for a corpus of ``jobs``: the paper's shares by largest remainder,
    keeping at least one job of every fail-slow category when there is room, so a small CI
    corpus still exercises every cause."""
    total = sum(mix.values())
    causes = [c for c in mix if c != "clean"]
    counts = {c: int(jobs * n / total) for c, n in mix.items()}
    for c in sorted(mix, key=lambda c: -(jobs * mix[c] / total - counts[c])):
        if sum(counts.values()) >= jobs:
            break
        counts[c] += 1
    for c in causes:
        if counts[c] == 0 and jobs > len(causes):
            counts[c] = 1
            counts["clean"] -= 1
    return counts


def _episode(category: str, preset: CorpusPreset, iteration_s: float,
             rng: np.random.Generator) -> Injection:
    causes = category.split("+")
    kind = "communication" if "network-congestion" in causes else "compute"
    low, high = SEVERITY_RANGE["large" if preset.large
                               else "cpu" if category == "cpu-contention" else kind]
    n = preset.iterations
    drawn = int(duration_distribution_s(kind, rng, preset.large) / iteration_s)
    length = int(np.clip(drawn, FAIL_SLOW_MIN_ITERATIONS, 0.4 * n))
    start = int(rng.integers(int(0.1 * n), max(int(0.1 * n) + 1, n - length - int(0.05 * n))))
    steps = 1
    if category == "gpu-degradation" and rng.random() < 0.5:
        steps = 4  # a gradual degradation in steps under 10 %
        high = min(high, 1.35)
    return Injection(tuple(Component(c) for c in causes), start, "it", length, "it",
                     float(np.round(rng.uniform(low, high), 2)), steps)


def _decoy(preset: CorpusPreset, iteration_s: float, rng: np.random.Generator) -> Injection:
    """A CNP surge shaped like a communication episode, anywhere in the job."""
    n = preset.iterations
    length = int(np.clip(duration_distribution_s("communication", rng, preset.large)
                         / iteration_s, 20, 0.4 * n))
    start = int(rng.integers(0, max(1, n - length)))
    low, high = SEVERITY_RANGE["communication"]
    return Injection((Component("cnp-surge"),), start, "it", length, "it",
                     float(np.round(rng.uniform(low, high), 2)))


def generate_corpus(out: Path, preset_name: str, jobs: int, seed: int,
                    iterations: int | None = None, collectives: str | None = None,
                    pack: bool = False, decoys: int | None = None,
                    monitoring_files: str = "series",
                    dump_layout: str = "per-host", host_prefix: str = "gpu") -> pl.DataFrame:
    """Write ``jobs`` job folders under ``out`` and ``corpus.csv`` (job, category, seed);
    return that summary."""
    from tracekit.synth.run import JobRun

    if preset_name not in PRESETS:
        raise TracekitError(f"unknown corpus preset {preset_name!r}; known: {', '.join(PRESETS)}")
    if jobs < 1:
        raise TracekitError("a corpus needs at least one job")
    preset = PRESETS[preset_name]
    if iterations:
        preset = replace(preset, iterations=iterations)
    if decoys is not None:
        preset = replace(preset, decoys=decoys)
    rng = np.random.default_rng([seed, 2])
    decoy_rng = np.random.default_rng([seed, 8])  # its own stream: decoys change nothing else
    counts = allocate(preset.mix, jobs)
    categories = [c for c, k in counts.items() for _ in range(k)]
    order = rng.permutation(len(categories))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    base = JobSpec(preset.layout, preset.iterations, collectives=collectives or preset.collectives,
                   monitoring_files=monitoring_files, dump_layout=dump_layout,
                   host_prefix=host_prefix)
    iteration_s = JobRun(base).iteration_s
    rows = []
    width = len(str(jobs - 1))
    for number, index in enumerate(order):
        category = categories[index]
        job_seed = int(rng.integers(2**31))
        injections = () if category == "clean" else (_episode(category, preset, iteration_s,
                                                              rng),)
        injections += tuple(_decoy(preset, iteration_s, decoy_rng) for _ in range(preset.decoys))
        name = f"{preset_name}-{number:0{width}d}"
        spec = replace(base, seed=job_seed, injections=injections, job=name)
        generate_job(out / name, spec, pack=pack)
        rows.append({"job": name, "category": category, "seed": job_seed})
    summary = pl.DataFrame(rows, schema={"job": pl.String, "category": pl.String,
                                         "seed": pl.Int64})
    summary.write_csv(out / "corpus.csv")
    return summary

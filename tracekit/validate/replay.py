"""The front door of the validators: run a check for a dataset's episode (or for explicit
devices and groups) and record the verdicts in the dataset. The CLI and notebooks call these."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl

from tracekit.core.dataset import open_dataset
from tracekit.core.errors import TracekitError
from tracekit.validate import job as job_facts
from tracekit.validate.gemm import (
    CPU_SHAPES,
    WHOLE_GPU_SHAPES,
    GemmDevice,
    GemmReport,
    default_devices,
    run_gemm_check,
)
from tracekit.validate.p2p import TIMEOUT_S, P2PGroup, P2PPlan, P2PReport, run_p2p_check
from tracekit.validate.peers import BUDGET_S, SLOW_THRESHOLD
from tracekit.validate.schedule import Topology
from tracekit.validate.verdict import (
    NO_SUSPECTS,
    gemm_validations,
    p2p_validations,
    record_validations,
)


@dataclass
class Outcome:
    """A check's report, its verdicts, and the dataset they were written to (if any)."""

    report: GemmReport | P2PReport
    validations: pl.DataFrame
    dataset: Path | None
    notes: list[str]


def validate_gemm(
    dataset: Path | None = None,
    *,
    episode: int | None = None,
    devices: list[GemmDevice] | None = None,
    dtypes: list[str] | None = None,
    model: dict[str, int | None] | None = None,
    budget_s: float = BUDGET_S,
    threshold: float = SLOW_THRESHOLD,
    host: str | None = None,
) -> Outcome:
    """GEMM check on this machine's devices. With a dataset, GPUs also run the job's own layer
    products (model dimensions from the dataset or ``model``), the episode's suspects get a
    verdict, and the verdicts are recorded."""
    devices = devices or default_devices()
    on_gpu = all(d.torch_device.startswith("cuda") for d in devices)
    notes, shapes = [], list(WHOLE_GPU_SHAPES if on_gpu else CPU_SHAPES)
    opened, suspects = _open(dataset, episode)
    if opened and on_gpu:
        shapes += job_facts.model_shape(opened, **(model or {})).products()
    elif opened:
        notes.append("CPU run: the job's layer products need a GPU; small square products only")
    report = run_gemm_check(devices, dtypes=dtypes, shapes=shapes, budget_s=budget_s,
                            threshold=threshold, host=host)
    return _record(opened, report, gemm_validations, notes, suspects)


def validate_p2p(
    dataset: Path | None = None,
    *,
    episode: int | None = None,
    groups: list[tuple[int, ...]] | None = None,
    topologies: list[Topology] | None = None,
    sizes_bytes: tuple[int, ...] | None = None,
    budget_s: float = BUDGET_S,
    threshold: float = SLOW_THRESHOLD,
    nprocs: int | None = None,
    backend: str | None = None,
    timeout_s: float = TIMEOUT_S,
    delays_s: dict[tuple[int, int], float] | None = None,
) -> Outcome | None:
    """P2P check over the given groups, or the dataset's communicators (those holding the
    episode's suspect ranks when it names any). Returns None on the ranks other than 0 of a
    ``torchrun`` launch."""
    opened, suspects = _open(dataset, episode)
    topologies = topologies or ["ring"]
    if groups:
        p2p_groups = [P2PGroup(f"group{i}", tuple(g), t) for t in topologies
                      for i, g in enumerate(groups)]
    elif opened:
        blamed = suspects.ranks if suspects and suspects.ranks else None
        p2p_groups = [g for t in topologies
                      for g in job_facts.communicator_groups(opened, t, blamed)]
    else:
        raise TracekitError("say which ranks to test: --group 0,1,2,3, --nprocs 4 (one ring) or "
                             "--from DATASET; --self-test needs neither")
    plan = P2PPlan(p2p_groups, sizes_bytes=sizes_bytes, budget_s=budget_s,
                   threshold=threshold, hosts=job_facts.rank_hosts(opened) if opened else {},
                   delays_s=delays_s or {})
    report = run_p2p_check(plan, nprocs=nprocs, backend=backend, timeout_s=timeout_s)
    if report is None:
        return None
    return _record(opened, report, p2p_validations, [], suspects)


def _open(dataset: Path | None, episode: int | None):
    """The dataset (when given) and the episode's suspects (when one is named)."""
    if dataset is None:
        if episode is not None:
            raise TracekitError("--episode needs --from DATASET")
        return None, None
    opened = open_dataset(dataset)
    return opened, job_facts.episode_suspects(opened, episode) if episode is not None else None


def _record(opened, report, to_validations, notes, suspects) -> Outcome:
    """Verdicts for the suspects (all units when there are none), written when a dataset is
    given."""
    job = opened.job if opened else "-"
    validations = to_validations(report, job, suspects or NO_SUSPECTS)
    if opened:
        record_validations(opened, validations)
    return Outcome(report, validations, opened.path if opened else None, notes)

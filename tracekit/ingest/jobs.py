"""Which job each source of a dump belongs to, so that a folder holding several jobs (three
trials of one benchmark) is refused or cut to one, never merged into one job of all their ranks.

Two kinds of evidence link sources into one job. A job id in a source's path below the dump
(``slurm-123456.out``, ``job_2_norm.csv``, ``trial3/rank0.log``). And NCCL communicator ids:
a commId is a hash of the random ``ncclUniqueId`` a communicator was created from, printed by
every member (NCCL 2.15+ Init lines, the Inspector's comm id) and by no other job, so sources
sharing one are one job; a job's communicators connect all its ranks, so its per-rank logs
join through them even when two ranks share none. Sources without evidence (monitoring, a
framework log) go with the job whose folder holds them, else with every job.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

import polars as pl

PATH_JOB_ID = re.compile(
    r"(?<![a-z0-9])(slurm-\d+|job[-_]?\d+|jobid[-_=]?[a-z0-9]+|trial[-_]?\d+)(?![a-z0-9])",
    re.IGNORECASE)
"""A job id in a folder or file name: SLURM's default output name (``slurm-%j.out``), a job or
trial number (``job_2``, ``job-17``, ``trial3``) or ``jobid=...``. Numbers alone (``rank3``,
``node07``) name parts of one job, not jobs."""


@dataclass
class CommEvidence:
    """The commIds seen in one source's ``comms`` rows, gathered chunk by chunk."""

    comm_ids: set[str] = field(default_factory=set)

    def add(self, comms: pl.DataFrame) -> None:
        if "comm_id" in comms.columns:
            self.comm_ids.update(comms["comm_id"].drop_nulls().unique().to_list())

    def keys(self) -> list[str]:
        return sorted(f"commId {comm_id}" for comm_id in self.comm_ids)


@dataclass
class Job:
    """One job found in a dump: its name (what ``--job`` picks), the sources that belong to it
    and the evidence-free ones its folder holds."""

    name: str
    sources: list[str]


def find_jobs(paths: list[str], comm_keys: dict[str, list[str]]) -> tuple[list[Job], list[str]]:
    """The jobs among the sources ``paths`` (in input order) with the commId keys of each
    (:class:`CommEvidence`), and the sources that belong to every job. One job (or none)
    when nothing tells the sources apart."""
    relative = _relative_parts(paths)
    parent = list(range(len(paths)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first_with: dict[str, int] = {}
    evidence = [False] * len(paths)
    for i, path in enumerate(paths):
        for key in [*_path_ids(relative[i]), *comm_keys.get(path, ())]:
            evidence[i] = True
            j = first_with.setdefault(key, i)
            parent[root(i)] = root(j)
    groups: dict[int, list[int]] = {}
    for i in range(len(paths)):
        if evidence[i]:
            groups.setdefault(root(i), []).append(i)
    members = list(groups.values())
    folders = [_common_folder([relative[i] for i in group]) for group in members]
    shared = []
    for i in (i for i in range(len(paths)) if not evidence[i]):
        holders = [g for g, folder in enumerate(folders)
                   if folder and relative[i][:len(folder)] == folder]
        if len(holders) == 1:
            members[holders[0]].append(i)
        else:
            shared.append(paths[i])
    names = _unique([_name(group, relative, folder) for group, folder in zip(members, folders,
                                                                                 strict=True)])
    jobs = [Job(name, [paths[i] for i in sorted(group)])
            for name, group in zip(names, members, strict=True)]
    return jobs, shared


def describe(jobs: list[Job]) -> str:
    """The jobs in a few words each, for the one line that refuses to merge them."""
    return ", ".join(f"{job.name} ({len(job.sources)} source{'s' * (len(job.sources) != 1)})"
                     for job in jobs)


def _relative_parts(paths: list[str]) -> list[tuple[str, ...]]:
    """Each path's folders and file name below the folder all of them share (an archive is a
    folder: ``dump.tar.gz!trial1/r0.log``)."""
    parts = [tuple(p for p in re.split(r"[/\\!]", path) if p) for path in paths]
    common = len(os.path.commonprefix([p[:-1] for p in parts])) if parts else 0
    return [p[common:] for p in parts]


def _path_ids(parts: tuple[str, ...]) -> list[str]:
    """Job ids in the folders and file name below the dump, outermost first."""
    return [f"path {found.group(1).lower()}" for part in parts
            if (found := PATH_JOB_ID.search(part))][:1]


def _common_folder(parts: list[tuple[str, ...]]) -> tuple[str, ...]:
    return tuple(os.path.commonprefix([p[:-1] for p in parts]))


def _name(group: list[int], relative: list[tuple[str, ...]], folder: tuple[str, ...]) -> str:
    """A job's name: the job id in its paths, else its own folder, else its first file."""
    for i in group:
        for part in relative[i]:
            if found := PATH_JOB_ID.search(part):
                return found.group(1)
    if folder:
        return "/".join(folder)
    return "/".join(relative[group[0]])


def _unique(names: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    unique = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        unique.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return unique

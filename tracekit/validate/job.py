"""What a dataset says about the job a check replays: an episode's suspects, the communicators
and where each rank ran, and the model dimensions that shape its matrix products."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import polars as pl

from tracekit.core.dataset import Dataset
from tracekit.core.errors import InputError
from tracekit.core.identity import link_hosts
from tracekit.validate.gemm import ModelShape
from tracekit.validate.p2p import P2PGroup
from tracekit.validate.schedule import Topology


@dataclass(frozen=True)
class Suspects:
    """The units an episode blames: ranks, GPUs as (host, index) or (host, bus id), and
    host-to-host links. Ranks on a blamed GPU or host are blamed too, and the reverse."""

    episode: int | None = None
    target: str = ""
    ranks: frozenset[int] = frozenset()
    gpus: frozenset[tuple[str, int]] = frozenset()
    bus_ids: frozenset[tuple[str, str]] = frozenset()
    host_links: frozenset[frozenset[str]] = field(default_factory=frozenset)


def rank_placement(dataset: Dataset) -> pl.DataFrame:
    """One row per global rank: host, GPU index on the host (NVML index, else the CUDA
    ordinal) and PCI bus id, from the ``comms`` table."""
    return (
        dataset.table("comms")
        .filter(pl.col("rank").is_not_null())
        .group_by("rank")
        .agg(pl.col("host").drop_nulls().first(),
             pl.coalesce("nvml_dev", "cuda_dev").drop_nulls().first().alias("gpu"),
             pl.col("bus_id").drop_nulls().first())
        .sort("rank")
        .collect()
    )


def episode_suspects(dataset: Dataset, episode: int) -> Suspects:
    """Parse the episode's target (``rank:13``, ``gpu:b07/5``, ``host:b07``, ``link:b03<->b07``,
    several joined by ``,`` or ``+``); without a target, its ranks are the suspects."""
    rows = dataset.table("episodes").filter(pl.col("episode") == episode).collect()
    if rows.is_empty():
        raise InputError(f"no episode {episode} in the dataset's episodes table; run "
                         "`tracekit detect` first or pick another --episode", str(dataset.path))
    placement = rank_placement(dataset)
    known_hosts = set(placement["host"].drop_nulls())
    ranks, gpus, hosts, links = set(), set(), set(), set()
    targets = [t for t in rows["target"].drop_nulls() if t]
    for part in (p.strip() for t in targets for p in t.replace("+", ",").split(",")):
        kind, _, value = part.partition(":")
        if kind == "rank" and value.isdigit():
            ranks.add(int(value))
        elif kind == "gpu" and "/" in value:
            host, _, index = value.rpartition("/")
            if index.isdigit():
                gpus.add((host, int(index)))
        elif kind == "host":
            hosts.add(value)
        elif kind == "link":
            links.add(_split_link(value, known_hosts))
    if not targets:
        ranks |= {int(r) for ranks_text in rows["ranks"].drop_nulls()
                  for r in ranks_text.split(",") if r.strip().isdigit()}
    blamed = [row for row in placement.iter_rows(named=True)
              if row["rank"] in ranks or row["host"] in hosts
              or (row["host"], row["gpu"]) in gpus]
    return Suspects(
        episode=episode,
        target=", ".join(targets) or f"ranks {', '.join(map(str, sorted(ranks)))}",
        ranks=frozenset(ranks | {row["rank"] for row in blamed}),
        gpus=frozenset(gpus | {(row["host"], row["gpu"]) for row in blamed
                               if row["host"] is not None and row["gpu"] is not None}),
        bus_ids=frozenset((row["host"], row["bus_id"]) for row in blamed
                          if row["host"] is not None and row["bus_id"] is not None),
        host_links=frozenset(links),
    )


def _split_link(text: str, known_hosts: set[str]) -> frozenset[str]:
    """``b03<->b07`` into its two hosts (:func:`~tracekit.core.identity.link_hosts`; the older
    ``b03-b07`` too, by the job's hosts when names hold ``-``)."""
    return frozenset(link_hosts(text, known_hosts) or (text,))


def communicator_groups(dataset: Dataset, topology: Topology = "ring",
                        ranks: frozenset[int] | None = None) -> list[P2PGroup]:
    """Each complete communicator of the ``comms`` table (every member known, identified by
    its commId) as a group of global ranks in communicator order; only those holding one of
    ``ranks`` when given. Communicators with the same members are measured once."""
    members = (
        dataset.table("comms")
        .filter(pl.col("comm_id").is_not_null() & pl.col("rank").is_not_null())
        .unique(["comm_id", "comm_rank"])
        .sort("comm_id", "comm_rank")
        .group_by("comm_id", maintain_order=True)
        .agg(pl.col("rank"), pl.col("nranks").first())
        .filter(pl.col("rank").list.len() == pl.col("nranks"))
        .unique("rank", maintain_order=True)
        .collect()
    )
    groups = [P2PGroup(comm_id, tuple(members_), topology)
              for comm_id, members_ in members.select("comm_id", "rank").rows()
              if ranks is None or ranks & set(members_)]
    if not groups:
        which = " holding the suspect ranks" if ranks else ""
        raise InputError(f"the comms table has no complete communicator{which} (every member "
                         "with its rank and commId); pass the ranks with --group",
                         str(dataset.path))
    return groups


def rank_hosts(dataset: Dataset) -> dict[int, str]:
    """Global rank to host, for comparing links within their reach."""
    return {r: h for r, h in rank_placement(dataset).select("rank", "host").rows()
            if h is not None}


MODEL_KEYS = ("hidden_size", "seq_length", "micro_batch_size")


def model_shape(dataset: Dataset, **overrides: int | None) -> ModelShape:
    """The job's layer dimensions from its ``parallel_layout`` (Megatron arguments), with
    ``overrides`` (hidden_size, seq_length, micro_batch_size, tensor_parallel) taking
    precedence; a clear error naming what is missing."""
    found: dict[str, int] = {}
    for tp_size, extra in (dataset.table("parallel_layout").select("tp_size", "extra_json")
                           .collect().rows()):
        fields = json.loads(extra) if extra else {}
        for key in (*MODEL_KEYS, "ffn_hidden_size"):
            if isinstance(fields.get(key), int):
                found.setdefault(key, fields[key])
        if tp_size:
            found.setdefault("tensor_parallel", tp_size)
    found.update({k: v for k, v in overrides.items() if v is not None})
    missing = [k for k in MODEL_KEYS if k not in found]
    if missing:
        flags = ", ".join(f"--{k.replace('_', '-')}" for k in missing)
        raise InputError(f"the dataset does not record the model's {', '.join(missing)}; "
                         f"pass {flags}", str(dataset.path))
    return ModelShape(found["hidden_size"], found["seq_length"], found["micro_batch_size"],
                      found.get("tensor_parallel", 1), found.get("ffn_hidden_size"))

"""One name per host and per GPU, whatever the source calls them.

dcgm-exporter says ``Hostname="gpu-a17"`` (or ``hostname``), Prometheus adds
``instance="10.20.3.17:9400"``, AcmeTrace only has IP columns, NCCL prints a PCI bus id
(``0000:18:00.0``) where DCGM prints ``00000000:18:00.0``. The rules here make them agree so DCGM
rows join NCCL ranks; a mapping file (``kind,alias,canonical``, kinds ``host`` and ``gpu``) lets
users add what cannot be derived, e.g. which IP is which host.
"""

from __future__ import annotations

import csv
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from tracekit.core.errors import InputError

_IPV4 = r"^\d{1,3}(?:\.\d{1,3}){3}$"


def short_host(name: pl.Expr) -> pl.Expr:
    """Host names as the canonical tables hold them: lower case, no ``:port``, no domain (an IP
    address keeps its dots). ``10.20.3.17:9400`` -> ``10.20.3.17``, ``GPU-A17.dc1.corp`` ->
    ``gpu-a17``; empty strings become null."""
    bare = name.str.strip_chars().str.to_lowercase().str.replace(r"^\[?([^\]]*?)\]?:\d+$", "${1}")
    short = pl.when(bare.str.contains(_IPV4)).then(bare).otherwise(bare.str.replace(r"\..*$", ""))
    return pl.when(short != "").then(short)


def canonical_host(name: str) -> str:
    """One host name as :func:`short_host` spells it, for names that are not in a column (a
    label's target): ``A100-Rack3-N07.cluster.example.com`` -> ``a100-rack3-n07``."""
    return pl.select(short_host(pl.lit(name, pl.String))).item() or name


def canonical_host_column(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with its ``host`` column as :func:`short_host` spells it, worked out on its
    few distinct names (a table of calls has millions of rows and a handful of hosts): NCCL
    prints ``gethostname()`` as the host has it (``DGX-H100-01``), dcgm-exporter's rows are
    lower case, and a link's NICs must join the ranks on it."""
    if "host" not in frame.columns or frame.height == 0:
        return frame
    names = frame.get_column("host").unique().drop_nulls().cast(pl.String)
    spelled = pl.select(short_host(pl.lit(names))).to_series()
    renamed = {a: b for a, b in zip(names.to_list(), spelled.to_list(), strict=True) if a != b}
    if not renamed:
        return frame
    dtype = frame.schema["host"]
    return frame.with_columns(pl.col("host").cast(pl.String).replace(renamed).cast(dtype))


def normalise_bus_id(bus_id: pl.Expr) -> pl.Expr:
    """PCI bus ids in NCCL's form: lower case, 4-digit domain (``00000000:18:00.0`` ->
    ``0000:18:00.0``)."""
    lowered = bus_id.str.strip_chars().str.to_lowercase()
    return lowered.str.replace(r"^[0-9a-f]*([0-9a-f]{4}):([0-9a-f]{2}:[0-9a-f]{2}\.[0-7])$",
                               "${1}:${2}")


@dataclass
class IdentityMap:
    """Aliases to canonical names, per kind: ``host`` (IP or instance -> host name) and ``gpu``
    (UUID or bus id -> ``host/index``)."""

    hosts: dict[str, str] = field(default_factory=dict)
    gpus: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | Path | None) -> IdentityMap:
        """Read a mapping CSV with a ``kind,alias,canonical`` header; None gives an empty map."""
        if path is None:
            return cls()
        try:
            with open(path, newline="", encoding="utf-8") as stream:
                rows = list(csv.DictReader(stream))
        except OSError as error:
            raise InputError(f"cannot read identity map: {error.strerror}", str(path)) from None
        mapping = cls()
        for line_no, row in enumerate(rows, start=2):
            kind, alias, canonical = (row.get(k, "") or "" for k in ("kind", "alias", "canonical"))
            target = {"host": mapping.hosts, "gpu": mapping.gpus}.get(kind.strip())
            if target is None or not alias.strip() or not canonical.strip():
                raise InputError("expected columns kind,alias,canonical with kind host or gpu",
                                 str(path), line_no)
            target[alias.strip().lower()] = canonical.strip()
        return mapping

    def host(self, name: pl.Expr) -> pl.Expr:
        """``short_host`` of ``name``, then mapped through the host aliases."""
        short = short_host(name)
        if not self.hosts:
            return short
        keys = {short_alias: value for alias, value in self.hosts.items()
                for short_alias in (alias, pl.select(short_host(pl.lit(alias))).item())
                if short_alias}
        return short.replace(keys)


def learn_hosts(frame: pl.DataFrame, name_column: str, instance_column: str) -> dict[str, str]:
    """Aliases seen in one source: rows that carry both a host name and a scrape ``instance``
    tell which IP is which host, so rows of the same dump that only carry ``instance`` (e.g.
    node_exporter beside dcgm-exporter) get the same host."""
    if name_column not in frame.columns or instance_column not in frame.columns:
        return {}
    pairs = frame.select(
        short_host(pl.col(instance_column)).alias("alias"),
        short_host(pl.col(name_column)).alias("canonical"),
    ).drop_nulls().unique()
    return dict(zip(pairs["alias"].to_list(), pairs["canonical"].to_list(), strict=True))


def gpu_directory(gpu_metrics: pl.LazyFrame | pl.DataFrame) -> pl.DataFrame:
    """Every (host, gpu index, UUID, bus id) that gpu_metrics has seen together, one row per
    GPU: the table to resolve a UUID or bus id to a host's GPU index. Streamed (a batch of
    rows at a time, in order, so each GPU's first UUID and bus id are still the table's): a
    job's whole monitoring is never held to list its GPUs."""
    frame = gpu_metrics.lazy() if isinstance(gpu_metrics, pl.DataFrame) else gpu_metrics
    return (
        frame.filter(pl.col("gpu").is_not_null() & pl.col("host").is_not_null())
        .group_by("host", "gpu")
        .agg(pl.col("gpu_uuid").drop_nulls().first(), pl.col("bus_id").drop_nulls().first())
        .sort("host", "gpu")
        .collect(engine="streaming")
    )


def resolve_gpus(frame: pl.DataFrame, directory: pl.DataFrame, bus_id: str = "bus_id",
                 host: str = "host") -> pl.DataFrame:
    """Add ``gpu`` (the host's GPU index) to rows that only name a GPU by bus id (NCCL
    ``comms``), using a :func:`gpu_directory`."""
    lookup = directory.select(
        pl.col("host").alias(host),
        normalise_bus_id(pl.col("bus_id")).alias("_bus"),
        pl.col("gpu").alias("gpu_index"),
    ).drop_nulls("_bus").unique([host, "_bus"])
    return (
        frame.with_columns(normalise_bus_id(pl.col(bus_id)).alias("_bus"))
        .join(lookup, on=[host, "_bus"], how="left")
        .drop("_bus")
    )


def rank_gpus(comms: pl.DataFrame, gpu_metrics: pl.LazyFrame | pl.DataFrame) -> pl.DataFrame:
    """The physical GPU of every rank that NCCL Init lines name (rank, host, gpu, bus_id,
    gpu_uuid, gpu_from): by its PCI bus id in DCGM's samples, else NVML's index (``nvmlDev``).

    NCCL's ``cudaDev`` is the process-local CUDA index: under ``CUDA_VISIBLE_DEVICES`` (the
    usual launch, one GPU per process) every rank prints 0, so it never names the GPU when
    either of the others is there.
    """
    if comms.is_empty() or "nvml_dev" not in comms.columns:
        return pl.DataFrame(schema={"rank": pl.Int32, "host": pl.String, "gpu": pl.Int32,
                                    "bus_id": pl.String, "gpu_uuid": pl.String,
                                    "gpu_from": pl.String})
    per_rank = (comms.filter(pl.col("rank").is_not_null())
                .group_by("rank").agg(pl.col("host").drop_nulls().first(),
                                      pl.col("nvml_dev").drop_nulls().first(),
                                      pl.col("bus_id").drop_nulls().first()))
    directory = gpu_directory(gpu_metrics)
    resolved = resolve_gpus(per_rank, directory).join(
        directory.select("host", pl.col("gpu").alias("gpu_index"), "gpu_uuid"),
        on=["host", "gpu_index"], how="left")
    return resolved.select(
        pl.col("rank").cast(pl.Int32), "host",
        pl.coalesce("gpu_index", "nvml_dev").cast(pl.Int32).alias("gpu"),
        "bus_id", "gpu_uuid",
        pl.when(pl.col("gpu_index").is_not_null()).then(pl.lit("bus id in DCGM"))
        .when(pl.col("nvml_dev").is_not_null()).then(pl.lit("nvmlDev"))
        .alias("gpu_from"),
    ).sort("rank")


LINK_SEPARATOR = "<->"
"""Between the two hosts of a link target (``link:gpu-b20<->gpu-b21``). Host names hold only
letters, digits, ``-`` and ``.``, so this splits back one way; the ``-`` targets once used did
not (``link:rack1-n2-rack2-n1`` is two links)."""


def link_name(a: str, b: str) -> str:
    """The link between hosts ``a`` and ``b``, endpoints sorted so that it has one spelling:
    ``A<->B`` (the labels' ``target_link``)."""
    first, second = sorted((a, b))
    return f"{first}{LINK_SEPARATOR}{second}"


def link_target(a: str, b: str) -> str:
    """The culprit target of the link between ``a`` and ``b``: ``link:A<->B``."""
    return f"link:{link_name(a, b)}"


def link_hosts(text: str, known_hosts: Collection[str] = ()) -> tuple[str, str] | None:
    """The two hosts of a link target or name (``link:`` optional), sorted: ``A<->B``, or the
    older ``A-B`` where it splits one way only (one ``-``, or one split whose both sides are
    ``known_hosts``); None when it cannot be told."""
    name = text.removeprefix("link:").strip()
    if LINK_SEPARATOR in name:
        a, _, b = name.partition(LINK_SEPARATOR)
        return (min(a, b), max(a, b)) if a and b and LINK_SEPARATOR not in b else None
    splits = [(name[:i], name[i + 1:]) for i, c in enumerate(name) if c == "-"]
    splits = [(a, b) for a, b in splits if a and b]
    if len(splits) > 1:
        splits = [(a, b) for a, b in splits if a in known_hosts and b in known_hosts]
    if len(splits) != 1:
        return None
    a, b = splits[0]
    return min(a, b), max(a, b)


def canonical_link_targets(target: pl.Expr) -> pl.Expr:
    """Target parts (``rank:3``, ``link:b-a``, ...) as one spelling each: a link's hosts
    sorted and joined by :data:`LINK_SEPARATOR`, the older ``link:A-B`` read where it has one
    ``-``; a link target that cannot be split stays as written (it then equals only itself)."""
    name = target.str.strip_chars().str.strip_prefix("link:")
    old = name.str.count_matches("-", literal=True) == 1
    hosts = (pl.when(name.str.contains(LINK_SEPARATOR, literal=True))
             .then(name.str.split(LINK_SEPARATOR))
             .when(old).then(name.str.split("-")))
    sorted_name = hosts.list.sort().list.join(LINK_SEPARATOR)
    return (pl.when(target.str.strip_chars().str.starts_with("link:") & sorted_name.is_not_null())
            .then(pl.format("link:{}", sorted_name))
            .otherwise(target.str.strip_chars()))

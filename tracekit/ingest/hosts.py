"""Hosts by agreement: a host read from a file's name or folder stands only when the job's
other sources know it.

A reader sees one file, so it takes the host a monitoring file's name gives
(:func:`~tracekit.ingest.snapshots.file_host`); a site's naming can fool it (a per-host folder of
``hw_counters-<unix>.txt`` once gave every RNIC row the host ``hw``, and the congested link
vanished). Once the whole job is read, :func:`agree_hosts` checks each such host against the
hosts the job's contents name (NCCL Init lines and hook CSVs, DCGM ``Hostname`` and scrape
``instance`` labels, ``# host=`` markers): the first reading of the name, then of its folders,
that the job knows wins; a file none of whose readings the job knows gets no host, with a
note. A job whose contents name no host keeps the names' hosts (they are the only
candidates). Before that, rows whose host is a scrape address (``instance="10.20.0.7:9100"``
of a node_exporter pull) get the host name another source of the job pairs with that address
(dcgm-exporter's ``Hostname`` beside the same ``instance``: the readers' ``host_aliases``).
:func:`hosts_without_ranks` is the check ``tracekit info`` shows.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from functools import cache
from typing import Any

import polars as pl

from tracekit.core.dataset import Dataset, source_record_key
from tracekit.core.identity import short_host
from tracekit.ingest import registry
from tracekit.ingest.snapshots import folder_host_readings, name_host_readings, path_host

MONITORING_TABLES = ("gpu_metrics", "nic_counters", "host_metrics")
"""Tables whose host a reader may take from a file's name."""

RANK_TABLES = ("comms", "collectives")
"""Tables whose hosts are where ranks run (NCCL Init lines, the hook's host column)."""

LABELED_TABLE = "gpu_metrics"
"""The monitoring table whose hosts come from the samples' own labels whatever the file is
called (dcgm-exporter labels every sample with its ``Hostname``; an export without the label
vouches for its own name, the one leak in this check)."""

ALIASES = "host_aliases"
"""Key of a source record: the addresses its samples pair with host names."""

_IPV4 = re.compile(r"^\d{1,3}(?:\.\d{1,3}){3}$")

READ_HOST = "host_read"
AGREED_HOST = "host_agreed"
"""Keys of a source record: the host its reader took from the name, and the one its rows hold
after agreement (absent until one differed), so a later ingest decides again from the start."""


def agree_hosts(dataset: Dataset, host_option: str | None = None) -> dict[str, list[str]]:
    """Give every monitoring source whose host came from its name the host the job agrees on,
    rewriting its parts where that differs (the manifest saved then, under the caller's writer
    lock); return the notes by source path. ``--option host=`` names the host itself: nothing
    is changed."""
    if host_option:
        return {}
    files_of = _files_by_owner(dataset)
    aliases = _address_names(dataset, files_of)
    changed = _name_addresses(dataset, files_of, aliases)
    files_of = _files_by_owner(dataset)
    found = []
    for record in dataset.manifest["sources"]:
        if record.get("format") not in _name_host_formats() or not any(
                t in MONITORING_TABLES for t, _ in files_of.get(source_record_key(record), ())):
            continue
        read = record.get(READ_HOST) or path_host(record["path"])[0]
        if read:
            found.append((record, read, _readings(record["path"])))
    short = {name: aliases.get(host, host) for name, host in
             _short_hosts(h for _, read, readings in found for h in (read, *readings)).items()}
    named = [(record, short[read], record.get(AGREED_HOST, short[read]),
              [short[h] for h in readings]) for record, read, readings in found]
    known = _known_hosts(dataset, files_of,
                         {source_record_key(r): held for r, _, held, _ in named}) if named else ()
    notes: dict[str, list[str]] = {}
    for record, read, held, readings in named if known else ():
        agreed, note = _agreed_host(readings, read, known)
        if agreed != held:
            _rewrite_hosts(dataset, source_record_key(record), files_of, {held: agreed})
            record[READ_HOST], record[AGREED_HOST] = read, agreed
            changed = True
        if note:
            notes.setdefault(record["path"], []).append(note)
            if note not in record.get("notes", ()):  # a new list: a summary may hold the old
                record["notes"] = [*record.get("notes", ()), note]
    if changed:
        dataset.save_manifest()
    return notes


def _address_names(dataset: Dataset, files_of: dict[str, list[tuple[str, str]]]
                   ) -> dict[str, str]:
    """The addresses the job's sources pair with one host name, and that no rank runs on (an
    address paired with two names stays as it is): a scrape's ``instance`` beside DCGM's
    ``Hostname`` (the readers' :data:`ALIASES`), and a DCGM file named by its address
    (``dcgm_exporter/10.20.0.7_<unix>.prom``) whose samples name one host."""
    names: dict[str, set[str]] = {}
    for record in dataset.manifest["sources"]:
        for address, host in record.get(ALIASES, {}).items():
            names.setdefault(address, set()).add(host)
        parts = [f for t, f in files_of.get(source_record_key(record), ()) if t == LABELED_TABLE]
        if parts and (read := path_host(record["path"])[0]) and _IPV4.match(read):
            labeled = {h for f in parts for h in dataset.part_stats(LABELED_TABLE, f)
                       .get("hosts") or () if h and h != read}
            if len(labeled) == 1:
                names.setdefault(read, set()).add(labeled.pop())
    rank_hosts = _distinct_hosts(dataset, RANK_TABLES) if names else set()
    return {address: hosts.pop() for address, hosts in names.items()
            if len(hosts) == 1 and address not in rank_hosts}


def _name_addresses(dataset: Dataset, files_of: dict[str, list[tuple[str, str]]],
                    aliases: dict[str, str]) -> bool:
    """Rewrite the monitoring rows whose host is one of ``aliases`` to its host name; whether
    any part changed."""
    changed = False
    for owner, files in files_of.items() if aliases else ():
        mapping = {host: aliases[host] for table, file in files if table in MONITORING_TABLES
                   for host in dataset.part_stats(table, file).get("hosts") or ()
                   if host in aliases}
        if mapping:
            _rewrite_hosts(dataset, owner, files_of, mapping)
            changed = True
    return changed


def hosts_without_ranks(dataset: Dataset) -> list[str]:
    """One warning per monitoring table that has hosts on which no rank of the job runs (a
    host misread from a file name, or monitoring of another job's nodes); none when no table
    says where the ranks run."""
    rank_hosts = _distinct_hosts(dataset, RANK_TABLES)
    if not rank_hosts:
        return []
    warnings = []
    for name in MONITORING_TABLES:
        stray = sorted(_distinct_hosts(dataset, (name,)) - rank_hosts)
        if stray:
            shown = ", ".join(stray[:8]) + (f" and {len(stray) - 8} more" if len(stray) > 8
                                            else "")
            warnings.append(f"{name} has hosts on which no rank runs: {shown} (ranks run on "
                            f"{', '.join(sorted(rank_hosts)[:8])}); check the file names or "
                            "pass --option host=NAME")
    return warnings


@cache
def _name_host_formats() -> frozenset[str]:
    """Formats whose rows take their host from the file's name (``rows_depend_on_name``)."""
    return frozenset(r.format for r in registry.readers() if r.rows_depend_on_name)


def _readings(path: str) -> list[str]:
    """The hosts the name of the source at ``path`` may give, then its folders."""
    file_name = path.rsplit("!", 1)[-1].replace("\\", "/").rsplit("/", 1)[-1]
    return [*name_host_readings(file_name), *folder_host_readings(path)]


def _short_hosts(names: Iterable[str]) -> dict[str, str | None]:
    """:func:`~tracekit.core.identity.short_host` of each name, in one expression (one polars
    call per name cost 2 ms, 0.7 CPU-s for a job of 148 scrape files)."""
    distinct = sorted(set(names))
    shorts = pl.select(short_host(pl.lit(pl.Series(distinct, dtype=pl.String)))).to_series()
    return dict(zip(distinct, shorts.to_list(), strict=True))


def _agreed_host(readings: list[str | None], read: str,
                 known: set[str]) -> tuple[str | None, str | None]:
    """The first of a source's readings (its name's, then its folders') that the job knows,
    else none; and a note when that is not the host the reader read."""
    agreed = next((host for host in readings if host in known), None)
    if agreed == read:
        return agreed, None
    job_hosts = ", ".join(sorted(known)[:8]) + (" ..." if len(known) > 8 else "")
    if agreed is None:
        return None, (f"host {read!r} read from the file's name is none of the job's hosts "
                      f"({job_hosts}): its rows have no host; pass --option host=NAME")
    return agreed, (f"host {read!r} read from the file's name is none of the job's hosts; "
                    f"{agreed!r}, from its path, is")


def _known_hosts(dataset: Dataset, files_of: dict[str, list[tuple[str, str]]],
                 held_by: dict[str, str | None]) -> set[str]:
    """Hosts the job's contents name: those of the rank tables, of DCGM's samples (the
    exporter labels each with its ``Hostname``) and of every other monitoring part but for the
    host a name-derived source holds (its own name cannot vouch for itself)."""
    known = _distinct_hosts(dataset, (*RANK_TABLES, LABELED_TABLE))
    for owner, files in files_of.items():
        for table, file in files:
            if table in MONITORING_TABLES:
                hosts = set(dataset.part_stats(table, file).get("hosts") or ())
                known |= hosts - {held_by[owner]} if owner in held_by else hosts
    return {h for h in known if h}


def _distinct_hosts(dataset: Dataset, tables: tuple[str, ...]) -> set[str]:
    """Distinct hosts of ``tables``, from their parts' footers (no rows read)."""
    listed = dataset.manifest.get("parts", {})
    return {host for name in tables for file in listed.get(name, ())
            for host in dataset.part_stats(name, file).get("hosts") or () if host}


def _files_by_owner(dataset: Dataset) -> dict[str, list[tuple[str, str]]]:
    owners: dict[str, list[tuple[str, str]]] = {}
    for name, files in dataset.manifest.get("parts", {}).items():
        for file, owner in files.items():
            owners.setdefault(owner, []).append((name, file))
    return owners


def _rewrite_hosts(dataset: Dataset, owner: str, files_of: dict[str, list[tuple[str, str]]],
                   hosts: dict[str | None, str | None]) -> None:
    """Rewrite ``owner``'s monitoring parts with each host of ``hosts`` (None: rows without a
    host) in place of its key (new files, listed in place of the old ones at the next save)."""
    host = pl.col("host")
    renamed = host.replace({held: new for held, new in hosts.items() if held is not None})
    if None in hosts:
        renamed = pl.when(host.is_null()).then(pl.lit(hosts[None], pl.String)).otherwise(renamed)
    listing: dict[str, dict[str, dict[str, Any]]] = {}
    for table, file in files_of[owner]:
        if table in MONITORING_TABLES:
            frame = pl.read_parquet(dataset.path / table / file)
            frame = frame.with_columns(renamed.cast(pl.String).alias("host"))
            stem = f"{file.split('.', 1)[0]}.{uuid.uuid4().hex[:12]}"
            file, stats = dataset.write_file(table, frame, stem)
        else:
            stats = dataset.part_stats(table, file)
        listing.setdefault(table, {})[file] = stats
    dataset.list_files(owner, listing)

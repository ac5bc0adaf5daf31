"""Link localisation: intersect the slow communication groups down to one link or one NIC.

Each group that crosses hosts runs a ring over its members' hosts (NCCL's ring follows the
communicator's rank order), so it uses a known set of host-to-host hops. The culprit link is
one every slow group crosses and no healthy group does; when no single link explains them but
one host's NIC is on every slow group and on no healthy one, the NIC is the culprit.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from tracekit.core.identity import link_target


def ring_links(hosts_in_order: list[str]) -> set[tuple[str, str]]:
    """Inter-host hops of a ring over members whose hosts are listed in rank order (consecutive
    distinct hosts, closed into a cycle), as sorted host pairs."""
    distinct = list(dict.fromkeys(hosts_in_order))
    if len(distinct) < 2:
        return set()
    return {tuple(sorted((distinct[i], distinct[(i + 1) % len(distinct)])))
            for i in range(len(distinct))}


def member_links(members: list[int], rank_hosts: dict[int, str]) -> set[tuple[str, str]]:
    """:func:`ring_links` of a communicator's ``members`` (ranks in ring order), their hosts
    from ``rank_hosts`` (a rank without one is left out)."""
    return ring_links([rank_hosts[r] for r in members if r in rank_hosts])


@dataclass(frozen=True)
class LinkVerdict:
    """Where the slow groups meet: ``target`` (``link:a<->b`` or ``nic:h``), the hosts whose NICs
    to check, the candidates that explain them equally well, the counts behind it, and every
    link a slow group crosses (sorted host pairs): where a congestion signal may localise
    what timing does not."""

    target: str | None
    hosts: tuple[str, ...]
    candidates: tuple[str, ...]
    slow_groups: int
    healthy_groups: int
    crossed: frozenset[tuple[str, str]] = frozenset()


def localise(groups: pl.DataFrame, rank_hosts: dict[int, str]) -> LinkVerdict:
    """Intersect the ``suspect`` groups of :func:`~tracekit.attribute.profiling.suspect_groups`
    (with their ``members``) to a link or NIC; ``target`` is None when nothing crosses hosts."""
    crossing = []
    for row in groups.iter_rows(named=True):
        links = member_links(row["members"], rank_hosts)
        if links:
            crossing.append((bool(row["suspect"]), links))
    slow = [links for suspect, links in crossing if suspect]
    healthy = [links for suspect, links in crossing if not suspect]
    if not slow:
        return LinkVerdict(None, (), (), 0, len(healthy))
    crossed = frozenset(set.union(*slow))
    counts = len(slow), len(healthy), crossed
    candidates = _best(crossed, slow, healthy, lambda link, links: link in links)
    if candidates and len(candidates) == 1:
        a, b = candidates[0]
        return LinkVerdict(link_target(a, b), (a, b), (link_target(a, b),), *counts)
    hosts = {h for links in slow for link in links for h in link}
    nics = _best(hosts, slow, healthy, lambda host, links: any(host in link for link in links))
    if len(nics) == 1:
        return LinkVerdict(f"nic:{nics[0]}", (nics[0],), (f"nic:{nics[0]}",), *counts)
    named = tuple(link_target(a, b) for a, b in candidates) or tuple(f"nic:{h}" for h in nics)
    involved = tuple(sorted({h for a, b in candidates for h in (a, b)} or set(nics)))
    return LinkVerdict(None, involved, named, *counts)


def _best(units, slow, healthy, uses) -> list:
    """Units used by every slow group, with the fewest healthy users (ties all returned)."""
    full = [u for u in sorted(units) if all(uses(u, links) for links in slow)]
    if not full:
        return []
    false_hits = {u: sum(uses(u, links) for links in healthy) for u in full}
    fewest = min(false_hits.values())
    if fewest:
        return []
    return [u for u in full if false_hits[u] == fewest]

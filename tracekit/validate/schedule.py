"""Pass schedules: split the links of a ring or a tree into rounds of disjoint send/recv pairs.

Greyhound validates a communicator's links with point-to-point transfers, but testing one link
at a time costs O(n) and testing them all at once makes links share endpoints (a rank that sends
and receives at once measures neither). Its O(1) schedule splits the links into a constant number
of *passes*: inside a pass no rank appears twice, so all of a pass's transfers run together and
each measures one link alone. An even ring needs 2 passes, an odd ring 3 and a binary tree 4,
whatever the group size.

Each link is measured in both directions (a link's two directions are separate lanes and fail
separately), and every pass is filled up to the same number of concurrent transfers with
*companion* transfers between ranks the pass leaves idle, so every measured link shares the
machine with as many others and links of different passes compare fairly.

Ranks here are positions inside the group (0 .. n-1, the communicator rank); callers map them to
global ranks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tracekit.core.errors import TracekitError

Topology = Literal["ring", "tree"]
TOPOLOGIES: tuple[Topology, ...] = ("ring", "tree")


@dataclass(frozen=True, order=True)
class Link:
    """A directed link: ``src`` sends, ``dst`` receives (group positions)."""

    src: int
    dst: int


def ring_links(n: int) -> list[Link]:
    """The links of NCCL's ring over ``n`` ranks in communicator order: i sends to i + 1."""
    if n < 2:
        return []
    return [Link(i, (i + 1) % n) for i in range(n)]


def ring_passes(n: int) -> list[list[Link]]:
    """Even ring: links leaving even ranks, then odd ranks (2 passes). Odd ring: the same over
    the first n - 1 links, then the closing link n-1 -> 0 alone (3 passes)."""
    links = ring_links(n)
    if not links:
        return []
    closing = [links[-1]] if n % 2 else []
    body = links[:-1] if n % 2 else links
    passes = [[link for link in body if link.src % 2 == parity] for parity in (0, 1)]
    return [p for p in [*passes, closing] if p]


def tree_parent(n: int, rank: int) -> int | None:
    """Parent of ``rank`` in NCCL's binary tree over ``n`` ranks (``ncclGetBtree`` in
    ``src/graph/trees.cc``): an in-order tree rooted at 0 whose shape follows the lowest set bit
    of the rank, so leaves and inner nodes alternate."""
    if rank == 0:
        return None
    bit = rank & -rank
    parent = (rank ^ bit) | (bit << 1)
    return parent if parent < n else rank ^ bit


def tree_links(n: int) -> list[Link]:
    """The parent -> child links of NCCL's binary tree over ``n`` ranks."""
    return [Link(tree_parent(n, r), r) for r in range(1, n)]


def _depth(n: int, rank: int) -> int:
    depth = 0
    while (rank := tree_parent(n, rank)) is not None:
        depth += 1
    return depth


def tree_passes(n: int) -> list[list[Link]]:
    """Four passes keyed by (parent depth parity, which child): a rank is a parent only in the
    passes of its own depth parity and a child only in those of its parent's, and it has at most
    one child on each side, so no rank appears twice in a pass."""
    passes: dict[tuple[int, bool], list[Link]] = {}
    for link in tree_links(n):
        key = (_depth(n, link.src) % 2, link.dst > link.src)
        passes.setdefault(key, []).append(link)
    return [passes[key] for key in sorted(passes)]


def passes(topology: Topology, n: int) -> list[list[Link]]:
    """The pass schedule of ``topology`` over ``n`` ranks (empty below 2 ranks)."""
    if topology == "ring":
        return ring_passes(n)
    if topology == "tree":
        return tree_passes(n)
    raise TracekitError(f"unknown topology {topology!r}; use one of {', '.join(TOPOLOGIES)}")


def both_directions(schedule: list[list[Link]]) -> list[list[Link]]:
    """The passes, then each pass reversed (still no rank twice in a pass); a reversed link
    already measured (the two links of a 2-rank ring) is not measured twice."""
    seen = {link for one_pass in schedule for link in one_pass}
    reversed_passes = []
    for one_pass in schedule:
        back = [Link(link.dst, link.src) for link in one_pass]
        back = [link for link in back if link not in seen]
        seen.update(back)
        reversed_passes.append(back)
    return [p for p in [*schedule, *reversed_passes] if p]


def companions(one_pass: list[Link], n: int, width: int) -> list[Link]:
    """Untimed transfers between ranks ``one_pass`` leaves idle (paired in rank order) that
    bring it to ``width`` concurrent transfers, so its links see the contention of the widest
    pass."""
    busy = {r for link in one_pass for r in (link.src, link.dst)}
    idle = [r for r in range(n) if r not in busy]
    extra = max(0, width - len(one_pass))
    return [Link(idle[2 * i], idle[2 * i + 1]) for i in range(min(extra, len(idle) // 2))]

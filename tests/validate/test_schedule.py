"""Pass schedules: every link once per pass set, no rank twice in a pass, O(1) passes; both
directions, and companions that give every pass the same contention."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tracekit.core.errors import TracekitError
from tracekit.validate.schedule import (
    TOPOLOGIES,
    Link,
    both_directions,
    companions,
    passes,
    ring_links,
    tree_links,
    tree_parent,
)

group_sizes = st.integers(min_value=2, max_value=64)


@given(n=group_sizes, topology=st.sampled_from(TOPOLOGIES))
def test_every_link_exactly_once_and_no_rank_twice_in_a_pass(n, topology):
    schedule = passes(topology, n)
    links = ring_links(n) if topology == "ring" else tree_links(n)
    scheduled = [link for one_pass in schedule for link in one_pass]
    assert sorted(scheduled) == sorted(links)
    assert len(set(scheduled)) == len(scheduled)
    for one_pass in schedule:
        ranks = [r for link in one_pass for r in (link.src, link.dst)]
        assert len(ranks) == len(set(ranks))
        assert all(0 <= r < n for r in ranks)


@given(n=group_sizes)
def test_pass_count_is_constant_in_group_size(n):
    assert len(passes("ring", n)) == (2 if n % 2 == 0 else 3)
    assert len(passes("tree", n)) <= 4


@given(n=group_sizes)
def test_tree_is_a_spanning_tree_rooted_at_zero(n):
    for rank in range(1, n):
        seen = set()
        while rank is not None:
            assert rank not in seen and 0 <= rank < n
            seen.add(rank)
            rank = tree_parent(n, rank)
        assert 0 in seen
    children = {}
    for link in tree_links(n):
        children.setdefault(link.src, []).append(link.dst)
    assert max(len(c) for c in children.values()) <= 2
    assert len(children.get(0, [])) == 1


def test_tree_matches_nccl_btree_illustration():
    # src/graph/trees.cc draws the 14-rank tree: 0 -> 8 -> (4, 12), 12 -> (10, 13), ...
    parents = {r: tree_parent(14, r) for r in range(1, 14)}
    assert parents == {1: 2, 2: 4, 3: 2, 4: 8, 5: 6, 6: 4, 7: 6, 8: 0, 9: 10, 10: 12, 11: 10,
                       12: 8, 13: 12}


def test_small_groups():
    assert passes("ring", 2) == [[Link(0, 1)], [Link(1, 0)]]
    assert passes("ring", 3) == [[Link(0, 1)], [Link(1, 2)], [Link(2, 0)]]
    assert passes("ring", 1) == [] and passes("tree", 1) == []


def test_unknown_topology_is_a_clear_error():
    with pytest.raises(TracekitError, match="unknown topology 'mesh'"):
        passes("mesh", 4)


@given(n=group_sizes, topology=st.sampled_from(TOPOLOGIES))
def test_both_directions_and_equal_contention(n, topology):
    schedule = both_directions(passes(topology, n))
    links = ring_links(n) if topology == "ring" else tree_links(n)
    expected = {*links, *(Link(link.dst, link.src) for link in links)}
    scheduled = [link for one_pass in schedule for link in one_pass]
    assert sorted(scheduled) == sorted(expected)  # each direction once
    width = max(len(p) for p in schedule)
    for one_pass in schedule:
        filled = one_pass + companions(one_pass, n, width)
        assert len(filled) == width
        ranks = [r for link in filled for r in (link.src, link.dst)]
        assert len(ranks) == len(set(ranks))


def test_two_rank_ring_and_odd_ring_companions():
    assert both_directions(passes("ring", 2)) == [[Link(0, 1)], [Link(1, 0)]]
    # 5 ranks: the closing link 4 -> 0 would run alone; 1 -> 2 keeps it company
    closing = [Link(4, 0)]
    assert companions(closing, 5, 2) == [Link(1, 2)]
    assert companions([Link(0, 1), Link(2, 3)], 5, 2) == []

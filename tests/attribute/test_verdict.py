"""How attribution's parts combine into one verdict (:mod:`tracekit.attribute.verdict`)."""

from __future__ import annotations

from tests.attribute.cases import episode_signals
from tracekit.attribute.verdict import (
    CONFIDENCE_SIGNAL,
    CONFIDENCE_TIMING_AND_SIGNAL,
    INSUFFICIENT,
    Signals,
    Verdict,
    _combined,
    decide,
)

THERMAL = Verdict("compute", "gpu-thermal", "rank:4", 0.95, "GPU gpu05/0: hw_thermal set")
CONGESTION = Verdict("communication", "network-congestion", "link:a<->b", 0.9, "CNP 10 -> 900/s")
UNCONFIRMED_LINK = Verdict("communication", INSUFFICIENT, "link:a<->b", 0.85,
                           "a slow group crosses link:a<->b; no CNP surge")


def test_two_confirmed_causes_make_a_compound_of_both():
    verdict = _combined([THERMAL, CONGESTION])
    assert (verdict.kind, verdict.cause, verdict.target, verdict.confidence) == (
        "compound", "gpu-thermal+network-congestion", "rank:4+link:a<->b", 0.9)


def test_a_part_only_timing_points_at_does_not_hide_a_confirmed_cause():
    """A thermal GPU slows the groups it is in: their link, with no CNP surge, is no second
    cause (it made the whole verdict insufficient-evidence)."""
    verdict = _combined([THERMAL, UNCONFIRMED_LINK])
    assert (verdict.kind, verdict.cause, verdict.target, verdict.confidence) == (
        "compute", "gpu-thermal", "rank:4", 0.95)
    assert verdict.evidence == ("GPU gpu05/0: hw_thermal set; not confirmed: a slow group "
                                "crosses link:a<->b; no CNP surge")


def test_parts_no_signal_confirms_stay_insufficient():
    other = Verdict("compute", INSUFFICIENT, "rank:2", 0.85, "rank 2 computes x1.3")
    verdict = _combined([other, UNCONFIRMED_LINK])
    assert (verdict.cause, verdict.target, verdict.confidence) == (
        INSUFFICIENT, "rank:2+link:a<->b", 0.85)



def test_an_unchecked_part_stays_and_a_checked_quiet_one_is_left_out():
    """Beside a thermal GPU, a slow link with no RNIC counters is kept as a culprit of unknown
    cause (on fresh seeds it was a real second cause every time); one whose counters stayed
    quiet is left out."""
    unseen = Verdict("communication", INSUFFICIENT, "link:c<->d", 0.85,
                     "a slow group crosses link:c<->d; no RNIC congestion counters",
                     unseen=True)
    verdict = _combined([THERMAL, UNCONFIRMED_LINK, unseen])
    assert (verdict.kind, verdict.cause, verdict.target, verdict.confidence, verdict.unseen) == (
        "compound", INSUFFICIENT, "rank:4+link:c<->d", 0.85, True)
    assert verdict.evidence == ("GPU gpu05/0: hw_thermal set; a slow group crosses link:c<->d; "
                                "no RNIC congestion counters; not confirmed: a slow group "
                                "crosses link:a<->b; no CNP surge")


def test_a_confirmed_part_is_kept_beside_a_slow_group_that_crosses_no_host():
    """A thermal GPU slows the collectives of its own intra-host group; that group, with no
    link to blame, made the whole verdict insufficient-evidence on rank 5 with confidence 0
    (fresh seed 2640986395, job 15, the hook CSV)."""
    local = Verdict("communication", INSUFFICIENT, None, 0.0,
                    "1 of 7 communication groups transfer more than 10% slower; the slow "
                    "groups do not cross hosts, no link to blame")
    verdict = _combined([THERMAL, local])
    assert (verdict.kind, verdict.cause, verdict.target, verdict.confidence) == (
        "compute", "gpu-thermal", "rank:4", 0.95)


def _verdict(signals: Signals) -> tuple:
    v = decide(signals)
    return v.kind, v.cause, v.target, v.confidence


QUIET = {"h3": 100.0, "h4": 100.0}


def test_a_link_timing_alone_names_and_its_cnp_shows():
    groups = [([0, 1], 2.0), ([2, 3], 1.0)]
    assert _verdict(episode_signals(groups, {"h1": 10_000.0, "h2": 10_000.0, **QUIET})) == (
        "communication", "network-congestion", "link:h1<->h2", CONFIDENCE_TIMING_AND_SIGNAL)


def test_ring_links_that_tie_are_told_apart_by_the_cnp_signal_at_its_confidence():
    """One slow ring over h1, h2, h3: its three links explain it equally well, and the one
    whose two ends surge is named; the signal localised it, so its confidence is the
    signal's."""
    groups = [([0, 1, 2], 2.0)]
    assert _verdict(episode_signals(groups, {"h1": 10_000.0, "h2": 10_000.0, "h3": 100.0,
                                      "h4": 100.0})) == (
        "communication", "network-congestion", "link:h1<->h2", CONFIDENCE_SIGNAL)


def test_a_surged_link_a_slow_group_crosses_is_named_where_timing_localises_nothing():
    """The slow group h1-h2 shares its link with a healthy ring over all four hosts (which
    moves too little through it to slow by 10 %): no link or NIC is on every slow group and
    on no healthy one, so timing names nothing; the link whose two ends surge, crossed by
    the slow group, is the culprit (fresh seed 320468688, job 32, before its groups were
    inferred right)."""
    groups = [([0, 1], 2.0), ([0, 1, 2, 3], 1.0)]
    verdict = decide(episode_signals(groups, {"h1": 10_000.0, "h2": 10_000.0, **QUIET}))
    assert (verdict.kind, verdict.cause, verdict.target, verdict.confidence) == (
        "communication", "network-congestion", "link:h1<->h2", CONFIDENCE_SIGNAL)
    assert verdict.evidence == (
        "1 of 2 communication groups transfer more than 10% slower (worst x2.00 over its own "
        "time before, x1.00 over its comparable cluster); no link or NIC is on all 1 slow "
        "groups and on none of the 1 healthy ones; of the links they cross, link:h1<->h2 has "
        "congestion notifications at both ends: h1 CNP 100 -> 10,000/s; h2 CNP 100 -> "
        "10,000/s during the episode")


def test_a_surge_on_a_link_no_slow_group_crosses_names_nothing():
    groups = [([0, 1], 2.0), ([0, 1, 2, 3], 1.0)]
    assert _verdict(episode_signals(groups, {"h1": 100.0, "h2": 100.0, "h3": 10_000.0,
                                      "h4": 10_000.0})) == (
        "communication", INSUFFICIENT, None, 0.0)

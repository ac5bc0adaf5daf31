"""How attribution's parts combine into one verdict (:mod:`tracekit.attribute.verdict`)."""

from __future__ import annotations

from tracekit.attribute.verdict import INSUFFICIENT, Verdict, _combined

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

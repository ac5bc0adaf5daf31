from __future__ import annotations

import polars as pl

from tracekit.report.job import job_report
from tracekit.report.verdict import (
    culprit_in_words,
    culprits,
    evidence_clauses,
    verdict_sentences,
)

T0 = 1_760_432_655 * 10**9  # 2025-10-14 09:04:15 UTC
LINK = {"episode": 1, "t_start_ns": T0, "duration_s": 269.1, "slowdown": 1.2043, "lost_s": 45.66,
        "jct_slowdown": 0.0682, "cause": "network-congestion", "target": "link:gpu01-gpu02",
        "kind": "communication",
        "evidence": "3 of 7 groups slower; link:gpu01-gpu02 is crossed by all 3 slow groups; "
                    "gpu01 CNP 77 -> 937,516/s; gpu02 CNP 80 -> 937,516/s"}


def test_verdict_says_when_how_much_who_why_and_cost():
    assert verdict_sentences(pl.DataFrame([LINK]), 1.41) == [
        "The job ran 20 % slower for 4.5 min from 09:04:15 UTC because of network congestion "
        "on the link gpu01–gpu02 (gpu01 CNP 77 -> 937,516/s; gpu02 CNP 80 -> 937,516/s); it "
        "cost 45.7 s (6.8 % of the job)."]


def test_verdict_of_several_unattributed_and_no_episodes():
    unattributed = LINK | {"episode": 2, "t_start_ns": T0 + 600 * 10**9, "duration_s": 50.0,
                           "cause": None, "target": None, "evidence": None, "lost_s": 4.34,
                           "jct_slowdown": 0.0065}
    sentences = verdict_sentences(pl.DataFrame([unattributed, LINK]), 1.41)
    assert sentences[1] == ("The job ran 20 % slower for 50 s from 09:14:15 UTC (not attributed:"
                            " no culprit or cause was found); it cost 4.3 s (0.7 % of the job).")
    assert sentences[2] == "In all, 2 episodes cost 50.0 s (7.5 % of the job)."
    straggler = unattributed | {"lost_s": None, "jct_slowdown": None, "duration_s": None}
    assert verdict_sentences(pl.DataFrame([straggler]), 1.41)[0].endswith(
        "from 09:14:15 UTC (not attributed: no culprit or cause was found); its cost was not "
        "measured.")
    assert verdict_sentences(pl.DataFrame(), 1.411) == [
        "No fail-slow: the job ran at its own pace (median iteration 1.411 s)."]


def test_culprits_in_words_and_as_series():
    assert culprit_in_words("rank:1+link:gpu02-gpu01") == "rank 1 and the link gpu01–gpu02"
    assert culprit_in_words("link:rack2-n1<->rack1-n2") == "the link rack1-n2–rack2-n1"
    assert culprit_in_words("gpu:b07/5") == "GPU b07/5"
    assert evidence_clauses(LINK["evidence"])[2] == "gpu01 CNP 77 -> 937,516/s"
    thermal = {"target": "rank:13", "evidence": "GPU gpu04/1 (rank 13): hw_thermal set; SM clock"}
    assert culprits(pl.DataFrame([LINK, thermal | {"cause": "gpu-thermal"}])) == {
        "rank": {"13"}, "gpu": {"gpu04/1"}, "host": {"gpu01", "gpu02", "gpu04"}}


def test_job_report_opens_with_the_verdict_and_its_evidence(job_dataset):
    report = job_report(job_dataset)
    verdict = report.sections[0]
    assert verdict.title == "Verdict (bocd+b+peers)" and verdict.lead
    assert verdict.paragraphs == [
        "The job ran 50 % slower for 42 s from 22:14:23 UTC because of GPU thermal throttling on "
        "rank 2, GPU h0/2 (SM clock of gpu h0/2 1410 -> 990 MHz); it cost 14.0 s (11.7 % of "
        "the job)."]
    assert verdict.items == ["#1: SM clock of gpu h0/2 1410 -> 990 MHz"]


def test_an_unattributed_cause_names_all_the_monitoring_missing():
    """Not only the last clause's: the DCGM samples named first are missing too."""
    unchecked = LINK | {"cause": "insufficient-evidence", "target": "rank:4+link:a<->b",
                        "kind": "compound",
                        "evidence": "rank 4 computes x1.3; no DCGM samples (gpu_metrics) for GPU "
                                    "a/0 during the episode: cannot tell thermal throttling "
                                    "from degradation; 2 of 7 groups slower; no RNIC congestion "
                                    "counters (nic_counters np_cnp_sent / rp_cnp_handled) for "
                                    "a, b: cannot confirm congestion"}
    assert verdict_sentences(pl.DataFrame([unchecked]), 1.41) == [
        "The job ran 20 % slower for 4.5 min from 09:04:15 UTC on rank 4 and the link a–b "
        "(cause not attributed: no DCGM samples and no RNIC congestion counters to tell why); "
        "it cost 45.7 s (6.8 % of the job)."]
    nowhere = unchecked | {"target": None}
    assert verdict_sentences(pl.DataFrame([nowhere]), 1.41)[0].endswith(
        "(not attributed: no DCGM samples and no RNIC congestion counters to tell why); it cost "
        "45.7 s (6.8 % of the job).")


def test_an_unattributed_compound_quotes_what_monitoring_did_show():
    """A thermal GPU beside a slow link with no RNIC counters: the verdict claims both culprits
    and no cause; the sentence still quotes the GPU's readings."""
    kept = LINK | {"cause": "insufficient-evidence", "target": "rank:1+link:a<->b",
                   "kind": "compound",
                   "evidence": "rank 1 computes x2.39; GPU a/1: SM clock 1410 -> 590 MHz; "
                               "temperature 52 -> 86 C; hw_thermal set; link:a<->b is crossed "
                               "by all 3 slow groups; no RNIC congestion counters (nic_counters) "
                               "for a, b: cannot confirm congestion"}
    assert verdict_sentences(pl.DataFrame([kept]), 1.41) == [
        "The job ran 20 % slower for 4.5 min from 09:04:15 UTC on rank 1 and the link a–b "
        "(GPU a/1: SM clock 1410 -> 590 MHz; temperature 52 -> 86 C; cause not attributed: no "
        "RNIC congestion counters (nic_counters) for a, b: cannot confirm congestion); it cost "
        "45.7 s (6.8 % of the job)."]

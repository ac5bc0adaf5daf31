"""Each kind of verdict gets its calibrated confidence (:mod:`tracekit.attribute.verdict`), and
a verdict names no cause its monitoring cannot show: small episodes of two ranks on two hosts,
their timing and monitoring written by hand."""

from __future__ import annotations

import polars as pl
import pytest

from tracekit.attribute.evidence import Window
from tracekit.attribute.timing import EpisodeTiming
from tracekit.attribute.verdict import INSUFFICIENT, Signals, Verdict, _combined, decide
from tracekit.core import schema

S = 1_000_000_000
WINDOW = Window(start_ns=120 * S, end_ns=240 * S, baseline_start_ns=0,
                baseline_end_ns=120 * S)
"""A healthy 120 s, then a 120 s episode; the monitoring samples every 15 s over 6 minutes."""
HOSTS = {0: "h1", 1: "h2"}
RANKS = pl.DataFrame({"rank": [0, 1], "host": ["h1", "h2"], "cuda_dev": [0, 0], "gpu": [0, 0]},
                     schema_overrides={"cuda_dev": pl.Int32, "gpu": pl.Int32})
TIMES = range(0, 360 * S, 15 * S)


def _during(t: int) -> bool:
    return WINDOW.start_ns <= t < WINDOW.end_ns


def _own(slow_rank: int | None) -> pl.DataFrame:
    """Each rank's own compute share; ``slow_rank``'s grew x1.5 over its peer's."""
    return pl.DataFrame({
        "rank": [0, 1], "host": ["h1", "h2"],
        "own_share": [0.6 if r == slow_rank else 0.4 for r in (0, 1)],
        "own_share_before": [0.4, 0.4],
        "relative": [1.5 if r == slow_rank else 1.0 for r in (0, 1)]})


def _skew(waited_for: int | None) -> pl.DataFrame:
    """Arrival skew: the others waited for ``waited_for`` (it arrives last far more often)."""
    hot = [r == waited_for for r in (0, 1)]
    return pl.DataFrame({
        "rank": [0, 1],
        "last_share": [0.95 if h else 0.05 for h in hot], "last_share_before": [0.5, 0.5],
        "blame_rate": [0.3 if h else 0.0 for h in hot], "blame_rate_before": [0.0, 0.0],
        "excess_rate": [0.3 if h else 0.0 for h in hot]})


def _timing(own: pl.DataFrame | None, skew: pl.DataFrame) -> EpisodeTiming:
    groups = pl.DataFrame(schema={"group": pl.String, "suspect": pl.Boolean,
                                  "self_ratio": pl.Float64, "cluster_ratio": pl.Float64})
    members = pl.DataFrame({"group": ["g0"], "members": [[0, 1]]})
    return EpisodeTiming(200, 200, skew, groups, own, members)


def _gpu_metrics(hot: int | None = None, clock_drop: bool = False) -> pl.DataFrame:
    """DCGM of both GPUs: GPU 0 of rank ``hot``'s host throttled during the episode (thermal
    reason set, clock 1410 -> 1100 MHz); with ``clock_drop`` its clock drops with no reason."""
    rows = []
    for rank, host in HOSTS.items():
        for t in TIMES:
            slow = rank == hot and _during(t)
            rows += [(t, host, 0, "sm_clock_mhz", 1100.0 if slow else 1410.0),
                     (t, host, 0, "gpu_temp_c", 88.0 if slow and not clock_drop else 64.0),
                     (t, host, 0, "clock_event_hw_thermal",
                      1.0 if slow and not clock_drop else 0.0),
                     (t, host, 0, "power_w", 400.0 + t / S)]
    frame = pl.DataFrame(rows, orient="row", schema=["ts_ns", "host", "gpu", "metric", "value"],
                         schema_overrides={"gpu": pl.Int32})
    return schema.conform("gpu_metrics", frame)


def _host_metrics(busy: str | None = None) -> pl.DataFrame:
    rows = [(t, host, "node-exporter", "cpu_util_pct", 97.0 if host == busy and _during(t)
             else 35.0, "%", None) for host in HOSTS.values() for t in TIMES]
    frame = pl.DataFrame(rows, orient="row", schema=list(schema.HOST_METRICS.schema)[:7])
    return schema.conform("host_metrics", frame.cast(dict(schema.HOST_METRICS.schema)))


THERMAL = Verdict("compute", "gpu-thermal", "rank:4", 0.95, "hw_thermal set")
NO_GPU = schema.conform("gpu_metrics", pl.DataFrame())
NO_HOST = schema.conform("host_metrics", pl.DataFrame())
NO_NIC = schema.conform("nic_counters", pl.DataFrame())


def _decide(own: pl.DataFrame | None, skew: pl.DataFrame, gpu: pl.DataFrame = NO_GPU,
            host: pl.DataFrame = NO_HOST) -> Verdict:
    return decide(Signals(WINDOW, _timing(own, skew), RANKS, HOSTS, gpu, host, NO_NIC))


def test_timing_and_a_signal_of_its_own():
    """Call ends name rank 1; its GPU's thermal reason says why: two instruments."""
    verdict = _decide(_own(1), _skew(None), _gpu_metrics(hot=1), _host_metrics())
    assert (verdict.cause, verdict.target, verdict.confidence, verdict.inferred) == (
        "gpu-thermal", "rank:1", 0.95, False)


def test_a_signal_alone_where_timing_cannot_localise():
    """Issue times only: nobody is timed, but GPU h2/0's thermal reason appears."""
    verdict = _decide(None, _skew(None), _gpu_metrics(hot=1), _host_metrics())
    assert (verdict.cause, verdict.target, verdict.confidence, verdict.inferred) == (
        "gpu-thermal", "rank:1", 0.9, False)


def test_timing_alone_names_the_culprit_and_no_cause():
    """No monitoring at all: rank 1's compute grew, so it is the culprit, and nothing says
    why, so no cause is claimed."""
    verdict = _decide(_own(1), _skew(None))
    assert (verdict.cause, verdict.target, verdict.confidence, verdict.inferred) == (
        INSUFFICIENT, "rank:1", 0.85, False)
    assert "no DCGM samples (gpu_metrics) for GPU h2/0" in verdict.evidence


def test_a_cause_by_elimination_is_inferred_and_capped():
    """DCGM and CPU normal for the slow rank: a slower GPU is concluded, not seen."""
    verdict = _decide(_own(1), _skew(None), _gpu_metrics(), _host_metrics())
    assert (verdict.cause, verdict.target, verdict.confidence, verdict.inferred) == (
        "gpu-degradation", "rank:1", 0.5, True)


def test_a_clock_drop_is_a_signal_of_its_own():
    verdict = _decide(_own(1), _skew(None), _gpu_metrics(hot=1, clock_drop=True),
                      _host_metrics())
    assert (verdict.cause, verdict.confidence, verdict.inferred) == (
        "gpu-degradation", 0.95, False)


def test_a_host_cpu_explains_a_rank_its_gpu_does_not():
    verdict = _decide(_own(1), _skew(None), _gpu_metrics(), _host_metrics(busy="h2"))
    assert (verdict.cause, verdict.target, verdict.confidence, verdict.inferred) == (
        "cpu-contention", "host:h2", 0.9, False)


@pytest.mark.parametrize("cpu", [False, True])
def test_issue_times_and_no_monitoring_name_the_waited_for_rank_and_no_cause(cpu):
    """The collective log alone (or with node metrics that show nothing): the rank the others
    waited for is named from its arrivals, its cause is not."""
    verdict = _decide(None, _skew(1), host=_host_metrics() if cpu else NO_HOST)
    assert (verdict.cause, verdict.target, verdict.confidence, verdict.inferred) == (
        INSUFFICIENT, "rank:1", 0.5, False)
    assert "made its peers wait 30% of the time vs 0% before" in verdict.evidence


def test_issue_times_without_a_straggler_or_monitoring_name_nothing():
    verdict = _decide(None, _skew(None))
    assert (verdict.kind, verdict.cause, verdict.target, verdict.confidence) == (
        "unknown", INSUFFICIENT, None, 0.0)
    assert verdict.evidence.endswith(
        "the dump has no DCGM samples (gpu_metrics), no host CPU samples (node_exporter, "
        "host_metrics), no RNIC congestion counters (nic_counters) to tell which GPU, host or "
        "link slowed; add the missing monitoring, or the hook CSV with call ends")


def test_a_compound_of_two_shown_causes():
    congestion = Verdict("communication", "network-congestion", "link:a<->b", 0.95, "CNP")
    verdict = _combined([THERMAL, congestion])
    assert (verdict.kind, verdict.confidence) == ("compound", 0.9)


@pytest.mark.parametrize("call_ends", [True, False])
def test_no_cause_by_elimination_where_an_alternative_is_unseen(call_ends):
    """Normal clocks and no host CPU samples: a contended CPU slows a rank as a slower GPU
    does (and from issue times, with no RNIC counters, so does a congested link), so no cause
    is claimed."""
    own, skew = (_own(1), _skew(None)) if call_ends else (None, _skew(1))
    verdict = _decide(own, skew, _gpu_metrics())
    assert (verdict.cause, verdict.target, verdict.confidence, verdict.inferred) == (
        INSUFFICIENT, "rank:1", 0.85 if call_ends else 0.5, False)
    network = ("" if call_ends else "; no RNIC congestion counters (nic_counters): a rank can "
               "be late behind a congested link")
    assert verdict.evidence.endswith(
        "GPU h2/0: SM clock 1410 -> 1410 MHz (peers 1410 MHz); temperature 64 -> 64 C; clocks "
        "and throttle reasons normal; no host CPU samples (host_metrics cpu_util_pct) for h2: "
        f"cannot confirm CPU contention{network}; so a slower GPU is not concluded: normal "
        "clocks rule out throttling only")


@pytest.mark.parametrize(("unseen", "link", "cause", "target", "confidence"), [
    (False, "link:a<->b", "gpu-thermal", "rank:4", 0.95),
    (True, "link:a<->b", INSUFFICIENT, "rank:4+link:a<->b", 0.85),
    (True, None, "gpu-thermal", "rank:4", 0.2)])
def test_a_part_no_monitoring_could_check_stays_in_the_verdict(unseen, link, cause, target,
                                                               confidence):
    """A slow link beside a thermal GPU: with RNIC counters that stay quiet it is no second
    cause and is left out; with none it may be one, so it stays, claimed as a culprit only;
    where timing could not tell which link (candidates tie), the shown part is capped."""
    slow = Verdict("communication", INSUFFICIENT, link, 0.85 if link else 0.0,
                   "slow groups cross it", unseen=unseen)
    verdict = _combined([THERMAL, slow])
    assert (verdict.cause, verdict.target, verdict.confidence) == (cause, target, confidence)

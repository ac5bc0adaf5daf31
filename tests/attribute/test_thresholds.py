"""Each evidence threshold probed just inside and just outside its value."""

from __future__ import annotations

import polars as pl
import pytest

from tests.attribute.cases import SCRAPES, WINDOW, S, cnp_rows, episode_signals
from tracekit.attribute.evidence import (
    CLOCK_DROP,
    CNP_SURGE,
    CPU_RISE_PCT,
    FLAG_SHARE,
    Window,
    gpu_finding,
)
from tracekit.attribute.profiling import suspect_groups
from tracekit.attribute.telemetry import (
    CLOCK_READINGS,
    SUSTAINED_SHARE,
    THERMAL_READINGS,
    clock_suspects,
    cnp_surges,
    gpu_suspects,
    host_suspects,
    link_suspects,
    thermal_onsets,
)
from tracekit.attribute.verdict import (
    CONFIDENCE_TIMING,
    INSUFFICIENT,
    WAIT_RISE_MIN,
    _waited_for,
    decide,
)
from tracekit.attribute.windows import (
    MEASURABLE_GAP_NS,
    MIN_BASELINE_SHARE,
    NEIGHBOUR_GAP_ITERATIONS,
    Run,
    episode_runs,
)
from tracekit.core.thresholds import SUSPECT_RATIO

RANKS = pl.DataFrame({"rank": [0, 1], "host": ["h1", "h2"], "gpu": [0, 0]})


def _gpu(host: str, set_at: set[int], repeat_of: dict[int, int] | None = None,
         power: bool = True) -> list[dict]:
    """One GPU's DCGM samples: the thermal flag set at the times ``set_at``; the sample at a
    key of ``repeat_of`` serves the values of the one at its value (a repeated collect)."""
    repeat_of = repeat_of or {}
    rows = []
    for t in SCRAPES:
        source = repeat_of.get(t, t)
        values = {"clock_event_hw_thermal": float(source in set_at),
                  "sm_clock_mhz": 1100.0 if source in set_at else 1410.0}
        if power:
            values["power_w"] = 300.0 + source / 1000
        rows += [{"ts_ns": t * S, "host": host, "gpu": 0, "metric": m, "value": v}
                 for m, v in values.items()]
    return rows


def _thermal(rows: list[dict]) -> list[str]:
    frame = pl.DataFrame(rows + _gpu("h2", set()))
    return [s.target for s in gpu_suspects(frame, RANKS, WINDOW)]


def test_thermal_reasons_count_from_the_threshold_of_readings():
    readings = set(range(300, 300 + 15 * THERMAL_READINGS, 15))
    assert _thermal(_gpu("h1", readings)) == ["rank:0"]
    assert _thermal(_gpu("h1", set(sorted(readings)[:-1]))) == []


def _set_readings(rows: list[dict]) -> int:
    onsets = thermal_onsets(pl.DataFrame(rows), WINDOW)
    return onsets.filter(pl.col("host") == "h1")["set_during"].item()


def test_a_repeated_collect_is_one_reading():
    """dcgm-exporter's 30 s collect under a 15 s scrape: the second scrape serves the first's
    values, power to the milliwatt, so two samples with the flag are one reading; without a
    power sample nothing tells a repeat from a steady GPU, and each sample counts."""
    assert _set_readings(_gpu("h1", {300}, repeat_of={315: 300})) == 1
    assert _set_readings(_gpu("h1", {300, 315})) == 2
    assert _set_readings(_gpu("h1", {300}, repeat_of={315: 300}, power=False)) == 2


def _clock(dropped_at: set[int]) -> list[dict]:
    """h1's SM clock at 1000 MHz in the readings at ``dropped_at``, 1410 MHz elsewhere, with
    no thermal reason; h2 steady."""
    rows = []
    for host in ("h1", "h2"):
        for t in SCRAPES:
            low = host == "h1" and t in dropped_at
            rows += [{"ts_ns": t * S, "host": host, "gpu": 0, "metric": "sm_clock_mhz",
                      "value": 1000.0 if low else 1410.0},
                     {"ts_ns": t * S, "host": host, "gpu": 0, "metric": "power_w",
                      "value": 300.0 + t / 1000}]
    return rows


def test_a_clock_drop_counts_from_the_threshold_of_readings():
    readings = set(range(300, 300 + 15 * CLOCK_READINGS, 15))
    found = clock_suspects(pl.DataFrame(_clock(readings)), RANKS, WINDOW, set())
    assert [(s.cause, s.target) for s in found] == [("gpu-degradation", "rank:0")]
    fewer = set(sorted(readings)[:-1])
    assert clock_suspects(pl.DataFrame(_clock(fewer)), RANKS, WINDOW, set()) == []
    assert clock_suspects(pl.DataFrame(_clock(readings)), RANKS, WINDOW, {"rank:0"}) == []


@pytest.mark.parametrize(("during", "named"), [(100 * CNP_SURGE, True),
                                               (100 * CNP_SURGE - 1, False)])
def test_cnp_surge_from_its_ratio(during, named):
    frame = pl.DataFrame(cnp_rows("h1", during) + cnp_rows("h2", during),
                         schema_overrides={"rate_per_s": pl.Float64})
    surges = cnp_surges(frame, ["h1", "h2"], WINDOW)
    assert surges["ratio"].to_list() == [during / 100] * 2
    assert [s.target for s in link_suspects(frame, ["h1", "h2"], WINDOW)] == (
        ["link:h1<->h2"] if named else [])


@pytest.mark.parametrize(("rise", "named"), [(CPU_RISE_PCT, True), (CPU_RISE_PCT - 0.1, False)])
def test_cpu_rise_from_its_points(rise, named):
    rows = [{"ts_ns": t * S, "host": host, "metric": "cpu_util_pct",
             "value": 20.0 + (rise if host == "h1" and 300 < t <= 435 else 0.0)}
            for host in ("h1", "h2", "h3") for t in SCRAPES]
    found = host_suspects(pl.DataFrame(rows), ["h1", "h2", "h3"], WINDOW)
    assert [s.target for s in found] == (["host:h1"] if named else [])


@pytest.mark.parametrize(("clock", "inferred"), [(1400 * (1 - CLOCK_DROP) - 1, False),
                                                 (1400 * (1 - CLOCK_DROP), True)])
def test_clock_drop_is_a_signal_of_its_own_and_normal_clocks_an_inference(clock, inferred):
    """Under the drop the degradation is shown by the clock; at it, clocks count as normal
    and the degradation is concluded by elimination."""
    rows = [{"ts_ns": t * S, "host": "h1", "gpu": 0, "metric": "sm_clock_mhz",
             "value": clock if 300 <= t < 420 else 1400.0} for t in SCRAPES]
    finding = gpu_finding(pl.DataFrame(rows), "h1", 0, WINDOW)
    assert (finding.cause, finding.inferred) == ("gpu-degradation", inferred)


def _episodes(gap: int, iteration_s: int = 2) -> pl.DataFrame:
    """Two episodes of one detector, 40 iterations each (``iteration_s`` apart), ``gap``
    healthy iterations between."""
    second, t = 141 + gap, iteration_s * S
    return pl.DataFrame({
        "detector": ["x", "x"], "t_start_ns": [100 * t, second * t],
        "t_end_ns": [141 * t, (second + 41) * t], "start_iteration": [100, second],
        "end_iteration": [140, second + 40]})


T = 2 * S
"""The iteration of :func:`_episodes` by default."""


def test_episodes_closer_than_the_gap_are_one_run_judged_from_before_the_first():
    first, second = episode_runs(_episodes(NEIGHBOUR_GAP_ITERATIONS - 1))
    assert first == second
    assert first.window(-10**13, 10**13) == Window(100 * T, 201 * T, (100 - 4 * 101) * T,
                                                   100 * T)


def test_episodes_a_gap_apart_are_two_runs_and_the_second_baseline_stops_at_the_first():
    first, second = episode_runs(_episodes(NEIGHBOUR_GAP_ITERATIONS))
    assert first.window(-10**13, 10**13) == Window(100 * T, 141 * T, (100 - 4 * 41) * T, 100 * T)
    assert second.window(-10**13, 10**13) == Window(161 * T, 202 * T, 141 * T, 161 * T)


@pytest.mark.parametrize(("gap", "iteration_s", "inherited"), [
    (NEIGHBOUR_GAP_ITERATIONS, 1, True), (30, 1, False), (NEIGHBOUR_GAP_ITERATIONS, 2, False)])
def test_after_a_gap_too_short_to_measure_the_baseline_is_the_previous_runs(
        gap, iteration_s, inherited):
    """20 healthy iterations of 1 s hold one 15 s scrape, whose rate still covers the first
    run: the second run keeps its own span and takes the first's baseline. 30 s
    (MEASURABLE_GAP_NS) or 20 iterations of 2 s are a baseline of their own."""
    assert MEASURABLE_GAP_NS == 30 * S
    t = iteration_s * S
    first, second = episode_runs(_episodes(gap, iteration_s))
    window = second.window(-10**13, 10**13)
    assert first != second and window.start_ns == (141 + gap) * t
    assert window.baseline == ((first.window(-10**13, 10**13).baseline) if inherited
                               else (141 * t, (141 + gap) * t))


@pytest.mark.parametrize(("set_in", "cause"), [(4, "gpu-thermal"), (3, "gpu-degradation")])
def test_thermal_flag_share_with_call_ends(set_in, cause):
    """With call ends, a thermal reason set in FLAG_SHARE of the episode's 8 samples makes
    the timing culprit thermal; one sample fewer leaves normal clocks, so degradation."""
    assert FLAG_SHARE == 0.5
    episode = [t for t in SCRAPES if 300 <= t < 420]
    rows = [{"ts_ns": t * S, "host": "h1", "gpu": 0, "metric": "clock_event_hw_thermal",
             "value": float(t in episode[:set_in])} for t in SCRAPES]
    assert gpu_finding(pl.DataFrame(rows), "h1", 0, WINDOW).cause == cause


@pytest.mark.parametrize(("surging", "named"), [(5, True), (4, False)])
def test_a_surge_holds_in_at_least_the_sustained_share_of_scrapes(surging, named):
    """The episode's rates end at its 9 scrapes 315-435 s: a surge in 5 of them holds, in 4
    it does not."""
    assert SUSTAINED_SHARE == 0.5
    rows = []
    for host in ("h1", "h2"):
        count = 1_000
        for t in SCRAPES:
            count += (10_000 if 300 < t <= 300 + 15 * surging else 100) * 15
            rows.append({"ts_ns": t * S, "host": host, "device": "mlx5_0", "port": 1,
                         "counter": "np_cnp_sent", "value": count, "rate_per_s": None})
    frame = pl.DataFrame(rows, schema_overrides={"rate_per_s": pl.Float64})
    assert [s.target for s in link_suspects(frame, ["h1", "h2"], WINDOW)] == (
        ["link:h1<->h2"] if named else [])


def test_a_surge_on_a_link_no_ring_crosses_is_no_suspect():
    frame = pl.DataFrame(cnp_rows("h1", 1_000) + cnp_rows("h2", 1_000) + cnp_rows("h3", 100),
                         schema_overrides={"rate_per_s": pl.Float64})
    job = ["h1", "h2", "h3"]
    assert [s.target for s in link_suspects(frame, job, WINDOW, {("h1", "h2")})] == [
        "link:h1<->h2"]
    assert link_suspects(frame, job, WINDOW, {("h1", "h3"), ("h2", "h3")}) == []


def _transfer(ratio: float) -> pl.DataFrame:
    """One group's median transfer time per call size: 1 s, times ``ratio``."""
    return pl.DataFrame({"group": [0], "op": ["allreduce"], "bytes": [1 << 20], "nranks": [2],
                         "transfer_s": [ratio], "calls": [10], "hosts": [["h1", "h2"]],
                         "members": [[0, 1]]})


@pytest.mark.parametrize(("ratio", "slow"), [(SUSPECT_RATIO + 0.001, True),
                                             (SUSPECT_RATIO, False)])
def test_a_group_is_slow_over_the_suspect_ratio_of_its_own_transfer_before(ratio, slow):
    groups = suspect_groups(_transfer(ratio), _transfer(1.0))
    assert groups["self_ratio"].to_list() == [ratio]
    assert groups["suspect"].to_list() == [slow]


@pytest.mark.parametrize(("relative", "named"), [(SUSPECT_RATIO + 0.001, True),
                                                 (SUSPECT_RATIO, False)])
def test_a_rank_is_a_straggler_over_the_suspect_ratio_of_the_median_ranks_own_time(relative,
                                                                                   named):
    """Rank 1's own compute share grew ``relative`` times the median rank's; with no GPU or
    host samples to say why, timing alone names it."""
    verdict = decide(episode_signals([([0, 1], 1.0)], {}, relative={1: relative}))
    assert (verdict.cause, verdict.target, verdict.confidence) == (
        (INSUFFICIENT, "rank:1", CONFIDENCE_TIMING) if named else ("unknown", None, 0.0))


def _skew(rise: float) -> pl.DataFrame:
    """Rank 1 imposes ``rise`` more wait per second than before, and its share of last
    arrivals rose 0.3; rank 0's fell."""
    return pl.DataFrame({"rank": [0, 1], "excess_rate": [0.0, rise],
                         "blame_rate": [0.01, 0.01 + rise], "blame_rate_before": [0.01, 0.01],
                         "last_share": [0.2, 0.8], "last_share_before": [0.5, 0.5]})


@pytest.mark.parametrize(("rise", "named"), [(WAIT_RISE_MIN, True),
                                             (WAIT_RISE_MIN - 0.001, False)])
def test_issue_times_name_the_rank_whose_imposed_wait_rose_by_the_minimum(rise, named):
    found = _waited_for(_skew(rise), {0: "h1", 1: "h2"}, "before")
    assert (found[0] if found else None) == (1 if named else None)


def test_another_detectors_neighbour_joins_the_run_and_a_persistent_straggler_does_not():
    """``y`` sees a slowdown 19 iterations before ``x``'s episode: ``x``'s baseline starts
    before it, not inside it. A persistent straggler spanning everything stays apart."""
    gap = NEIGHBOUR_GAP_ITERATIONS - 1
    episodes = _episodes(gap, 1).with_columns(
        detector=pl.Series(["y", "x"]), persistent=pl.lit(None, pl.Boolean))
    straggler = pl.DataFrame({
        "detector": ["peers"], "t_start_ns": [0], "t_end_ns": [400 * S],
        "start_iteration": [0], "end_iteration": [399], "persistent": [True]})
    runs = episode_runs(pl.concat([episodes, straggler]))
    assert runs[0] == runs[1] != runs[2]
    assert runs[1].window(-10**12, 10**12).baseline_start_ns == (100 - 4 * 101) * S
    assert (runs[2].start_ns, runs[2].end_ns) == (0, 400 * S)


@pytest.mark.parametrize(("healthy_before_s", "after"), [(25, False), (24, True)])
def test_a_run_with_too_little_healthy_time_before_it_is_judged_against_the_time_after(
        healthy_before_s, after):
    """A 100 s run with a quarter of its length (MIN_BASELINE_SHARE) after the warm-up keeps
    its baseline before it; a second less takes the 4 run lengths after it, up to the next
    run."""
    assert MIN_BASELINE_SHARE == 0.25
    run = Run(1000 * S, 1100 * S, None, 1300 * S)
    window = run.window((1000 - healthy_before_s) * S, 10**13)
    expected = ((1100 * S, 1300 * S) if after
                else ((1000 - healthy_before_s) * S, 1000 * S))
    assert (window.baseline, window.baseline_after, window.then) == (
        expected, after, "after" if after else "before")
    assert run.widest((1000 - healthy_before_s) * S)[1] == (1300 if after else 1100) * S

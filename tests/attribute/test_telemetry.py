"""Telemetry suspects without call ends: signals that move with the slowdown count, decoys
(hot all along, a power-cap blip, CNP bursts elsewhere or at other times) do not."""

from __future__ import annotations

import polars as pl
import pytest

from tracekit.attribute.evidence import Window
from tracekit.attribute.telemetry import gpu_suspects, host_suspects, link_suspects

S = 10**9
SCRAPES = range(0, 600, 15)
"""A 15 s scrape from 0 to 585 s; the episode runs 300-420 s, its baseline 100-300 s."""
WINDOW = Window(300 * S, 420 * S, 100 * S, 300 * S)


def _in(t: int, start: int = 300, end: int = 420) -> bool:
    return start <= t < end


def _gpu_rows(host: str, gpu: int, metric: str, value) -> list[dict]:
    return [{"ts_ns": t * S, "host": host, "gpu": gpu, "metric": metric, "value": float(value(t))}
            for t in SCRAPES]


def test_thermal_reasons_new_in_the_episode_name_the_gpu_and_its_rank():
    rows = (_gpu_rows("h1", 0, "clock_event_hw_thermal", lambda t: _in(t))
            + _gpu_rows("h1", 0, "sm_clock_mhz", lambda t: 1100 if _in(t) else 1410)
            + _gpu_rows("h1", 1, "clock_event_hw_thermal", lambda t: 1)  # hot all along
            + _gpu_rows("h1", 1, "sm_clock_mhz", lambda t: 1410)
            + _gpu_rows("h2", 0, "clock_event_sw_power_cap", lambda t: t in (330, 345))
            + _gpu_rows("h2", 0, "sm_clock_mhz", lambda t: 1200 if t in (330, 345) else 1410))
    ranks = pl.DataFrame({"rank": [0, 1, 2], "host": ["h1", "h1", "h2"], "gpu": [0, 1, 0]})
    found = gpu_suspects(pl.DataFrame(rows), ranks, WINDOW)
    assert [(s.cause, s.target) for s in found] == [("gpu-thermal", "rank:0")]
    assert "SM clock down to 1100 MHz (peers 1410 MHz)" in found[0].text


def _cpu_rows(host: str, busy) -> list[dict]:
    """Cumulative busy and total CPU seconds of a 100-CPU host, one scrape per 15 s."""
    rows, used = [], 0.0
    for t in SCRAPES:
        used += busy(t) / 100 * 100 * 15
        rows += [{"ts_ns": t * S, "host": host, "metric": "cpu_busy_seconds_total",
                  "value": used},
                 {"ts_ns": t * S, "host": host, "metric": "cpu_seconds_total",
                  "value": 100.0 * 15 * (t // 15 + 1)}]
    return rows


def test_cpu_share_that_rises_and_falls_with_the_episode_names_its_host():
    frame = pl.DataFrame(
        _cpu_rows("h1", lambda t: 60 if _in(t) else 20)  # contention with the slowdown
        + _cpu_rows("h2", lambda t: 70)  # busy all along
        + _cpu_rows("h3", lambda t: 60 if t >= 300 else 20)  # rises and never falls back
        + _cpu_rows("h4", lambda t: 20) + _cpu_rows("h5", lambda t: 20)
        + _cpu_rows("h6", lambda t: 20))
    found = host_suspects(frame, ["h1", "h2", "h3", "h4", "h5", "h6"], WINDOW)
    assert [(s.cause, s.target) for s in found] == [("cpu-contention", "host:h1")]
    assert found[0].text.startswith("host h1: CPU busy 20 -> 60 %")


def _cnp_rows(host: str, rate) -> list[dict]:
    rows, count = [], 1_000
    for t in SCRAPES:
        count += int(rate(t) * 15)
        rows.append({"ts_ns": t * S, "host": host, "device": "mlx5_0", "port": 1,
                     "counter": "np_cnp_sent", "value": count, "rate_per_s": None})
    return rows


def test_cnp_surge_at_both_ends_with_the_episode_names_the_link_and_decoys_do_not():
    job = ["h1", "h2", "h3"]
    surge = lambda t: 50_000 if _in(t, 315, 435) else 5  # noqa: E731 (rates end at their scrape)
    burst = lambda t: 50_000 if _in(t, 150, 200) else 5  # noqa: E731  (before the slowdown)
    frame = pl.DataFrame(_cnp_rows("h1", surge) + _cnp_rows("h2", surge)
                         + _cnp_rows("h3", burst) + _cnp_rows("other-tenant", surge),
                         schema_overrides={"rate_per_s": pl.Float64})
    found = link_suspects(frame, job, WINDOW)
    assert [(s.cause, s.target) for s in found] == [("network-congestion", "link:h1<->h2")]
    assert link_suspects(frame, ["h3"], WINDOW) == []


SHORT = Window(300 * S, 330 * S, 100 * S, 300 * S)
"""A 30 s episode: its rates' span is 300-345 s, a scrape's tolerance to 360 s, and the span
after it 360-390 s (two scrapes)."""


@pytest.mark.parametrize(("last", "named"), [(360, True), (375, False)])
def test_a_surge_rate_one_scrape_past_the_end_is_not_a_level_staying_up(last, named):
    """A monitoring clock a few seconds ahead moves the surge's last rate past the episode:
    within one scrape it counts neither way; one scrape further it is half the span after."""
    surge = lambda t: 50_000 if 315 <= t <= last else 5  # noqa: E731
    frame = pl.DataFrame(_cnp_rows("h1", surge) + _cnp_rows("h2", surge)
                         + _cnp_rows("h3", lambda t: 5),
                         schema_overrides={"rate_per_s": pl.Float64})
    found = link_suspects(frame, ["h1", "h2", "h3"], SHORT)
    assert [s.target for s in found] == (["link:h1<->h2"] if named else [])


@pytest.mark.parametrize(("first", "named"), [(285, True), (270, False)])
def test_a_thermal_reading_one_scrape_before_the_start_does_not_count_as_before(first, named):
    """A monitoring clock a few seconds behind moves the first thermal reading before the
    episode (300 s): at 285 s it is within a scrape and ignored; at 270 s it was hot before."""
    rows = (_gpu_rows("h1", 0, "clock_event_hw_thermal", lambda t: _in(t, first))
            + _gpu_rows("h1", 1, "clock_event_hw_thermal", lambda t: 0))
    ranks = pl.DataFrame({"rank": [0, 1], "host": ["h1", "h1"], "gpu": [0, 1]})
    found = gpu_suspects(pl.DataFrame(rows), ranks, WINDOW)
    assert [s.target for s in found] == (["rank:0"] if named else [])

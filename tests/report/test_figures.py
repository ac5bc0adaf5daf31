"""The job timeline at scale: the culprit against its peers' band whatever the rank count, an
axis the checkpoint pauses do not set, and readable CDF axes."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from tracekit.report.figures import cdf_figure, congestion_per_host, iteration_timeline

T0 = 1_700_000_000 * 10**9
ITERATIONS = 400
CHECKPOINTS = (100, 250, 350)


def _job(ranks: int, culprit: int):
    """``ranks`` ranks of 1.0 s iterations, x1.3 over 150-299, 40 s checkpoints; the
    culprit's GPU drops its SM clock during the slowdown."""
    base = np.ones(ITERATIONS) + 0.01 * np.sin(np.arange(ITERATIONS))
    base[150:300] *= 1.3
    base[list(CHECKPOINTS)] = 40.0
    starts = T0 + (np.concatenate([[0], np.cumsum(base)[:-1]]) * 1e9).astype(np.int64)
    iterations = pl.DataFrame({
        "rank": np.repeat(np.arange(ranks), ITERATIONS).astype(np.int32),
        "iteration": np.tile(np.arange(ITERATIONS), ranks),
        "duration_s": np.tile(base, ranks), "t_start_ns": np.tile(starts, ranks),
        "source": "acf"}).with_columns(
        t_end_ns=pl.col("t_start_ns") + (pl.col("duration_s") * 1e9).cast(pl.Int64))
    episodes = pl.DataFrame({
        "episode": [1], "t_start_ns": [int(starts[150])], "t_end_ns": [int(starts[300])],
        "slowdown": [1.3], "baseline_s": [1.0], "cause": ["gpu-thermal"],
        "target": [f"rank:{culprit}"], "kind": ["compute"],
        "evidence": [f"GPU h{culprit // 8}/{culprit % 8} (rank {culprit}): SM clock down"]})
    ts = T0 + np.arange(0, 600, 15) * 10**9
    gpu = pl.DataFrame({
        "ts_ns": np.tile(ts, ranks), "host": np.repeat([f"h{r // 8}" for r in range(ranks)],
                                                       len(ts)),
        "gpu": np.repeat(np.arange(ranks) % 8, len(ts)), "metric": "sm_clock_mhz",
        "value": 1410.0}).with_columns(value=pl.when(
            (pl.col("host") == f"h{culprit // 8}") & (pl.col("gpu") == culprit % 8)
            & pl.col("ts_ns").is_between(starts[150], starts[300])).then(990.0)
        .otherwise("value"))
    nic = pl.DataFrame(schema={"ts_ns": pl.Int64, "host": pl.String, "counter": pl.String,
                               "rate_per_s": pl.Float64})
    return iterations, episodes, gpu, nic


@pytest.mark.parametrize("ranks", [16, 256, 1024])
def test_timeline_draws_culprit_against_peers_at_any_scale(ranks):
    iterations, episodes, gpu, nic = _job(ranks, ranks - 3)
    events = episodes.select(ts_ns="t_start_ns")
    figure = iteration_timeline(iterations, events, episodes, gpu, nic, "t")
    timeline, clock = figure.axes
    labels = timeline.get_legend_handles_labels()[1]
    assert labels[:3] == [f"{ranks - 1} ranks: 5%-95% band", f"{ranks - 1} ranks: median",
                          f"culprit rank {ranks - 3}"]
    assert labels[3] == ("3 interlude(s) off scale, shaded grey (eval, checkpoint; longest "
                         "40.0 s)")
    # median, culprit, off-scale markers, the change point and its legend entry: 5 lines
    # whatever the rank count, never one per rank
    assert len(timeline.get_lines()) == 5
    # the axis follows the iterations and the x1.3 episode, not the 40 s checkpoints
    bottom, top = timeline.get_ylim()
    assert 1.25 * 1.3 <= top <= 1.25 * 1.3 * 1.01 and bottom < 0.99
    assert clock.get_legend_handles_labels()[1] == [
        f"{ranks - 1} peer GPUs: 5%-95% band", f"{ranks - 1} peer GPUs: median",
        f"GPU h{(ranks - 3) // 8}/{(ranks - 3) % 8}"]


def test_congestion_per_host_is_what_the_evidence_quotes():
    nic = pl.DataFrame({"ts_ns": [1, 1, 1, 1], "host": ["a", "a", "a", "b"],
                        "counter": ["np_cnp_sent", "rp_cnp_handled",
                                    "np_ecn_marked_roce_packets", "out_of_sequence"],
                        "rate_per_s": [60.0, 114.0, 60.0, 3.0]})
    assert congestion_per_host(nic).rows() == [("a", 1, 234.0)]


def test_cdf_axes_read_as_numbers_and_percent():
    frame = pl.DataFrame({"minutes": [0.9, 1.0, 1.3, 30.0], "category": "communication"})
    figure = cdf_figure(frame, "minutes", "category", "t", "min", log_x=True,
                        references=(("communication", "paper mean 24 min", 24.0, None),))
    figure.canvas.draw()
    ax = figure.axes[0]
    ticks = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert {"1", "2", "5", "10", "20"} <= set(ticks)
    assert {"0%", "40%", "100%"} <= {t.get_text() for t in ax.get_yticklabels()}
    assert ax.get_legend_handles_labels()[1] == ["communication (n=4)", "paper mean 24 min"]


def test_small_multiples_per_host_from_four_hosts():
    from tracekit.report.figures import EPISODE_COLOUR, host_multiples

    iterations, episodes, gpu, _ = _job(1024, 1021)
    figure = host_multiples(gpu, episodes, T0)
    shown = [ax for ax in figure.axes if ax.axison]
    assert len(shown) == 128 and len(figure.axes) == 128  # 16 full rows of 8
    red = [ax.get_title(loc="left") for ax in shown
           if any(line.get_color() == EPISODE_COLOUR for line in ax.get_lines())]
    assert red == ["h127"]
    assert all(len(ax.get_lines()) == 8 for ax in shown)
    assert host_multiples(gpu.filter(pl.col("host").is_in(["h0", "h1", "h2"])), episodes,
                          T0) is None


def test_a_legend_counts_in_words():
    from tracekit.report.figures import _counted

    assert [_counted(1, "series"), _counted(2, "series"), _counted(1, "peer rank"),
            _counted(3, "peer rank")] == ["1 series", "2 series", "1 peer rank", "3 peer ranks"]

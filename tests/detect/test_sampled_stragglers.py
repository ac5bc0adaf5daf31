"""Stragglers in sampled step tables (one row per worker every 10 s, normalised times, as the
Alibaba PAI mini-batch tables): lengths count the seconds the samples stand for, several
workers slowing together are each named, and a steady offset is one persistent straggler."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from tracekit import open_dataset
from tracekit.detect import detect_dataset
from tracekit.detect.verdict import shown_episodes
from tracekit.ingest.pipeline import ingest

WORKERS = 10
SAMPLES = 240
EVERY_S = 10


def sampled_table(path, slow: dict[int, list[tuple[int, int, float]]] | None = None,
                  offsets: dict[int, float] | None = None, phases: bool = False,
                  seed: int = 0) -> None:
    """A per-worker table sampled every 10 s (the PAI header: index, worker, gpu share, time,
    batch time normalised, ~700 with 3 % noise); ``slow`` maps a worker to (first sample, stop
    sample, factor) stretches, ``offsets`` to a factor of every sample; with ``phases`` each
    worker samples at its own second of the 10."""
    rng = np.random.default_rng(seed)
    values = 700.0 * (1.0 + 0.03 * rng.standard_normal((WORKERS, SAMPLES)))
    for worker, factor in (offsets or {}).items():
        values[worker] *= factor
    for worker, stretches in (slow or {}).items():
        for first, stop, factor in stretches:
            values[worker, first:stop] *= factor
    times = 1 + EVERY_S * np.arange(SAMPLES)[None, :] + (
        (np.arange(WORKERS) * 3 % EVERY_S)[:, None] if phases else 0)
    table = pl.DataFrame({
        "worker": np.repeat(np.arange(WORKERS), SAMPLES), "gpu": 25,
        "time": np.broadcast_to(times, values.shape).ravel(),
        "batch_time_norm": np.round(values).astype(np.int64).ravel()}).sort("time", "worker")
    lines = [",worker,gpu,time,batch_time_norm"] + [
        f"{index},{w},{g},{t},{v}" for index, (w, g, t, v) in enumerate(table.iter_rows())]
    path.write_text("\n".join(lines) + "\n")


def peer_episodes(tmp_path, **table) -> tuple[pl.DataFrame, list[str]]:
    sampled_table(tmp_path / "job.csv", **table)
    ingest([tmp_path / "job.csv"], tmp_path / "ds")
    found = detect_dataset(tmp_path / "ds")
    return found.episodes.filter(pl.col("detector") == "peers"), found.notes


def spans(episodes: pl.DataFrame) -> list[tuple]:
    return episodes.select("ranks", "start_iteration", "end_iteration", "iterations", "points",
                           "persistent").rows()


def test_a_worker_twice_its_peers_for_two_minutes_is_an_episode(tmp_path):
    """13 samples (130 s) at x2: fewer points than a fail-slow has iterations, but they stand
    for 130 s; the verdict names the worker."""
    found, _ = peer_episodes(tmp_path, slow={3: [(100, 113, 2.0)]})
    assert spans(found) == [("3", 1001, 1121, 130, 13, False)]
    assert found["slowdown"][0] == pytest.approx(2.0, rel=0.05)
    _, verdict = shown_episodes(open_dataset(tmp_path / "ds").table("episodes").collect())
    assert verdict["ranks"].to_list() == ["3"]


def test_workers_sampled_at_their_own_phase_are_compared_on_one_grid(tmp_path):
    """Worker 3 samples 9 s after the others (at 10, 20, ...): each of its samples joins the
    others' next one, so its episode is dated one sample later."""
    found, notes = peer_episodes(tmp_path, slow={3: [(100, 113, 2.0)]}, phases=True)
    assert spans(found) == [("3", 1011, 1131, 130, 13, False)]
    assert notes[-1] == ("ranks sample at their own times: their samples are put on a common "
                         "grid of one every 10, whose numbers episodes carry")


def test_a_two_sample_blip_is_no_episode(tmp_path):
    """Two samples at x3 stand for 20 s, a fail-slow's length, but two points are no level."""
    found, _ = peer_episodes(tmp_path, slow={3: [(100, 102, 3.0)]})
    assert found.is_empty()


def test_several_workers_slowing_together_are_each_named(tmp_path):
    """Four of ten workers step up x1.3 within 30 s of each other and stay slow to the end:
    one episode naming the four, from the first onset."""
    found, _ = peer_episodes(tmp_path, slow={6: [(200, SAMPLES, 1.3)], 7: [(201, SAMPLES, 1.3)],
                                             8: [(203, SAMPLES, 1.3)], 9: [(200, SAMPLES, 1.3)]})
    assert spans(found) == [("6,7,8,9", 2001, 2391, 400, 40, False)]


def test_a_steady_offset_is_one_persistent_straggler(tmp_path):
    """A worker x1.15 its peers all run (its noise crossing x1.10 now and then) is reported
    once, over the whole run, with its size; one at x1.06 is not reported."""
    found, _ = peer_episodes(tmp_path, offsets={0: 1.15, 1: 1.06})
    assert spans(found) == [("0", 1, 2391, 2400, 240, True)]
    assert found["slowdown"][0] == pytest.approx(1.15, abs=0.03)
    assert "all run, a steady offset (2400 iterations in 240 logged points)" in \
        found["evidence"][0]


def test_a_fault_on_top_of_a_steady_offset_is_its_own_episode(tmp_path):
    """The persistent straggler x1.15, and x2 more for 20 samples: the offset once, the fault
    beside it; each delays the job by its own part (the fault by its step over the offset),
    so neither counts the other's time."""
    found, _ = peer_episodes(tmp_path, offsets={0: 1.15}, slow={0: [(120, 140, 2.0)]})
    assert spans(found) == [("0", 1, 2391, 2400, 240, True),
                            ("0", 1201, 1391, 200, 20, False)]
    offset, fault = found["slowdown"].to_list()
    assert offset == pytest.approx(1.13, abs=0.03) and fault == pytest.approx(2.0, rel=0.05)


def test_a_fast_worker_slowing_to_its_peers_level_plus_a_fail_slow(tmp_path):
    """A worker usually x0.85 its peers slows to x1.15 of them for 30 samples: a step of x1.35
    of its own level, an episode; a worker at x1.04 whose noise reaches x1.12 is none."""
    found, _ = peer_episodes(tmp_path, offsets={2: 0.85, 5: 1.04},
                             slow={2: [(60, 90, 1.15 / 0.85)]})
    assert spans(found) == [("2", 601, 891, 300, 30, False)]

"""An episode's timing reduced from bounded pieces (the parts of many bins of groups and
batches of ranks) is what one piece of the whole job gives."""

from __future__ import annotations

from dataclasses import replace

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tracekit.attribute import job_signals
from tracekit.attribute.evidence import Window
from tracekit.attribute.timing import SHARED_READ, episode_timings, shared_reads
from tracekit.core.dataset import open_dataset
from tracekit.core.parallel import LocalExecutor
from tracekit.ingest.pipeline import ingest
from tracekit.synth.faults import Injection
from tracekit.synth.job import JobSpec, generate_job
from tracekit.synth.layout import Layout


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """tp2-dp2-pp2 on 2 GPUs per host, rank 3 throttled from iteration 60 to 100, its signals
    cut as for 4 workers: 8 batches of ranks, 7 bins of its 13 groups."""
    root = tmp_path_factory.mktemp("timing")
    spec = JobSpec(Layout.parse("tp2-dp2-pp2", gpus_per_host=2), 160, 5,
                   (Injection.parse("thermal:rank=3@60+40x2.0"),), job="timing")
    generate_job(root / "job", spec)
    ingest([root / "job" / "ranks"], root / "ds", job="timing")
    executor = LocalExecutor()
    executor.description.update(workers=4)
    (root / "scratch").mkdir()
    return job_signals.signals_in_windows(open_dataset(root / "ds"), [(None, None)], executor,
                                          root / "scratch")


def _one_part(parts: list[str], path) -> list[str]:
    """``parts`` as one part at ``path``."""
    pl.concat([pl.read_ipc(part) for part in parts]).write_ipc(path)
    return [str(path)]


def test_pieces_give_what_the_whole_job_gives(job, tmp_path):
    assert (len(job.instance_parts), len(job.gap_parts)) == (7, 8)
    start, end = job.span_ns
    third = (end - start) // 3
    window = Window(start + third, start + 2 * third, start, start + third)
    ranks = job.ranks.with_columns(pl.col("cuda_dev").alias("gpu"))
    [pieces] = episode_timings(job, [window], ranks)
    [whole] = episode_timings(replace(
        job, instance_parts=_one_part(job.instance_parts, tmp_path / "instances.arrow"),
        gap_parts=_one_part(job.gap_parts, tmp_path / "gaps.arrow")), [window], ranks)
    assert (pieces.instances_during, pieces.instances_before) == (
        whole.instances_during, whole.instances_before) == (9_637, 10_840)
    assert_frame_equal(pieces.skew.sort("rank"), whole.skew.sort("rank"))
    assert_frame_equal(pieces.groups, whole.groups)
    assert_frame_equal(pieces.own, whole.own)
    assert pieces.groups.height == 13 and pieces.own["rank"].to_list() == list(range(8))
    # the throttled rank computes longest relative to its peers, and arrives last most
    assert pieces.own.sort("relative")["rank"][-1] == 3
    assert pieces.skew.sort("last_share")["rank"][-1] == 3


def test_calls_without_end_times_have_no_own_time(job, tmp_path):
    start, end = job.span_ns
    pl.read_ipc(job.gap_parts[0]).clear().write_ipc(tmp_path / "none.arrow")
    issue_only = replace(job, gap_parts=[str(tmp_path / "none.arrow")],
                         any_gap=job.any_gap.clear())
    middle = start + (end - start) // 2
    [timing] = episode_timings(issue_only, [Window(middle, end, start, middle)], job.ranks)
    assert timing.own is None and timing.instances_during > 0


def _assert_timing_equal(one, other) -> None:
    assert (one.instances_during, one.instances_before) == (other.instances_during,
                                                            other.instances_before)
    for name in ("skew", "groups", "own"):
        assert_frame_equal(getattr(one, name), getattr(other, name))


def test_windows_read_together_give_what_each_gives_alone(job):
    """Windows ending an iteration apart (detectors that agree on an episode but not to the
    iteration), and one inside them, read each part once for all."""
    start, end = job.span_ns
    third = (end - start) // 3
    windows = [Window(start + third, start + 2 * third + shift, start + shift // 2,
                      start + third)
               for shift in (0, third // 40, -third // 40)]
    ranks = job.ranks.with_columns(pl.col("cuda_dev").alias("gpu"))
    together = episode_timings(job, windows, ranks)
    for window, timing in zip(windows, together, strict=True):
        _assert_timing_equal(timing, episode_timings(job, [window], ranks)[0])
    assert len({t.instances_during for t in together}) == 3


def test_only_windows_that_nearly_coincide_are_read_together():
    episode = Window(1_000, 2_000, 0, 1_000)  # reads 2,000 ns
    later_end = Window(1_000, 2_100, 0, 1_000)
    far = Window(5_000, 6_000, 4_000, 5_000)
    longer = Window(1_000, 2_000 + int(2_000 * (SHARED_READ - 1)) + 1, 0, 1_000)
    assert shared_reads([far, later_end, episode]) == [[episode, later_end], [far]]
    assert shared_reads([episode, longer]) == [[episode], [longer]]
    # a group grows while it spans little more than its shortest member, not link by link
    chain = [Window(1_000 + 300 * k, 2_000 + 300 * k, 300 * k, 1_000 + 300 * k) for k in range(4)]
    assert shared_reads(chain) == [chain[:2], chain[2:]]

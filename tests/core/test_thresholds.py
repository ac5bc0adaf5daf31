"""One definition of a fail-slow (x1.10 over >= 20 iterations) and of the warm-up, read by
detection, attribution, scoring and the synthesizer's labels."""

from __future__ import annotations

import polars as pl

from tracekit.core import schema, thresholds
from tracekit.core.thresholds import FAIL_SLOW_MIN_ITERATIONS, FAIL_SLOW_RATIO, is_fail_slow


def test_the_definition_on_numbers_and_columns():
    assert (FAIL_SLOW_RATIO, FAIL_SLOW_MIN_ITERATIONS, thresholds.WARMUP_ITERATIONS) == (
        1.10, 20, 20)
    assert is_fail_slow(1.10, 20) and not is_fail_slow(1.09, 500) and not is_fail_slow(3.0, 19)
    frame = pl.DataFrame({"slowdown": [1.10, 1.09, 3.0], "iterations": [20, 500, 19]})
    assert frame.select(is_fail_slow(pl.col("slowdown"), pl.col("iterations")))[
        "slowdown"].to_list() == [True, False, False]


def test_every_stage_reads_the_same_definition():
    from tracekit import attribute
    from tracekit.detect import episodes, peers, spans
    from tracekit.synth.faults import LabelPolicy

    policy = LabelPolicy()
    assert (1 + policy.min_slowdown, policy.min_iterations) == (FAIL_SLOW_RATIO,
                                                               FAIL_SLOW_MIN_ITERATIONS)
    assert episodes.WARMUP_ITERATIONS == attribute.WARMUP_ITERATIONS == \
        thresholds.WARMUP_ITERATIONS
    assert spans.FAIL_SLOW_MIN_ITERATIONS == peers.FAIL_SLOW_MIN_ITERATIONS == \
        FAIL_SLOW_MIN_ITERATIONS


def test_scoring_judges_a_label_without_its_flag_by_the_definition():
    """Labels whose ``fail_slow`` is unknown: x1.2 over 20 iterations is positive, x1.2 over 19
    and x1.05 over 100 are not, and one without severity or iterations counts as before."""
    from tracekit.evaluate.scoring import job_outcomes

    labels = schema.conform("labels", pl.DataFrame({
        "job": ["a", "b", "c", "d"], "episode": [1, 1, 1, 1], "fail_slow": [None] * 4,
        "start_iteration": [100, 100, 100, None], "end_iteration": [119, 118, 199, None],
        "severity": [1.2, 1.2, 1.05, None]},
        schema_overrides={"episode": pl.Int32, "fail_slow": pl.Boolean}))
    jobs = pl.DataFrame({"job": ["a", "b", "c", "d"], "category": "all"})
    episodes = schema.table("episodes").empty().with_columns(pl.lit("x").alias("detector"))
    outcomes = job_outcomes(jobs, labels, episodes, detectors=["x"])
    assert outcomes.sort("job")["positive"].to_list() == [True, False, False, True]

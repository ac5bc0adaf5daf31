"""Thresholds that more than one stage judges by, named once so that detection, attribution,
scoring and the synthesizer's labels cannot drift apart."""

FAIL_SLOW_RATIO = 1.10
"""A fail-slow makes the job at least 10 % slower than its healthy level (Greyhound's BOCD+V
threshold), judged over the whole slow stretch."""

FAIL_SLOW_MIN_ITERATIONS = 20
"""... for at least 20 iterations: a slow stretch ending sooner is a disturbance (a run of GC
pauses, a checkpoint), whatever its level. Counted in iterations, not logged points: a log
that prints every 10th iteration holds a 20-iteration fail-slow in 2 points."""

WARMUP_ITERATIONS = 20
"""The job's first iterations (compilation, NCCL connection set-up, allocator growth, autotuning)
are its warm-up: never a fail-slow, never a healthy baseline. Equal to the change-point
detectors' warm-up window (``Bocd.warmup``)."""

SUSPECT_RATIO = FAIL_SLOW_RATIO
"""Greyhound's profiling threshold: more than 10 % over the comparable cluster's median, the
same 10 % as a fail-slow."""


def is_fail_slow(slowdown, iterations):
    """Whether a slow stretch of ``iterations`` iterations at ``slowdown`` x the healthy level
    is a fail-slow by the definition above: numbers, arrays or polars expressions."""
    return (slowdown >= FAIL_SLOW_RATIO) & (iterations >= FAIL_SLOW_MIN_ITERATIONS)

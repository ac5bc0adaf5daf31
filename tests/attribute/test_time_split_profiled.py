"""Verdicts of the time split on real PyTorch profiler traces: multi-process gloo jobs run
under ``torch.profiler`` by :mod:`tracekit.synth.profiled`, balanced or with one slow rank
(extra compute, a data-loader sleep, a delayed send), ingested and analysed end to end.

The slowdowns are clear fail-slows (four times the work, 100 ms sleeps in steps of tens of ms).
The ranks of these CPU jobs share the machine with everything else running on it, so a
balanced job is balanced as run only when the scheduler held no rank back more than the
others: on a busy machine it did (one rank's threads waited 30 % of a step longer for a CPU,
and its trace rightly shows it slower). The balanced case runs again while its verdict names
a rank, quoting that count (:class:`ProfiledRun.held_s`), which the operating system keeps but
which does not tell every rank a run slowed: on 2 cores it once showed the named rank 8 % of
an iteration less held back than its peer. The balanced and compute cases use 1024-wide
layers; with small ones the operators are short beside Python's dispatch between them, so
extra passes show as gaps on the CPU timeline rather than as compute. The balanced job
computes on batches of 256, so the gradient all-reduce (12 MB through gloo's worker threads,
whose scheduling the count sees less well than the computing thread's) is a small part of a
step: with batches of 64, 4 of 5 runs on a machine at 9-14 runnable processes per core named
a rank 10-13 % of a step slower, its own communication or compute grown, that the run delays
did not show held back.
"""

from __future__ import annotations

import statistics
import warnings

import pytest

from tracekit.pipeline.analyze import analyze

pytest.importorskip("torch", reason="torch is not installed (the gpu extra): no profiled jobs")
from tracekit.synth.profiled import ProfiledJob, run_profiled_job  # noqa: E402

SLOW = {
    "compute": (ProfiledJob(world_size=2, steps=4, slow_rank=1, slow_kind="compute",
                            slow_factor=4, hidden=1024), "rank:1", ("compute", "slow-compute")),
    "data": (ProfiledJob(world_size=3, steps=4, slow_rank=2, slow_kind="data", slow_ms=100),
             "rank:2", ("compute", "host-bound")),
    "send": (ProfiledJob(world_size=3, steps=4, slow_rank=0, slow_kind="send", slow_ms=100),
             "rank:0", ("communication", "late-send")),
    "send-middle": (ProfiledJob(world_size=3, steps=4, slow_rank=1, slow_kind="send",
                                slow_ms=100), "rank:1", ("communication", "late-send")),
}
BALANCED = ProfiledJob(world_size=2, steps=6, hidden=1024, batch=256)
ATTEMPTS = 3
"""Runs of the balanced job until one is found balanced."""


@pytest.mark.parametrize("case", list(SLOW))
def test_analyze_names_the_slow_rank_and_what_grew(tmp_path, case):
    job, target, kind_cause = SLOW[case]
    run_profiled_job(job, tmp_path / "traces")
    verdict = analyze([tmp_path / "traces"], tmp_path / "ds", write_job_report=False).time_split
    assert verdict.target == target, verdict.evidence
    assert (verdict.kind, verdict.cause) == kind_cause, verdict.evidence
    assert f"rank {target.removeprefix('rank:')}" in verdict.evidence


def test_a_balanced_job_names_no_rank_the_scheduler_did_not_hold_back(tmp_path):
    """A balanced job's verdict says so. A run the verdict finds unbalanced is run again (at
    most :data:`ATTEMPTS`), with the scheduler's count in the warning: a rank can run slower
    than its peer on a busy machine, held back or slowed by what the count does not see (on
    2 cores, one rank named 11-12 % slower with 4 % more run delay than its peer, and once with
    8 % less: the count does not say which rank a run slowed, so it cannot excuse or convict
    the verdict). A verdict that names a rank in every run is a false alarm, not the
    machine."""
    seen = []
    for attempt in range(ATTEMPTS):
        run = run_profiled_job(BALANCED, tmp_path / f"traces{attempt}")
        verdict = analyze([tmp_path / f"traces{attempt}"], tmp_path / f"ds{attempt}",
                          write_job_report=False).time_split
        iteration_s = verdict.per_rank["duration_s"].median()
        held = run.held_s if None not in run.held_s.values() else dict.fromkeys(run.held_s, 0.)
        excess = {rank: (delay - statistics.median(d for r, d in held.items() if r != rank))
                  / iteration_s for rank, delay in held.items()}
        worst = max(excess, key=excess.get)
        seen.append(f"run {attempt}: {verdict.evidence}; run delay per step {held}")
        if verdict.target is None:
            assert (verdict.kind, verdict.cause) == ("unknown", "none"), seen[-1]
            assert verdict.evidence.startswith("balanced"), seen[-1]
            return
        warnings.warn(f"a balanced run named {verdict.target} (rank {worst} held back "
                      f"{excess[worst]:+.0%} of an iteration): {seen[-1]}", stacklevel=1)
    pytest.fail("every run of the balanced job named a rank: " + " | ".join(seen))

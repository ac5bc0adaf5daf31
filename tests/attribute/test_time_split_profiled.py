"""Verdicts of the time split on real PyTorch profiler traces: multi-process gloo jobs run
under ``torch.profiler`` by :mod:`tracekit.synth.profiled`, balanced or with one slow rank
(extra compute, a data-loader sleep, a delayed send), ingested and analysed end to end.

The slowdowns are clear fail-slows (four times the work, 100 ms sleeps in steps of tens of ms):
the ranks of these CPU jobs share the machine with everything else running on it, and
scheduling noise moves a balanced rank's own time by up to ~9 % of a step, and by a quarter
of a 6 ms step on a loaded machine. The balanced and compute cases use 1024-wide layers (steps
of ~60 ms, where the same noise is a few per cent); with small ones the operators are short
beside Python's dispatch between them, so extra passes show as gaps on the CPU timeline rather
than as compute.
"""

from __future__ import annotations

import os

import pytest

from tracekit.pipeline.analyze import analyze

pytest.importorskip("torch", reason="torch is not installed (the gpu extra): no profiled jobs")
from tracekit.synth.profiled import ProfiledJob, run_profiled_job  # noqa: E402

CASES = {
    "balanced": (ProfiledJob(world_size=2, steps=8, hidden=1024), None, None),
    "compute": (ProfiledJob(world_size=2, steps=4, slow_rank=1, slow_kind="compute",
                            slow_factor=4, hidden=1024), "rank:1", ("compute", "slow-compute")),
    "data": (ProfiledJob(world_size=3, steps=4, slow_rank=2, slow_kind="data", slow_ms=100),
             "rank:2", ("compute", "host-bound")),
    "send": (ProfiledJob(world_size=3, steps=4, slow_rank=0, slow_kind="send", slow_ms=100),
             "rank:0", ("communication", "late-send")),
    "send-middle": (ProfiledJob(world_size=3, steps=4, slow_rank=1, slow_kind="send",
                                slow_ms=100), "rank:1", ("communication", "late-send")),
}


@pytest.mark.parametrize("case", list(CASES))
def test_analyze_names_the_slow_rank_and_what_grew(tmp_path, case):
    job, target, kind_cause = CASES[case]
    if target is None and len(os.sched_getaffinity(0)) <= job.world_size:
        pytest.skip(f"a balanced job needs a core per rank and one for this process "
                    f"({job.world_size + 1}): on {len(os.sched_getaffinity(0))} the scheduler "
                    "makes one rank up to x2 slower, and its trace says so")
    run_profiled_job(job, tmp_path / "traces")
    result = analyze([tmp_path / "traces"], tmp_path / "ds", write_job_report=False)
    verdict = result.time_split
    assert verdict.target == target, verdict.evidence
    if target is None:
        assert (verdict.kind, verdict.cause) == ("unknown", "none")
        assert verdict.evidence.startswith("balanced")
    else:
        assert (verdict.kind, verdict.cause) == kind_cause, verdict.evidence
        assert f"rank {target.removeprefix('rank:')}" in verdict.evidence

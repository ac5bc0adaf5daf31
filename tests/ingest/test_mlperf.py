"""MLPerf Training logs: the real GPT-3 log's steps, step times and events."""

from __future__ import annotations

import polars as pl
import pytest

from tracekit.ingest.base import Chunk, Source
from tracekit.ingest.mlperf import MlperfLogReader

READER = MlperfLogReader()


@pytest.fixture(scope="module")
def gpt3(real_dir):
    path = real_dir / "mlperf-gpt3" / "raw_eos_n64_gpt3_result_0.txt"
    return path.read_bytes()


def read(data: bytes) -> Chunk:
    """All chunks of the source merged (a newline-less last line comes as its own chunk)."""
    chunks = list(READER.read(Source.from_bytes("result_0.txt", data), {}))
    return Chunk(
        tables={name: pl.concat([c.tables[name] for c in chunks]) for name in chunks[0].tables},
        quarantine=pl.concat([c.quarantine for c in chunks]),
        lines=sum(c.lines for c in chunks), skipped=sum(c.skipped for c in chunks),
    )


def test_real_log_step_count_and_median_step_time(gpt3):
    iterations = read(gpt3).tables["iterations"]
    assert iterations.height == 288
    assert iterations["iteration"].to_list() == list(range(1, 289))
    assert iterations["duration_s"].median() == 11.045302867889404
    first = iterations.row(0, named=True)
    assert first["t_end_ns"] == 1696466368958_000_000
    assert first["t_start_ns"] == 1696466368958_000_000 - 11_396_877_766
    assert (first["rank"], first["source"], first["quality"]) == (None, "framework", "ok")


def test_real_log_events(gpt3):
    chunk = read(gpt3)
    events = chunk.tables["training_events"]
    counts = dict(events.group_by("event").len().iter_rows())
    assert (counts["run_start"], counts["run_stop"], counts["block_start"],
            counts["block_stop"], counts["eval_accuracy"]) == (1, 1, 24, 24, 24)
    accuracy = events.filter(pl.col("event") == "eval_accuracy")
    assert accuracy["value"][0] == 2.75110125541687
    assert (chunk.lines, chunk.skipped, chunk.quarantine.height) == (1111, 0, 0)
    assert events.height + 288 == 1111


def test_torn_record_quarantined_and_other_lines_skipped():
    log = (
        b"starting job on 64 nodes\n"
        b':::MLLOG {"namespace": "", "time_ms": 1000, "event_type": "POINT_IN_TIME", "key": '
        b'"tracked_stats", "value": {"train_step_timing": 2.5}, "metadata": {"step": 8}}\n'
        b':::MLLOG {"namespace": "", "time_ms": 3500, "event_type": "POINT_IN_TIME", "key": '
        b'"tracked_stats", "value": {"train_step_timing": NaN}, "metadata": {"step": 16}}\n'
        b':::MLLOG {"namespace": "", "time_ms": 6000, "event_type": "POINT_IN_TIME", "key": "tra'
    )
    chunk = read(log)
    assert chunk.quarantine.select("line_no", "reason").rows() == [
        (4, "truncated or invalid MLLOG record")]
    assert chunk.skipped == 1
    iterations = chunk.tables["iterations"]
    assert iterations.select("iteration", "duration_s").rows() == [(1, 2.5), (2, None)]


def test_sniff(gpt3, formats_dir):
    assert READER.sniff(Source.from_bytes("r.txt", gpt3))
    log = formats_dir / "megatron_train.log"
    assert not READER.sniff(Source.from_bytes(log.name, log.read_bytes()))


def test_result_file_with_the_frameworks_own_lines_is_an_mlperf_log():
    """A submission's result file is the job's whole stdout: srun -l labels, NeMo logger lines
    (nemo/utils/formatters/base.py) and progress bars around the MLLOG records (these two from
    mlcommons/training_results_v3.1 NVIDIA/results/eos_n64_ngc23.09_nemo/gpt3/result_0.txt).
    It is an MLPerf log, not a NeMo one."""
    from tracekit.ingest import registry

    record = ('0: :::MLLOG {"namespace": "", "time_ms": %d, "event_type": "POINT_IN_TIME", '
              '"key": "tracked_stats", "value": {"train_step_timing": %s}, "metadata": {"file": '
              '"/workspace/llm/custom_callbacks.py", "lineno": 277, "step": %d}}')
    lines = [
        "0: [NeMo I 2023-10-05 00:39:28 exp_manager:394] Experiments will be logged at /results",
        record % (1696466368958, "11.396877765655518", 4194304),
        "0: Epoch 0: :   0%|          | 1/288 [00:11<55:00, reduced_train_loss=10.90, "
        "global_step=0.000, consumed_samples=2048.0, train_step_timing in s=11.40]",
        record % (1696466380017, "11.039475679397583", 8388608),
    ]
    data = ("\n".join(lines) + "\n").encode()
    source = Source.from_bytes("result_0.txt", data)
    assert registry.sniff(source).format == "mlperf-log"
    chunk = read(data)
    iterations = chunk.tables["iterations"]
    assert iterations["iteration"].to_list() == [1, 2]
    assert iterations["duration_s"].to_list() == pytest.approx([11.3968778, 11.0394757])
    assert (chunk.lines, chunk.skipped) == (4, 2)

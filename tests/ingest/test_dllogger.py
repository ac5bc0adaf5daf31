"""DLLogger JSON lines (NeMo's dllogger.json): step times, events, refused records."""

from __future__ import annotations

import json

import polars as pl
import pytest

from tracekit.ingest import registry
from tracekit.ingest.base import Source
from tracekit.ingest.dllogger import DlloggerReader

READER = DlloggerReader()


def log_record(timestamp: str, step, data: dict) -> str:
    """dllogger/logger.py JSONStreamBackend.log (NVIDIA/dllogger): "DLLL {}" of json.dumps of a
    dict of timestamp (str of the epoch seconds), datetime, elapsedtime, type "LOG", step,
    data."""
    return "DLLL " + json.dumps({"timestamp": timestamp, "datetime": "2025-02-10 17:58:51",
                                 "elapsedtime": "1750.205571", "type": "LOG", "step": step,
                                 "data": data})


def metadata_record(timestamp: str, metric: str) -> str:
    """JSONStreamBackend.metadata: timestamp, elapsedtime, datetime, type "METADATA", metric,
    metadata."""
    return "DLLL " + json.dumps({"timestamp": timestamp, "elapsedtime": "0.0",
                                 "datetime": "2025-02-10 17:29:41", "type": "METADATA",
                                 "metric": metric, "metadata": {"unit": "s"}})


def read(text: str):
    chunks = list(READER.read(Source.from_bytes("dllogger.json", text.encode()), {}))
    return {name: pl.concat([c.tables[name] for c in chunks])
            for name in ("iterations", "training_events")}, chunks


def test_nemo_step_records_are_iterations_and_the_rest_events():
    # NeMo's metrics as its docs show a dllogger.json record (reduced_train_loss, lr,
    # global_step, consumed_samples, train_backward_timing in s, train_step_timing in s, epoch)
    lines = [
        metadata_record("1739208581.5", "train_step_timing in s"),
        log_record("1739208581.6", "PARAMETER", {"seq_length": 4096}),
        log_record("1739210331.717398", 16, {
            "reduced_train_loss": 10.91420841217041, "lr": 1.2000000424450263e-06,
            "global_step": 16.0, "consumed_samples": 34272.0,
            "train_backward_timing in s": 4.649162292480469e-05,
            "train_step_timing in s": 92.28738164901733, "epoch": 0}),
        log_record("1739210424.5", 17, {"train_step_timing in s": float("nan")}),
        log_record("1739210430", 17, {"val_loss": 10.2}),
        '[NeMo I 2025-02-10 17:29:41 exp_manager:396] not a record',
        log_record("1739210440.25", 18, {"train_step_timing in s": 9.5})[:60],
    ]
    text = "\n".join(lines) + "\n"
    assert READER.sniff(Source.from_bytes("dllogger.json", text.encode()))
    assert registry.sniff(Source.from_bytes("dllogger.json", text.encode())) is not None
    tables, chunks = read(text)
    iterations = tables["iterations"]
    assert iterations.select("iteration", "t_end_ns", "quality").rows() == [
        (16, 1739210331_717398000, "ok"), (17, 1739210424_500000000, "ok")]
    assert iterations["duration_s"].to_list() == [pytest.approx(92.28738164901733), None]
    assert iterations["t_start_ns"][0] == 1739210331_717398000 - 92_287_381_649
    events = tables["training_events"]
    assert events.select("event", "iteration", "ts_ns").rows() == [
        ("metadata", None, 1739208581_500000000), ("log", None, 1739208581_600000000),
        ("log", 17, 1739210430_000000000)]
    assert json.loads(events["detail"][2])["data"] == {"val_loss": 10.2}
    [chunk] = chunks
    assert chunk.quarantine.select("line_no", "reason").rows() == [
        (7, "truncated or invalid DLLogger record")]
    assert (chunk.lines, chunk.skipped) == (7, 1)
    assert chunk.notes == ["1 values were not finite numbers (nan, inf, N/A) and are kept as "
                           "null: train_step_timing in s x1"]


@pytest.mark.parametrize("text", ["DLLL not json\n", ":::MLLOG {}\n", "step,duration_s\n"])
def test_sniff_needs_a_dllogger_record(text):
    assert not READER.sniff(Source.from_bytes("x.json", text.encode()))

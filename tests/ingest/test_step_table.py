"""Per-worker step tables: the real Alibaba PAI table and mapped generic CSVs."""

from __future__ import annotations

import polars as pl
import pytest

from tracekit.core.dataset import SAMPLE_SECONDS, open_dataset
from tracekit.core.errors import InputError
from tracekit.ingest.base import Source
from tracekit.ingest.pipeline import ingest
from tracekit.ingest.step_table import StepTableReader

READER = StepTableReader()


def read(data: bytes, **options: str):
    (chunk,) = READER.read(Source.from_bytes("steps.csv", data), options)
    return chunk


@pytest.fixture(scope="module")
def pai(real_dir):
    return (real_dir / "alibaba-pai-minibatch" / "job_2_norm.csv").read_bytes()


def test_pai_workers_and_steps(pai):
    chunk = read(pai)
    iterations = chunk.tables["iterations"]
    per_worker = dict(iterations.group_by("rank").len().sort("rank").iter_rows())
    assert per_worker == {0: 250, 1: 239, 2: 239, 3: 239, 4: 239, 5: 239, 6: 239, 7: 239,
                          8: 239, 9: 239}
    assert iterations.filter(pl.col("rank") == 0)["iteration"].head(3).to_list() == [1, 11, 21]
    assert iterations.row(2, named=True)["duration_s"] == 743.0
    assert set(iterations["quality"]) == {"normalised"}
    assert iterations["t_end_ns"].null_count() == iterations.height
    assert chunk.quarantine.select("line_no", "reason", "raw").rows() == [
        (2392, "duplicate worker and step (first row kept)", "2390,3,20,2381,851")]
    assert (chunk.lines, chunk.skipped) == (2403, 1)


def test_generic_table_with_mapping_units_and_times():
    csv = (
        b"host,node_rank,global_step,step_ms,ended_at\n"
        b"a,0,1,1500.0,1700000000.5\n"
        b"a,0,2,nan,1700000002.0\n"
        b"b,1,1,1490.0\n"
        b"b,worker-1,2,1510.0,1700000002.0\n"
    )
    chunk = read(csv, worker="node_rank", step="global_step", duration="step_ms",
                 duration_unit="ms", time="ended_at", time_unit="s")
    rows = chunk.tables["iterations"].select("rank", "iteration", "t_start_ns", "t_end_ns",
                                             "duration_s").rows()
    assert rows == [(0, 1, 1699999999_000_000_000, 1700000000_500_000_000, 1.5),
                    (0, 2, None, 1700000002_000_000_000, None),
                    (1, 2, 1700000000_490_000_000, 1700000002_000_000_000, 1.51)]
    assert chunk.quarantine.select("line_no", "reason").rows() == [
        (4, "expected 5 fields, found 4")]
    assert chunk.notes == ["1 values were not finite numbers (nan, inf, N/A) and are kept as "
                           "null: step_ms x1"]


def test_sniff_and_missing_mapping(pai, formats_dir):
    assert READER.sniff(Source.from_bytes("job_2_norm.csv", pai))
    assert READER.sniff(Source.from_bytes("s.csv", b"rank,step,duration_s\n0,1,2.0\n"))
    hook = b"event_id,t_call_ns,duration_ns\n"
    assert not READER.sniff(Source.from_bytes("h.csv", hook))
    with pytest.raises(InputError, match="duration_unit"):
        read(b"rank,step,took\n0,1,2\n", duration="took")
    with pytest.raises(InputError, match="no column 'nope'"):
        read(b"rank,step,duration_s\n0,1,2\n", worker="nope")


def test_values_no_column_can_hold_are_quarantined_with_their_line():
    chunk = read(b"rank,step,duration_s,t\n0,1,0.5,1700000000\n9999999999,2,0.5,1700000001\n"
                 b"0,3,1e300,1700000002\n0,4,-3,1700000003\n0,5,0.5,1e300\n0,6,0.5,-1e30\n"
                 b"0,7,nan,1700000004\n", time="t")
    assert chunk.quarantine.select("line_no", "reason").rows() == [
        (3, "worker id 9999999999 is out of range"), (4, "duration 1e300 is out of range"),
        (5, "duration -3 is out of range"), (6, "time 1e300 is out of range"),
        (7, "time -1e30 is out of range")]
    iterations = chunk.tables["iterations"]
    assert iterations["iteration"].to_list() == [1, 7]
    assert iterations["duration_s"].to_list() == [0.5, None]  # nan: kept as null, with a note
    assert iterations.height + chunk.skipped + chunk.quarantine.height == chunk.lines == 8


def test_pai_header_with_a_quoted_index_name():
    """polars and pandas write the unnamed index column as ``""``: still the PAI preset, and
    the header is not read as a row."""
    data = b'"",worker,gpu,time,batch_time_norm\n0,0,25,1,700\n1,1,25,1,712\n'
    assert READER.sniff(Source.from_bytes("job.csv", data))
    chunk = read(data)
    assert chunk.tables["iterations"].select("rank", "iteration", "duration_s").rows() == [
        (0, 1, 700.0), (1, 1, 712.0)]
    assert chunk.quarantine.is_empty()
    assert (chunk.lines, chunk.skipped) == (3, 1)
    assert chunk.notes == [
        "column time is the sample time in seconds (one row per worker every few seconds, not "
        "per step): iteration numbers are seconds",
        "durations are normalised (unit-less), stored as-is in duration_s with quality "
        "'normalised'"]
    assert read(data, step="gpu").notes[:1] == [  # another step column: no such note
        "durations are normalised (unit-less), stored as-is in duration_s with quality "
        "'normalised'"]
    assert (chunk.step_axis, read(data, step="gpu").step_axis) == (SAMPLE_SECONDS, None)


def test_sample_seconds_are_recorded_with_the_source(tmp_path):
    """The dataset knows its step axis from the source that wrote its iterations."""
    (tmp_path / "job_1_norm.csv").write_text(",worker,gpu,time,batch_time_norm\n0,0,25,1,700\n")
    (tmp_path / "steps.csv").write_text("worker,step,duration_s\n0,1,1.0\n")
    ingest([tmp_path / "job_1_norm.csv"], tmp_path / "pai")
    ingest([tmp_path / "steps.csv"], tmp_path / "steps")
    assert open_dataset(tmp_path / "pai").step_axis() == SAMPLE_SECONDS
    assert open_dataset(tmp_path / "steps").step_axis() is None


def test_parquet_table_reads_like_its_csv_with_typed_times(tmp_path):
    """A scheduler's per-step export written by polars / pandas as Parquet: datetime and
    duration columns carry their own unit; a bad row is quarantined by its row number."""
    table = pl.DataFrame({
        "Rank": [0, 0, 1, 1],
        "Step": [1, 2, 1, 1],
        "step_time": pl.Series([1.5, 1.25, 1.5, 1.0]).cast(pl.Float64) * 1_000_000,
        "ended": pl.Series(["2025-01-01 00:00:01.5", "2025-01-01 00:00:03", "2025-01-01 "
                            "00:00:01.5", "2025-01-01 00:00:02"]).str.to_datetime(),
    }).with_columns(pl.duration(microseconds=pl.col("step_time")).alias("step_time"))
    path = tmp_path / "steps.parquet"
    table.write_parquet(path)
    source = Source.from_bytes("steps.parquet", path.read_bytes())
    assert READER.sniff(source)
    (chunk,) = READER.read(source, {"time": "ended"})  # the duration column by its type
    t0 = 1_735_689_600_000_000_000  # 2025-01-01 00:00:00 UTC
    assert chunk.tables["iterations"].select("rank", "iteration", "t_start_ns", "t_end_ns",
                                             "duration_s").rows() == [
        (0, 1, t0, t0 + 1_500_000_000, 1.5),
        (0, 2, t0 + 1_750_000_000, t0 + 3_000_000_000, 1.25),
        (1, 1, t0, t0 + 1_500_000_000, 1.5)]
    assert chunk.quarantine.select("line_no", "reason").rows() == [
        (4, "duplicate worker and step (first row kept)")]
    assert (chunk.lines, chunk.skipped) == (4, 0)
    with pytest.raises(InputError, match="not a readable Parquet file"):
        list(READER.read(Source.from_bytes("bad.parquet", b"PAR1garbage"), {}))


def test_job_level_table_without_worker_column():
    """One series for the whole job (e.g. iteration times of the logging rank): rank null,
    repeated steps still quarantined; header names matched in any case."""
    data = b"Iteration,iteration_time_ms\n1,1500\n2,1490\n2,1490\n3,nan\n"
    assert READER.sniff(Source.from_bytes("steps.csv", data))
    chunk = read(data)
    assert chunk.tables["iterations"].select("rank", "iteration", "duration_s").rows() == [
        (None, 1, 1.5), (None, 2, 1.49), (None, 3, None)]
    assert chunk.quarantine.select("line_no", "reason").rows() == [
        (4, "duplicate worker and step (first row kept)")]

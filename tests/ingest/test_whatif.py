"""ByteDance what-if traces: the real trace round-trips through a dataset and the exporter."""

from __future__ import annotations

import json

import polars as pl
import pytest
import yaml
from polars.testing import assert_frame_equal
from typer.testing import CliRunner

from tracekit.cli import app
from tracekit.core.dataset import create_dataset, open_dataset
from tracekit.core.errors import InputError
from tracekit.ingest.base import Source
from tracekit.ingest.pipeline import ingest
from tracekit.ingest.whatif import WhatIfTraceReader, export_whatif


@pytest.fixture(scope="module")
def whatif(real_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("whatif")
    summary = ingest([real_dir / "bytedance-whatif"], folder / "ds")
    return real_dir / "bytedance-whatif", folder, summary


def test_folder_ingest_recognises_every_file(whatif):
    _, _, summary = whatif
    formats = {s.path.rsplit("/", 1)[-1]: (s.format, s.status) for s in summary.sources}
    assert formats == {
        "meta-ST.yaml": ("whatif-meta", "ingested"),
        "ms-ST.json": ("whatif-result", "ingested"),
        "mw-ST.json": ("whatif-result", "ingested"),
        "result-ST.json": ("whatif-result", "ingested"),
        "trace-ST.parquet": ("whatif-trace", "ingested"),
    }
    trace = next(s for s in summary.sources if s.format == "whatif-trace")
    assert trace.rows == {"op_traces": 6784, "iterations": 256}
    assert trace.ranks == 8


def test_per_rank_iterations_match_the_analysers_step_times(whatif):
    original, folder, _ = whatif
    iterations = open_dataset(folder / "ds").table("iterations").collect()
    assert iterations["rank"].n_unique() == 8 and iterations["iteration"].n_unique() == 32
    assert iterations["t_start_ns"].null_count() == iterations.height  # the trace has no clock
    step_time = iterations.group_by("iteration").agg(pl.col("duration_s").max()).sort("iteration")
    expected = json.loads((original / "result-ST.json").read_text())["step_t_base"]
    assert step_time["iteration"].to_list() == sorted(int(s) for s in expected)
    assert step_time["duration_s"].to_list() == pytest.approx(
        [expected[str(s)] for s in step_time["iteration"]], rel=1e-6)


def test_layout_and_op_rows(whatif):
    _, folder, _ = whatif
    dataset = open_dataset(folder / "ds")
    layout = dataset.table("parallel_layout").collect().row(0, named=True)
    assert (layout["world_size"], layout["dp_size"], layout["pp_size"], layout["tp_size"],
            layout["vpp_size"]) == (8, 2, 4, 1, 1)
    assert json.loads(layout["extra_json"]) == {"dsp_size": 1, "run_id": 0, "trial_name": "ST"}
    ops = dataset.table("op_traces").collect()
    first = ops.row(0, named=True)
    assert (first["rank"], first["step"], first["op"], first["micro_batch"]) == (
        0, 23, "backward-compute", 0)
    assert ops.filter(pl.col("op") == "optimizer")["micro_batch"].null_count() == 256


def test_export_round_trips_the_real_trace(whatif):
    original, folder, _ = whatif
    trace_path, meta_path = export_whatif(folder / "ds", folder / "out")
    assert (trace_path.name, meta_path.name) == ("trace-ST.parquet", "meta-ST.yaml")
    before = pl.read_parquet(original / "trace-ST.parquet")
    after = pl.read_parquet(trace_path)
    assert after.schema == before.schema
    as_text = pl.col("optype").cast(pl.String)
    assert_frame_equal(after.with_columns(as_text), before.with_columns(as_text))
    assert yaml.safe_load(meta_path.read_text()) == yaml.safe_load(
        (original / "meta-ST.yaml").read_text())


def test_cli_export_and_error_without_op_traces(whatif, tmp_path):
    _, folder, _ = whatif
    result = CliRunner().invoke(app, ["export-whatif", str(folder / "ds"), "-o",
                                      str(tmp_path / "cli"), "--trial", "mine"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "cli" / "trace-mine.parquet").is_file()
    create_dataset(tmp_path / "empty")
    with pytest.raises(InputError, match="no op_traces"):
        export_whatif(tmp_path / "empty", tmp_path / "x")


def test_exporter_widens_columns_that_overflow_the_published_dtypes(whatif, tmp_path):
    _, folder, _ = whatif
    dataset = open_dataset(folder / "ds")
    ops = dataset.table("op_traces").collect().with_columns(pl.col("micro_batch") + 200)
    wide = create_dataset(tmp_path / "wide")
    wide.write_table("op_traces", ops)
    wide.save_manifest()
    trace_path, _ = export_whatif(tmp_path / "wide", tmp_path / "out", trial="W")
    trace = pl.read_parquet(trace_path)
    assert trace.schema["mb_id"] == pl.Int16 and trace["mb_id"].max() == 203


def test_sniff_and_bad_rows(whatif, tmp_path):
    original, _, _ = whatif
    reader = WhatIfTraceReader()
    path = original / "trace-ST.parquet"
    assert reader.sniff(Source.from_bytes(path.name, path.read_bytes()))
    assert not reader.sniff(Source.from_bytes("x.parquet", b"PAR1 not really"))
    rows = pl.read_parquet(path).head(3).with_columns(
        pl.when(pl.int_range(3) == 1).then(float("nan")).otherwise(pl.col("duration"))
        .cast(pl.Float32).alias("duration"))
    rows.write_parquet(tmp_path / "bad.parquet")
    data = (tmp_path / "bad.parquet").read_bytes()
    chunks = list(reader.read(Source.from_bytes("bad.parquet", data), {}))
    assert chunks[0].tables["op_traces"].height == 2
    assert chunks[-1].quarantine.select("line_no", "reason").rows() == [
        (2, "duration is not a finite number")]

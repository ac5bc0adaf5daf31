"""The dataset store: manifest contents, atomic writes, lazy tables."""

from __future__ import annotations

import json

import polars as pl
import pytest

from tracekit import create_dataset, open_dataset
from tracekit.core import dataset as dataset_module
from tracekit.core import schema
from tracekit.core.dataset import stale_stages
from tracekit.core.errors import InputError, SchemaError


def iterations_frame(n: int, job: str = "job-a") -> pl.DataFrame:
    return pl.DataFrame(
        {
            "job": [job] * n,
            "rank": list(range(n)),
            "iteration": list(range(n)),
            "t_start_ns": [1_000_000_000 * i for i in range(n)],
            "t_end_ns": [1_000_000_000 * (i + 1) for i in range(n)],
            "duration_s": [1.0] * n,
            "source": ["acf"] * n,
            "quality": ["ok"] * n,
        },
        schema=schema.ITERATIONS.schema,
    )


def test_create_then_open_gives_tables_as_lazy_frames(tmp_path):
    dataset = create_dataset(tmp_path / "ds", job="job-a")
    dataset.write_table("iterations", iterations_frame(4))
    dataset.save_manifest()
    opened = open_dataset(tmp_path / "ds")
    assert opened.job == "job-a"
    assert set(opened.tables) == {"iterations"}
    assert isinstance(opened["iterations"], pl.LazyFrame)
    assert opened["iterations"].collect().equals(iterations_frame(4))
    assert opened["collectives"].collect().schema == schema.COLLECTIVES.schema


def test_dataset_is_a_short_repr_and_a_mapping_of_its_tables(tmp_path):
    dataset = create_dataset(tmp_path / "ds", job="job-a")
    dataset.write_table("iterations", iterations_frame(4))
    assert repr(dataset) == f"Dataset({str(tmp_path / 'ds')!r}, job='job-a', tables=['iterations'])"
    assert list(dataset) == ["iterations"] and len(dataset) == 1
    assert "iterations" in dataset
    assert "collectives" not in dataset and "no-such-table" not in dataset


def test_manifest_records_table_rows_span_and_ranks(tmp_path):
    dataset = create_dataset(tmp_path / "ds", job="job-a")
    dataset.write_table("iterations", iterations_frame(5))
    dataset.save_manifest()
    manifest = json.loads((tmp_path / "ds" / "manifest.json").read_text())
    stats = manifest["tables"]["iterations"]
    assert stats["rows"] == 5
    assert stats["ranks"] == 5
    assert (stats["t_min_ns"], stats["t_max_ns"]) == (0, 4_000_000_000)
    assert manifest["job"] == "job-a"
    assert manifest["tracekit_version"]


def test_table_stats_come_from_part_footers_and_only_for_changed_tables(tmp_path, monkeypatch):
    dataset = create_dataset(tmp_path / "ds", job="job-a")
    dataset.write_table("iterations", iterations_frame(5))
    dataset.write_table("episodes", schema.EPISODES.empty())
    read, scanned = [], []
    footer, scan = dataset_module._stats_from_footer, dataset_module._scan
    monkeypatch.setattr(dataset_module, "_stats_from_footer",
                        lambda part: read.append(part.parent.name) or footer(part))
    monkeypatch.setattr(dataset_module, "_scan",
                        lambda name, parts: scanned.append(name) or scan(name, parts))
    dataset.save_manifest()
    assert (read, scanned) == ([], [])  # the writer knows what it wrote
    opened = open_dataset(tmp_path / "ds")
    opened.save_manifest()
    assert read == []  # nothing changed: the totals stand
    opened.manifest["tables"].clear()
    opened.save_manifest()
    assert (sorted(read), scanned) == (["episodes", "iterations"], [])
    read.clear()
    shifted = iterations_frame(5).with_columns(pl.col("t_start_ns", "t_end_ns") + 7)
    opened.write_table("iterations", shifted)
    opened.save_manifest()
    assert (read, scanned) == ([], [])
    assert opened.manifest["tables"]["iterations"]["t_min_ns"] == 7
    assert open_dataset(tmp_path / "ds").manifest["tables"] == opened.manifest["tables"]


def test_a_dataset_from_before_parts_were_listed_reads_the_parts_on_disk(tmp_path):
    """Its parts are adopted (those written by another tool, without footer statistics, are
    scanned) and count in the manifest and in the ranks a stage partitions by."""
    dataset = create_dataset(tmp_path / "ds", job="job-a")
    dataset.write_part("iterations", iterations_frame(3), "new")
    dataset.save_manifest()
    iterations_frame(5).with_columns(pl.col("rank") + 2, pl.col("t_start_ns") * 2).write_parquet(
        tmp_path / "ds" / "iterations" / "old.parquet")
    manifest = json.loads((tmp_path / "ds" / "manifest.json").read_text())
    del manifest["parts"], manifest["tables"]
    (tmp_path / "ds" / "manifest.json").write_text(json.dumps(manifest))
    opened = open_dataset(tmp_path / "ds")
    opened.save_manifest()
    stats = opened.manifest["tables"]["iterations"]
    assert (stats["rows"], stats["ranks"], stats["parts"]) == (8, 7, 2)
    assert (stats["t_min_ns"], stats["t_max_ns"]) == (0, 8_000_000_000)
    assert opened.ranks("iterations") == list(range(7))
    assert set(opened.manifest["parts"]["iterations"].values()) == {"iterations/old",
                                                                    "iterations/new"}


def test_mismatched_frame_is_refused_and_nothing_written(tmp_path):
    dataset = create_dataset(tmp_path / "ds")
    bad = iterations_frame(2).with_columns(pl.col("iteration").cast(pl.Int32))
    with pytest.raises(SchemaError, match="'iterations'.*'iteration'"):
        dataset.write_table("iterations", bad)
    assert not dataset.has_table("iterations")


def test_a_categorical_column_is_stored_as_its_canonical_string(tmp_path):
    import pyarrow.parquet as pq

    dataset = create_dataset(tmp_path / "ds", job="job-a")
    frame = iterations_frame(3).with_columns(pl.col("job", "source").cast(pl.Categorical))
    part = dataset.write_part("iterations", frame, "data")
    assert dataset["iterations"].collect().equals(iterations_frame(3))
    assert pl.read_parquet(part).schema == schema.ITERATIONS.schema
    assert pq.read_schema(part).field("job").type == pq.read_schema(part).field("quality").type
    assert pl.read_parquet_metadata(part)["ARROW:schema"] == \
        dataset_module._canonical_arrow_schema("iterations")
    with pytest.raises(SchemaError, match="'iterations'.*'iteration' has dtype Categorical"):
        dataset.write_part("iterations", frame.with_columns(
            pl.col("iteration").cast(pl.String).cast(pl.Categorical)), "data")


def test_interrupted_write_leaves_previous_table_intact(tmp_path, monkeypatch):
    dataset = create_dataset(tmp_path / "ds")
    dataset.write_table("iterations", iterations_frame(3))

    def crash(self, path, **kwargs):
        with open(path, "wb") as half_written:
            half_written.write(b"PAR1 garbage")
        raise KeyboardInterrupt("power cut")

    monkeypatch.setattr(pl.DataFrame, "write_parquet", crash)
    with pytest.raises(KeyboardInterrupt):
        dataset.write_table("iterations", iterations_frame(10))
    monkeypatch.undo()
    assert dataset["iterations"].collect().height == 3
    leftovers = [p.name.split(".")[0] for p in (tmp_path / "ds" / "iterations").iterdir()]
    assert leftovers == ["data"]


def test_other_job_id_is_refused(tmp_path):
    create_dataset(tmp_path / "ds", job="job-a")
    with pytest.raises(InputError, match="belongs to job 'job-a'"):
        create_dataset(tmp_path / "ds", job="job-b")


def test_open_missing_or_foreign_folder_says_what_is_wrong(tmp_path):
    with pytest.raises(InputError, match="no such dataset folder"):
        open_dataset(tmp_path / "absent")
    (tmp_path / "plain").mkdir()
    with pytest.raises(InputError, match="not a tracekit dataset"):
        open_dataset(tmp_path / "plain")


def test_a_part_written_again_is_listed_in_place_of_the_old_file(tmp_path):
    dataset = create_dataset(tmp_path / "ds", job="job-a")
    first = dataset.write_part("iterations", iterations_frame(2), "rank=1/a")
    dataset.write_part("iterations", iterations_frame(3), "b")
    second = dataset.write_part("iterations", iterations_frame(4), "rank=1/a")
    assert first != second and first.exists()  # a reader of the last manifest may need it
    assert dataset.parts("iterations") == sorted([second, *(tmp_path / "ds" / "iterations").glob(
        "b.*.parquet")])
    assert dataset["iterations"].collect().height == 7
    dataset.write_table("iterations", iterations_frame(1))
    assert [p.name.split(".")[0] for p in dataset.parts("iterations")] == ["data"]


def test_second_writer_waits_then_refuses_with_one_line(tmp_path):
    path = tmp_path / "ds"
    refused = pytest.raises(InputError, match=r"ds: another tracekit run has been writing "
                            r"this dataset for over 0.2 s; wait for it to finish and run this "
                            r"again")
    with dataset_module.dataset_writer(path, "job-a"), refused, dataset_module.writer_lock(
            path, wait_s=0.2):
        pass
    with dataset_module.writer_lock(path, wait_s=0.2):  # released: the next writer gets it
        pass


def test_two_concurrent_writers_keep_both_records(tmp_path):
    """Each writer reads the manifest once it holds the lock, so neither loses the other's."""
    import threading

    path = tmp_path / "ds"

    def write(name: str) -> None:
        with dataset_module.dataset_writer(path, "job-a") as dataset:
            dataset.record_source({"path": name, "sha256": name * 8, "size": 1})
            dataset.save_manifest()

    writers = [threading.Thread(target=write, args=(name,)) for name in "abcd"]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    assert [s["path"] for s in open_dataset(path).manifest["sources"]] == ["a", "b", "c", "d"]


def test_files_the_manifest_does_not_list_are_removed_under_the_lock(tmp_path):
    dataset = create_dataset(tmp_path / "ds", "job-a")
    kept = dataset.write_part("iterations", iterations_frame(3), "kept")
    dataset.save_manifest()
    dataset.write_part("iterations", iterations_frame(3), "unsaved")
    folder = tmp_path / "ds" / "iterations"
    (folder / ".staged-00000.0123456789ab.parquet").write_bytes(b"half")
    (folder / "rank=1").mkdir()
    (folder / "rank=1" / ".tmp-feed-x.parquet").write_bytes(b"half")
    (tmp_path / "ds" / ".tmp-feed-manifest.json").write_text("{")
    scratch = tmp_path / "ds" / ".attribute-0123" / ".tmp-feed-gaps.parquet"  # a stage's, in use
    scratch.parent.mkdir()
    scratch.write_bytes(b"half")
    with dataset_module.writer_lock(tmp_path / "ds"):
        pass
    assert sorted(p.name for p in (tmp_path / "ds").rglob("*") if p.is_file()) == [
        scratch.name, kept.name, "manifest.json"]


def test_target_that_cannot_be_written_is_one_line(tmp_path):
    (tmp_path / "file").write_text("x")
    refused = pytest.raises(InputError, match=r"file/ds: cannot write the dataset: Not a "
                                              r"directory$")
    with refused, dataset_module.dataset_writer(tmp_path / "file" / "ds"):
        pass


def test_full_disk_at_manifest_time_keeps_the_previous_manifest(tmp_path, monkeypatch):
    import errno
    from pathlib import Path

    dataset = create_dataset(tmp_path / "ds", "job-a")
    before = (tmp_path / "ds" / "manifest.json").read_text()

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(self))

    monkeypatch.setattr(Path, "open", full)
    dataset.manifest["sources"].append({"path": "x", "sha256": "0" * 64, "size": 1})
    with pytest.raises(InputError, match=r"\.tmp-[0-9a-f]+-manifest\.json: cannot write the "
                                         r"dataset: the disk is full$"):
        dataset.save_manifest()
    monkeypatch.undo()
    assert (tmp_path / "ds" / "manifest.json").read_text() == before
    assert [p.name for p in (tmp_path / "ds").iterdir()] == ["manifest.json"]


def test_damaged_part_is_one_line_naming_it(tmp_path):
    dataset = create_dataset(tmp_path / "ds", "job-a")
    part = dataset.write_part("iterations", iterations_frame(3), "a")
    dataset.save_manifest()
    part.write_bytes(part.read_bytes()[:-20])
    with pytest.raises(InputError, match=r"iterations/a\.[0-9a-f]{12}\.parquet: damaged "
                                         r"Parquet part \("):
        open_dataset(tmp_path / "ds").ranks("iterations")


def test_a_stage_run_again_marks_the_later_ones_stale_until_they_run(tmp_path):
    dataset = create_dataset(tmp_path / "ds")
    for stage in ("iterations", "detect", "attribute"):
        dataset.record_build(stage, {"engine": "local"})
    assert stale_stages(dataset) == {}
    dataset.record_build("detect", {"engine": "local"})
    assert stale_stages(dataset) == {"attribute": (
        f"detect ran again after it; bring it up to date with `tracekit attribute "
        f"{dataset.path}` or a new `tracekit analyze`")}
    dataset.record_build("iterations", {"engine": "local"})
    assert list(stale_stages(dataset)) == ["detect", "attribute"]
    assert stale_stages(dataset)["attribute"].startswith("detect ran again")  # the first cause
    dataset.record_build("detect", {"engine": "local"})
    dataset.record_build("attribute", {"engine": "local"})
    assert stale_stages(dataset) == {}
    dataset.record_build("ingest", {"engine": "local"}, changed=False)  # every source known
    assert stale_stages(dataset) == {}
    dataset.record_build("ingest", {"engine": "local"})
    assert list(stale_stages(dataset)) == ["iterations", "detect", "attribute"]
    assert stale_stages(dataset)["detect"] == (
        f"new or changed sources were ingested after it; bring it up to date with `tracekit "
        f"detect {dataset.path}` or a new `tracekit analyze`")


def test_a_part_written_before_an_additive_column_reads_it_as_nulls(tmp_path):
    old = schema.conform("episodes", pl.DataFrame({"job": ["j"], "episode": [1]},
                                                  schema_overrides={"episode": pl.Int32}))
    old.drop("inferred").write_parquet(tmp_path / "old.parquet")
    read = dataset_module._scan("episodes", [tmp_path / "old.parquet"]).collect()
    assert read.columns == schema.EPISODES.column_names
    assert read.select("job", "episode", "inferred").rows() == [("j", 1, None)]

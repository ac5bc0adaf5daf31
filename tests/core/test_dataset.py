"""The dataset store: manifest contents, atomic writes, lazy tables."""

from __future__ import annotations

import json

import polars as pl
import pytest

from tracekit import create_dataset, open_dataset
from tracekit.core import dataset as dataset_module
from tracekit.core import schema
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
    assert (sorted(read), scanned) == (["episodes", "iterations"], [])
    read.clear()
    dataset.save_manifest()
    assert read == []
    # same part name, same size: only the rename into place tells the new contents apart
    shifted = iterations_frame(5).with_columns(pl.col("t_start_ns", "t_end_ns") + 7)
    dataset.write_table("iterations", shifted)
    dataset.save_manifest()
    assert (read, scanned) == (["iterations"], [])
    assert dataset.manifest["tables"]["iterations"]["t_min_ns"] == 7
    assert open_dataset(tmp_path / "ds").manifest["tables"] == dataset.manifest["tables"]


def test_parts_without_footer_stats_are_scanned(tmp_path):
    """Parts written before footers carried statistics (or by another tool) still count, in
    the manifest and in the ranks a stage partitions by."""
    dataset = create_dataset(tmp_path / "ds", job="job-a")
    dataset.write_part("iterations", iterations_frame(3), "new")
    iterations_frame(5).with_columns(pl.col("rank") + 2, pl.col("t_start_ns") * 2).write_parquet(
        tmp_path / "ds" / "iterations" / "old.parquet")
    dataset.save_manifest()
    stats = dataset.manifest["tables"]["iterations"]
    assert (stats["rows"], stats["ranks"], stats["parts"]) == (8, 7, 2)
    assert (stats["t_min_ns"], stats["t_max_ns"]) == (0, 8_000_000_000)
    assert dataset.ranks("iterations") == list(range(7))


def test_mismatched_frame_is_refused_and_nothing_written(tmp_path):
    dataset = create_dataset(tmp_path / "ds")
    bad = iterations_frame(2).with_columns(pl.col("iteration").cast(pl.Int32))
    with pytest.raises(SchemaError, match="'iterations'.*'iteration'"):
        dataset.write_table("iterations", bad)
    assert not dataset.has_table("iterations")


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
    leftovers = [p.name for p in (tmp_path / "ds" / "iterations").iterdir()]
    assert leftovers == ["data.parquet"]


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


def test_remove_parts_takes_only_the_prefix_at_any_depth_except_those_kept(tmp_path):
    dataset = create_dataset(tmp_path / "ds", job="job-a")
    frame = iterations_frame(2)
    names = ["aaaa-00000", "aaaa-00001", "rank=1/aaaa-00000", "rank=1/bbbb-00000", "bbbb-00000"]
    paths = {name: dataset.write_part("iterations", frame, name) for name in names}
    dataset.remove_parts("iterations", "aaaa", keep={paths["aaaa-00000"]})
    assert [str(p.relative_to(tmp_path / "ds" / "iterations")) for p in dataset.parts("iterations")
            ] == ["aaaa-00000.parquet", "bbbb-00000.parquet", "rank=1/bbbb-00000.parquet"]
    dataset.remove_parts("collectives", "aaaa")  # no folder: nothing to do


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


def test_staged_files_of_dead_runs_are_removed_under_the_lock(tmp_path):
    dataset = create_dataset(tmp_path / "ds", "job-a")
    dataset.write_part("iterations", iterations_frame(3), "kept")
    folder = tmp_path / "ds" / "iterations"
    (folder / ".staged-0123456789ab-00000.parquet").write_bytes(b"half")
    (folder / "rank=1").mkdir()
    (folder / "rank=1" / ".tmp-feed-x.parquet").write_bytes(b"half")
    with dataset_module.writer_lock(tmp_path / "ds"):
        pass
    assert sorted(p.name for p in folder.rglob("*") if p.is_file()) == ["kept.parquet"]


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

    monkeypatch.setattr(Path, "write_text", full)
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
    part.write_bytes(part.read_bytes()[:-20])
    with pytest.raises(InputError, match=r"iterations/a\.parquet: damaged Parquet part \("):
        dataset.save_manifest()

"""The ingest loop every format shares: manifest records, idempotence, appends, failures."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
import time

import pytest

from tests.ingest.collective_helpers import file_source, read_all
from tracekit import open_dataset
from tracekit.core.errors import InputError
from tracekit.ingest import base, hook_csv, pipeline, sources
from tracekit.ingest.base import SNIFF_BYTES, Source
from tracekit.ingest.hook_csv import HEADER
from tracekit.ingest.pipeline import ingest

T0 = 1_700_000_000_000_000_000


def hook_log(rank: int, calls: int) -> str:
    rows = [
        f"{i},{T0 + i * 1_000_000},5000,host-a,{100 + rank},{rank},0,0xc0{rank},2,{i},"
        f"AllReduce,256,7,0x1,0x1,-1"
        for i in range(calls)
    ]
    return "\n".join([HEADER, *rows]) + "\n"


@pytest.fixture
def dump(tmp_path):
    folder = tmp_path / "dump"
    folder.mkdir()
    (folder / "rank0.csv").write_text(hook_log(0, 5))
    (folder / "rank1.csv").write_text(hook_log(1, 3) + "7,123\n")
    return folder


def test_manifest_records_each_source_with_hash_and_counts(dump, tmp_path):
    summary = ingest([dump], tmp_path / "ds")
    assert [s.status for s in summary.sources] == ["ingested", "ingested"]
    manifest = json.loads((tmp_path / "ds" / "manifest.json").read_text())
    by_name = {s["path"].rsplit("/", 1)[-1]: s for s in manifest["sources"]}
    rank1 = by_name["rank1.csv"]
    assert rank1["sha256"] == hashlib.sha256((dump / "rank1.csv").read_bytes()).hexdigest()
    assert rank1["size"] == (dump / "rank1.csv").stat().st_size
    assert rank1["format"] == "hook-csv"
    assert rank1["rows"] == {"collectives": 3}
    assert (rank1["lines"], rank1["skipped"], rank1["quarantined"]) == (5, 1, 1)
    assert manifest["tables"]["collectives"]["rows"] == 8
    assert manifest["tables"]["collectives"]["ranks"] == 2


def test_reingest_is_idempotent_and_new_files_only_append(dump, tmp_path):
    ingest([dump], tmp_path / "ds")
    before = open_dataset(tmp_path / "ds")["collectives"].collect().sort("rank", "seq")
    again = ingest([dump], tmp_path / "ds")
    assert [s.status for s in again.sources] == ["unchanged", "unchanged"]
    (dump / "rank2.csv").write_text(hook_log(2, 4))
    third = ingest([dump], tmp_path / "ds")
    assert [s.status for s in third.sources] == ["unchanged", "unchanged", "ingested"]
    after = open_dataset(tmp_path / "ds")["collectives"].collect().sort("rank", "seq")
    assert after.filter(after["rank"] < 2).equals(before)
    assert after.height == before.height + 4


def test_duplicate_file_under_another_name_adds_no_rows(dump, tmp_path):
    shutil.copy(dump / "rank0.csv", dump / "rank0-copy.csv")
    ingest([dump], tmp_path / "ds")
    assert open_dataset(tmp_path / "ds")["collectives"].collect().height == 8


def test_quarantine_names_file_and_line(dump, tmp_path):
    ingest([dump], tmp_path / "ds")
    quarantine = open_dataset(tmp_path / "ds")["quarantine"].collect()
    assert quarantine.height == 1
    row = quarantine.row(0, named=True)
    assert row["source"].endswith("rank1.csv")
    assert row["line_no"] == 5
    assert row["raw"] == "7,123"


def test_unknown_file_fails_alone_and_others_complete(dump, tmp_path):
    (dump / "notes.txt").write_text("nothing tracekit knows\n")
    summary = ingest([dump], tmp_path / "ds")
    failed = summary.failed
    assert len(failed) == 1 and "notes.txt" in failed[0].error
    assert "cannot tell the format" in failed[0].error
    assert open_dataset(tmp_path / "ds")["collectives"].collect().height == 8


def test_missing_path_raises_before_anything_is_written(tmp_path):
    with pytest.raises(InputError, match="absent.log: no such file"):
        ingest([tmp_path / "absent.log"], tmp_path / "ds")
    assert not (tmp_path / "ds").exists()


def test_forced_unknown_format_lists_known_formats(dump, tmp_path):
    with pytest.raises(InputError, match="known formats: .*hook-csv"):
        ingest([dump], tmp_path / "ds", format="no-such-format")


def test_rows_take_the_dataset_job_id_whatever_the_source_calls_it(tmp_path):
    import polars as pl

    from tracekit.core import schema

    labels = schema.conform("labels", pl.DataFrame(
        {"job": ["synth-job-7"], "episode": [0], "fail_slow": [True], "kind": ["compute"]},
        schema_overrides={"episode": pl.Int32}))
    (tmp_path / "job").mkdir()
    labels.write_parquet(tmp_path / "job" / "labels.parquet")
    ingest([tmp_path / "job"], tmp_path / "renamed", job="renamed")
    assert open_dataset(tmp_path / "renamed")["labels"].collect()["job"].to_list() == ["renamed"]


# -- one pass over each file, parts per PART_ROWS, nothing left behind on failure -------------


class CountingStream(io.BytesIO):
    """A file's bytes that count how many of them the pipeline reads."""

    bytes_read = 0

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        CountingStream.bytes_read += len(data)
        return data


def test_a_new_file_is_read_once_hash_included(tmp_path, monkeypatch):
    path = tmp_path / "rank0.csv"
    path.write_text(hook_log(0, 4000))
    data = path.read_bytes()
    assert len(data) > 4 * SNIFF_BYTES
    monkeypatch.setattr(sources, "_file_source", lambda p: Source(
        str(p), len(data), lambda: CountingStream(data)))
    CountingStream.bytes_read = 0
    ingest([path], tmp_path / "ds")
    assert CountingStream.bytes_read == SNIFF_BYTES + len(data)  # the sniff, then one pass
    record = json.loads((tmp_path / "ds" / "manifest.json").read_text())["sources"][0]
    assert record["sha256"] == hashlib.sha256(data).hexdigest()


def test_a_changed_file_of_the_same_size_is_read_again(dump, tmp_path):
    ingest([dump], tmp_path / "ds")
    before = (dump / "rank0.csv").read_text()
    (dump / "rank0.csv").write_text(before.replace(",5000,", ",6000,"))
    again = ingest([dump], tmp_path / "ds")
    assert [s.status for s in again.sources] == ["ingested", "unchanged"]
    record = next(s for s in json.loads((tmp_path / "ds" / "manifest.json").read_text())[
        "sources"] if s["sha256"] == hashlib.sha256((dump / "rank0.csv").read_bytes()).hexdigest())
    assert record["rows"] == {"collectives": 5}


def test_parts_per_part_rows_by_rank_named_by_content(tmp_path, monkeypatch):
    monkeypatch.setattr(pipeline, "PART_ROWS", 3)
    monkeypatch.setattr(base, "LINE_BATCH_BYTES", 1)  # one line per chunk
    rows = [f"{i},{T0 + i},5000,host-a,100,{i % 2},0,0xc0,2,{i},AllReduce,256,7,0x1,0x1,-1"
            for i in range(10)]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "two-ranks.csv").write_text("\n".join([HEADER, *rows]) + "\n")
    ingest([tmp_path / "in"], tmp_path / "ds")
    sha = hashlib.sha256((tmp_path / "in" / "two-ranks.csv").read_bytes()).hexdigest()[:16]
    folder = tmp_path / "ds" / "collectives"
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    # rows 0-2, 3-5, 6-8 and 9 (rank 1 only) make parts 0 to 3, with this ingest's token
    assert [file.split(".")[0] for file in files] == [
        *(f"rank=0/{sha}-{n:05d}" for n in range(3)), *(f"rank=1/{sha}-{n:05d}" for n in range(4))]
    assert len({file.split(".")[1] for file in files}) == 1
    manifest = json.loads((tmp_path / "ds" / "manifest.json").read_text())
    key = manifest["sources"][0]["key"]
    assert manifest["parts"]["collectives"] == dict.fromkeys(files, key)
    table = open_dataset(tmp_path / "ds")["collectives"].collect().sort("seq")
    assert table["seq"].to_list() == list(range(10))
    assert table["rank"].to_list() == [i % 2 for i in range(10)]


def test_the_last_batch_is_written_beside_the_one_before_and_listed_after_it(tmp_path,
                                                                            monkeypatch):
    """The writer thread's batch is held until the caller has written the last one: the
    record still lists the parts in batch order."""
    import threading

    import polars as pl

    from tracekit import create_dataset

    dataset = create_dataset(tmp_path / "ds", job="ds")
    last_written, order = threading.Event(), []
    write_file = dataset.write_file

    def held_in_the_writer_thread(name, frame, stem, **options):
        if threading.current_thread() is not threading.main_thread():
            assert last_written.wait(10)  # the caller writes the last batch meanwhile
        written = write_file(name, frame, stem, **options)
        order.append(frame["seq"][0])
        if threading.current_thread() is threading.main_thread():
            last_written.set()
        return written

    monkeypatch.setattr(dataset, "write_file", held_in_the_writer_thread)
    monkeypatch.setattr(pipeline, "PART_ROWS", 2)
    monkeypatch.setattr(pipeline, "cores", lambda: 2)
    log = tmp_path / "rank0.csv"
    log.write_text(hook_log(0, 3))
    calls = read_all(hook_csv.READERS[0], file_source(log))
    frame = calls.tables["collectives"].with_columns(pl.lit("ds").alias("job"))
    writer = pipeline._PartWriter(dataset, pl.String())
    writer.add("collectives", frame.head(2))  # a full batch: to the writer thread
    writer.add("collectives", frame.tail(1))
    writer.close()
    assert order == [2, 0]  # the last batch was on disk first
    parts = writer.publish("0" * 16)["collectives"]
    assert [file.split(".")[0] for file in parts] == ["rank=0/" + "0" * 16 + "-00000",
                                                      "rank=0/" + "0" * 16 + "-00001"]


def test_rank_folders_carry_null_counts_and_other_tables_min_max_too(tmp_path):
    """A part of a table split by rank has no Parquet min/max (the folder is its rank, its
    footer's tracekit.stats its time span); other tables keep them for pruning."""
    import pyarrow.parquet as pq

    from tracekit.core.dataset import PART_STATS_KEY

    log = tmp_path / "rank0.csv"
    log.write_text(hook_log(0, 5) + "not,a,call\n")
    ingest([log], tmp_path / "ds", job="j")
    dataset = open_dataset(tmp_path / "ds")
    (part,) = dataset.parts("collectives")
    footer = pq.ParquetFile(part).metadata
    columns = {footer.row_group(0).column(i).path_in_schema: footer.row_group(0).column(i)
               for i in range(footer.num_columns)}
    assert all(c.statistics.has_null_count and not c.statistics.has_min_max
               for c in columns.values())
    assert (columns["peer"].statistics.null_count, columns["rank"].statistics.null_count) == (5, 0)
    assert json.loads(footer.metadata[PART_STATS_KEY.encode()])["t_min_ns"] == T0
    (quarantined,) = dataset.parts("quarantine")
    line_no = pq.ParquetFile(quarantined).metadata.row_group(0).column(1).statistics
    assert line_no.has_min_max and (line_no.min, line_no.max) == (7, 7)


def test_a_chunk_of_interleaved_ranks_goes_to_one_folder_per_rank_in_row_order():
    import polars as pl

    chunk = pl.DataFrame({"rank": [2, None, 0, 2, 0, None, 2], "seq": range(7)},
                         schema={"rank": pl.Int32, "seq": pl.Int64})
    layout = {folder: piece["seq"].to_list() for folder, piece in
              pipeline._layout("collectives", chunk)}
    assert layout == {f"rank={pipeline.HIVE_NULL}/": [1, 5], "rank=0/": [2, 4],
                      "rank=2/": [0, 3, 6]}
    one_rank = chunk.filter(pl.col("rank") == 2)
    assert [(folder, piece.equals(one_rank)) for folder, piece in
            pipeline._layout("collectives", one_rank)] == [("rank=2/", True)]
    wide = pl.DataFrame({"rank": [70_000, 3, None, 3, -1, 70_000], "seq": range(6)},
                        schema={"rank": pl.Int32, "seq": pl.Int64})  # ranks beyond 16-bit keys
    assert {folder: piece["seq"].to_list() for folder, piece in
            pipeline._layout("collectives", wide)} == {
        f"rank={pipeline.HIVE_NULL}/": [2], "rank=-1/": [4], "rank=3/": [1, 3],
        "rank=70000/": [0, 5]}


def test_named_columns_travel_as_the_sources_codes_and_read_back_as_strings(tmp_path):
    import polars as pl

    from tracekit import create_dataset
    from tracekit.core import schema
    from tracekit.ingest import hook_csv_scan

    log = tmp_path / "two-ranks.csv"
    log.write_text(hook_log(0, 4) + "\n".join(hook_log(1, 3).splitlines()[1:]) + "\n")
    job = pl.lit("ds", pl.String).alias("job")
    calls = read_all(hook_csv.READERS[0], file_source(log)).tables["collectives"]
    source = file_source(log)
    source.names = pl.Categorical(pl.Categories.random())
    given = pl.concat([chunk.tables["collectives"]
                       for chunk in hook_csv.READERS[0].read(source, {})])
    if hook_csv_scan.compiled() is not None:  # the scan gives its names as the source's codes
        assert [column for column, dtype in given.schema.items() if dtype == source.names] == \
            ["host", "comm", "op", "dtype"]
    dataset = create_dataset(tmp_path / "ds", job="ds")
    writer = pipeline._PartWriter(dataset, source.names)
    writer.add("collectives", calls.with_columns(job))  # names as String: coded by the writer
    writer.add("collectives", given.with_columns(job))
    buffered = pl.concat([frame for frames in writer.pending.values() for frame in frames])
    assert [column for column, dtype in buffered.schema.items()
            if dtype == source.names] == list(pipeline.CODED_COLUMNS)
    writer.close()
    dataset.list_files("source", writer.publish("0" * 16))
    table = dataset["collectives"].collect()
    assert table.schema == schema.COLLECTIVES.schema
    assert table.sort("rank", "seq", maintain_order=True).equals(
        pl.concat([calls, calls]).with_columns(job).sort("rank", "seq", maintain_order=True))
    assert [pl.read_parquet(part).schema for part in dataset.parts("collectives")] == \
        [schema.COLLECTIVES.schema] * 2


def test_a_small_source_keeps_its_names_as_strings_and_a_large_one_codes_them(tmp_path,
                                                                               monkeypatch):
    import polars as pl

    log = tmp_path / "rank0.csv"
    log.write_text(hook_log(0, 5))
    seen = []
    real = pipeline._PartWriter
    monkeypatch.setattr(pipeline, "_PartWriter",
                        lambda dataset, names: seen.append(names) or real(dataset, names))
    ingest([log], tmp_path / "small", job="j")
    monkeypatch.setattr(pipeline, "CODED_MIN_BYTES", log.stat().st_size)
    ingest([log], tmp_path / "large", job="j")
    assert seen[0] == pl.String and isinstance(seen[1], pl.Categorical)
    small, large = (open_dataset(tmp_path / name)["collectives"].collect()
                    for name in ("small", "large"))
    assert large.equals(small)


def test_a_source_failing_midway_leaves_no_parts_and_no_staged_files(tmp_path, monkeypatch):
    monkeypatch.setattr(pipeline, "PART_ROWS", 1)
    monkeypatch.setattr(base, "LINE_BATCH_BYTES", 300)
    parse = hook_csv._parse_block
    calls = []

    def fail_on_the_third_block(block, names):
        calls.append(1)
        if len(calls) == 3:
            raise OSError("disk went away")
        return parse(block, names)

    monkeypatch.setattr(hook_csv, "_parse_block", fail_on_the_third_block)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "rank0.csv").write_text(hook_log(0, 20))
    summary = ingest([tmp_path / "in"], tmp_path / "ds")
    assert summary.sources[0].status == "failed"
    assert "disk went away" in summary.sources[0].error
    assert [p.name for p in (tmp_path / "ds").rglob("*") if p.is_file()] == ["manifest.json"]


def test_a_nccl_log_failing_on_a_parse_thread_leaves_nothing(tmp_path, monkeypatch):
    """A block failing on a parse thread fails its source like any error: no parts, no staged
    files, no parse thread left running."""
    import threading

    from tracekit.ingest import nccl_debug

    monkeypatch.setattr(pipeline, "PART_ROWS", 1)
    monkeypatch.setattr(base, "LINE_BATCH_BYTES", 400)
    split, calls = nccl_debug._split_block, []

    def fail_on_the_third_block(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise OSError("disk went away")
        return split(*args, **kwargs)

    monkeypatch.setattr(nccl_debug, "_split_block", fail_on_the_third_block)
    coll = ("h:7:7 [0] NCCL INFO AllReduce: opCount {:x} sendbuff 0x1 recvbuff 0x2 count 8 "
            "datatype 7 op 0 root 0 comm 0xc0 [nranks=2] stream 0x3")
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "rank0.log").write_text(
        "h:7:7 [0] NCCL INFO ncclCommInitRank comm 0xc0 rank 0 nranks 2 cudaDev 0 busId 1000 "
        "commId 0x9 - Init COMPLETE\n" + "".join(coll.format(i) + "\n" for i in range(40)))
    summary = ingest([tmp_path / "in"], tmp_path / "ds")
    assert summary.sources[0].status == "failed"
    assert "disk went away" in summary.sources[0].error
    assert [p.name for p in (tmp_path / "ds").rglob("*") if p.is_file()] == ["manifest.json"]
    assert not any(t.name.startswith("tracekit-parse") for t in threading.enumerate())


def test_parts_the_manifest_does_not_list_are_invisible_and_removed_by_the_next_writer(
        dump, tmp_path, monkeypatch):
    """A part an interrupted ingest left is not read and goes when the next writer starts;
    after a parser change the new parts are listed in place of the old, which the next
    writer removes (a reader that opened the manifest before could still read them)."""
    sha = hashlib.sha256((dump / "rank0.csv").read_bytes()).hexdigest()[:16]
    folder = tmp_path / "ds" / "collectives"
    ingest([dump], tmp_path / "ds")
    [part] = (folder / "rank=0").glob(f"{sha}-00000.*.parquet")
    leftover = folder / "rank=5" / f"{sha}-00000.0123456789ab.parquet"
    leftover.parent.mkdir()
    shutil.copy(part, leftover)
    assert open_dataset(tmp_path / "ds")["collectives"].collect().height == 8
    monkeypatch.setattr(hook_csv.HookCsvReader, "version", "2")
    again = ingest([dump], tmp_path / "ds")
    assert [s.status for s in again.sources] == ["ingested", "ingested"]
    assert not leftover.exists() and part.exists()
    assert open_dataset(tmp_path / "ds")["collectives"].collect().height == 8
    ingest([], tmp_path / "ds")
    assert not part.exists()
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.parquet")) == sorted(
        open_dataset(tmp_path / "ds").manifest["parts"]["collectives"])


@pytest.mark.parametrize("make_log", ["hook", "nccl"])
def test_on_one_core_the_same_dataset_is_written_without_threads(tmp_path, monkeypatch,
                                                                  make_log):
    """A one-core process (a Dask worker of ``local:N``, POLARS_MAX_THREADS=1) reads, parses
    and writes in its own thread, and writes what the threaded pipeline writes."""
    import threading

    import polars as pl

    coll = ("h:7:7 [0] NCCL INFO AllReduce: opCount {:x} sendbuff 0x1 recvbuff 0x2 count 8 "
            "datatype 7 op 0 root 0 comm 0xc0 [nranks=2] stream 0x3")
    text = (hook_log(0, 60) if make_log == "hook" else
            "h:7:7 [0] NCCL INFO ncclCommInitRank comm 0xc0 rank 0 nranks 2 cudaDev 0 "
            "busId 1000 commId 0x9 - Init COMPLETE\n"
            + "".join(coll.format(i) + "\n" for i in range(60)))
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "rank0.log").write_text(text)
    monkeypatch.setattr(pipeline, "PART_ROWS", 7)
    monkeypatch.setattr(base, "LINE_BATCH_BYTES", 500)
    started = []
    start = threading.Thread.start
    monkeypatch.setattr(threading.Thread, "start",
                        lambda thread: started.append(thread.name) or start(thread))
    tables = []
    for one_core in (False, True):
        monkeypatch.setattr(base, "cores", lambda one=one_core: 1 if one else 2)
        monkeypatch.setattr(pipeline, "cores", base.cores)
        started.clear()
        ingest([tmp_path / "in"], tmp_path / f"ds-{one_core}", job="j")
        threads = [name for name in started if name.startswith("tracekit-")]
        assert bool(threads) != one_core, threads
        folder = tmp_path / f"ds-{one_core}" / "collectives"
        tables.append((sorted(str(p.relative_to(folder)).split(".")[0]
                              for p in folder.rglob("*.parquet")),
                       pl.read_parquet(folder / "**" / "*.parquet").sort("rank", "seq")))
    (threaded_parts, threaded), (inline_parts, inline) = tables
    assert inline_parts == threaded_parts and len(inline_parts) > 2  # several writes
    assert inline.equals(threaded) and inline.height == 60


def test_files_ingested_two_at_once_give_the_dataset_one_at_a_time_gives(dump, tmp_path,
                                                                         monkeypatch):
    """Two files at once (the local loop on two cores), each read, parsed and written in its
    own thread: sources are recorded in input order whichever finishes first, the later of two
    same-content files is the one marked unchanged, and the rows, quarantine and failures are
    those of one file after another."""
    import threading

    import polars as pl

    monkeypatch.setattr(base, "LINE_BATCH_BYTES", 200)  # files of several blocks
    started = []
    start = threading.Thread.start
    monkeypatch.setattr(threading.Thread, "start",
                        lambda thread: started.append(thread.name) or start(thread))

    (dump / "rank2.csv").write_text(hook_log(2, 4) + "x\n")
    shutil.copy(dump / "rank0.csv", dump / "rank3.csv")
    (dump / "rank4.txt").write_text("nothing tracekit knows\n")
    monkeypatch.setattr(pipeline, "cores", lambda: 2)
    ingest_file, finished = pipeline._ingest_file, []

    def first_last(task, report=None):  # the first file finishes after the second
        if task.path.endswith("rank0.csv") and pipeline.FILES_AT_ONCE > 1:
            while not finished:
                time.sleep(0.01)
        finished.append(task.path.rsplit("/", 1)[-1])
        return ingest_file(task, report)

    monkeypatch.setattr(pipeline, "_ingest_file", first_last)
    results = []
    for at_once in (1, 2):
        monkeypatch.setattr(pipeline, "FILES_AT_ONCE", at_once)
        finished.clear()
        started.clear()
        summary = ingest([dump], tmp_path / f"ds{at_once}", job="j")
        assert {name.rsplit("_", 1)[0] for name in started if name.startswith("tracekit-")} == (
            {"tracekit-parse"} if at_once == 1 else {"tracekit-partition"})
        dataset = open_dataset(tmp_path / f"ds{at_once}")
        results.append(([(s.path, s.status, s.notes, s.error) for s in summary.sources],
                        dataset.manifest["sources"],
                        {name: {key: value for key, value in table.items()
                                if key != "fingerprint"}  # of the file names, new per ingest
                         for name, table in dataset.manifest["tables"].items()},
                        [dataset[name].collect().sort(pl.all()) for name in dataset]))
    assert finished[0] == "rank1.csv"
    (one, one_records, one_tables, one_rows), (two, two_records, two_tables, two_rows) = results
    assert [(path.rsplit("/", 1)[-1], status) for path, status, *_ in two] == [
        ("rank0.csv", "ingested"), ("rank1.csv", "ingested"), ("rank2.csv", "ingested"),
        ("rank3.csv", "unchanged"), ("rank4.txt", "failed")]
    assert two == one and two_records == one_records and two_tables == one_tables
    assert len(two_rows) == len(one_rows) == 2  # collectives and quarantine
    assert all(a.equals(b) for a, b in zip(one_rows, two_rows, strict=True))


def test_a_log_that_grew_replaces_its_old_rows(tmp_path):
    """Same path, new bytes: the old record and its parts go, so no row is there twice."""
    log = tmp_path / "rank0.csv"
    log.write_text(hook_log(0, 5))
    ingest([log], tmp_path / "ds")
    log.write_text(hook_log(0, 8))
    [source] = ingest([log], tmp_path / "ds").sources
    assert (source.status, source.rows) == ("ingested", {"collectives": 8})
    dataset = open_dataset(tmp_path / "ds")
    assert [s["rows"] for s in dataset.manifest["sources"]] == [{"collectives": 8}]
    assert dataset["collectives"].collect()["seq"].sort().to_list() == list(range(8))


def test_same_bytes_under_two_names_then_one_changes(tmp_path):
    """A copy keeps the shared parts while the other path's bytes change."""
    (tmp_path / "in").mkdir()
    for name in ("a.csv", "b.csv"):
        (tmp_path / "in" / name).write_text(hook_log(0, 5))
    ingest([tmp_path / "in"], tmp_path / "ds")
    (tmp_path / "in" / "b.csv").write_text(hook_log(1, 3))
    ingest([tmp_path / "in"], tmp_path / "ds")
    dataset = open_dataset(tmp_path / "ds")
    assert sorted((s["path"].rsplit("/", 1)[-1], s["rows"]["collectives"])
                  for s in dataset.manifest["sources"]) == [("a.csv", 5), ("b.csv", 3)]
    assert dataset["collectives"].collect().height == 8


def test_an_archive_over_its_limit_fails_under_the_member_that_crossed_it(tmp_path):
    """The failure is the member's, so its message names its path once (the CLI strips a
    message's own path: under the archive's path it read ``dump.tar: dump.tar!b.csv: ...``)."""
    archive = tmp_path / "dump.tar"
    with tarfile.open(archive, "w") as tar:
        for name, rank in [("a.csv", 0), ("b.csv", 1)]:
            data = hook_log(rank, 40).encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    size = len(hook_log(0, 40).encode())
    summary = ingest([archive], tmp_path / "ds", options={"max_archive_bytes": str(size + 1)})
    failed = summary.sources[-1]
    assert (failed.path, failed.status) == (f"{archive}!b.csv", "failed")
    assert failed.error.startswith(f"{archive}!b.csv: the archive's decompressed size exceeds")


def test_members_after_a_refused_member_are_still_read(tmp_path):
    archive = tmp_path / "dump.tar"
    with tarfile.open(archive, "w") as tar:
        for name, data in [("rank0.csv", hook_log(0, 2)), ("../escape.csv", "x"),
                           ("rank1.csv", hook_log(1, 3))]:
            info = tarfile.TarInfo(name)
            info.size = len(data.encode())
            tar.addfile(info, io.BytesIO(data.encode()))
    summary = ingest([archive], tmp_path / "ds")
    assert [(s.path.split("!")[1], s.status, s.total_rows) for s in summary.sources] == [
        ("rank0.csv", "ingested", 2), ("../escape.csv", "failed", 0), ("rank1.csv", "ingested", 3)]
    assert "archive member path contains '..'" in summary.sources[1].error


KILLED_AT_RENAME = """
import os, signal, sys
from pathlib import Path
from tracekit.ingest.pipeline import ingest
renames, kill_at, rename = 0, int(sys.argv[1]), os.replace

def replace(*args, **kwargs):
    global renames
    renames += 1
    if renames == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
    return rename(*args, **kwargs)

os.replace = replace
ingest([Path(sys.argv[3])], Path(sys.argv[2]))
"""


def _visible(path) -> tuple[list, list]:
    """What a reader of the dataset sees: its source records and every row of its tables."""
    dataset = open_dataset(path)
    rows = [(name, sorted(dataset[name].collect().rows())) for name in dataset]
    return sorted((s["path"], s["sha256"]) for s in dataset.manifest["sources"]), rows


def test_a_kill_at_any_rename_leaves_the_old_dataset_or_the_new_never_a_mix(dump, tmp_path):
    """Killed (SIGKILL) before each rename an ingest makes (parts written, parts named, the
    manifest), a reader sees the dataset as it was or as the full run leaves it; running the
    ingest again leaves it as the full run does."""
    import subprocess
    import sys

    ingest([dump], tmp_path / "before")
    (dump / "rank0.csv").write_text(hook_log(0, 8))  # grew: replaces its rows
    (dump / "rank2.csv").write_text(hook_log(2, 4) + "garbage\n")  # new, with a quarantined line
    shutil.copytree(tmp_path / "before", tmp_path / "after")
    ingest([dump], tmp_path / "after")
    old, new = _visible(tmp_path / "before"), _visible(tmp_path / "after")
    assert old != new
    seen = []
    for kill_at in range(1, 20):
        target = tmp_path / f"killed-{kill_at}"
        shutil.copytree(tmp_path / "before", target)
        run = subprocess.run([sys.executable, "-c", KILLED_AT_RENAME, str(kill_at), str(target),
                              str(dump)], capture_output=True, text=True)
        if run.returncode == 0:
            break
        assert run.returncode == -9, run.stderr
        seen.append("new" if _visible(target) == new else "old" if _visible(target) == old
                    else "mixed")
        ingest([dump], target)
        assert _visible(target) == new
        ingest([], target)  # the next writer removes what the killed run left
        listed = open_dataset(target).manifest["parts"]
        assert sorted(p.relative_to(target).as_posix() for p in target.rglob("*.parquet")) == \
            sorted(f"{name}/{file}" for name, files in listed.items() for file in files)
    # the manifest's rename is the last: before it, the dataset is as it was
    # rank0's part and rank2's two (calls, quarantine), each written then named; the manifest
    assert seen == ["old"] * 7



def test_a_stage_writing_while_an_ingest_runs_keeps_both(tmp_path):
    """A stage that opened the dataset before an ingest recorded new sources writes its table
    under the writer lock, from the manifest as it is then: both end recorded, in any order."""
    import threading

    import polars as pl

    from tracekit.core import schema

    ingest([_log(tmp_path, "rank0.csv", 0)], tmp_path / "ds")
    stage = open_dataset(tmp_path / "ds")
    events = schema.table("events").empty()
    more = threading.Thread(target=ingest, args=([_log(tmp_path, "rank1.csv", 1)],
                                                 tmp_path / "ds"))
    more.start()
    with stage.updating():
        stage.write_table("events", events)
    more.join()
    ingest([_log(tmp_path, "rank2.csv", 2)], tmp_path / "ds")  # and an ingest after the stage
    dataset = open_dataset(tmp_path / "ds")
    assert [s["path"].rsplit("/", 1)[-1] for s in dataset.manifest["sources"]] == [
        "rank0.csv", "rank1.csv", "rank2.csv"]
    assert set(dataset.manifest["parts"]) == {"collectives", "events"}
    assert dataset["collectives"].select(pl.len()).collect().item() == 15


def _log(folder, name: str, rank: int):
    (folder / name).write_text(hook_log(rank, 5))
    return folder / name


def _one_row_members(count: int) -> list[tuple[str, bytes]]:
    """``count`` one-call hook CSV logs of 3 ranks (every third with a quarantined line), each
    its own bytes: the many-small-members dump of issue 22."""
    return [(f"rank{i}.csv", (f"{HEADER}\n0,{T0 + i},5000,host-a,100,{i % 3},0,0xc0,2,0,"
                              "AllReduce,256,7,0x1,0x1,-1\n" + "7,x\n" * (i % 3 == 0)).encode())
            for i in range(count)]


@pytest.mark.parametrize("layout", ["archive", "folder"])
def test_directory_listings_and_manifest_writes_do_not_grow_with_members(tmp_path, monkeypatch,
                                                                         layout):
    """Per member, an ingest writes its parts and nothing else: the directory listings, the
    manifest writes and the footer reads of an ingest are the same for 3 members as for 30,
    into a new dataset and again into the same one."""
    import os

    from tracekit.core import dataset as dataset_module

    listings, saves, footers = [], [], []
    scandir, listdir = os.scandir, os.listdir

    def listed(list_folder):  # only ours: imports list the folders of sys.path
        return lambda path=".": (str(path).startswith(str(tmp_path)) and listings.append(path)
                                 or list_folder(path))

    monkeypatch.setattr(os, "scandir", listed(scandir))
    monkeypatch.setattr(os, "listdir", listed(listdir))
    save, footer = dataset_module.Dataset.save_manifest, dataset_module._stats_from_footer
    monkeypatch.setattr(dataset_module.Dataset, "save_manifest",
                        lambda self: saves.append(1) or save(self))
    monkeypatch.setattr(dataset_module, "_stats_from_footer",
                        lambda part: footers.append(part) or footer(part))
    counts = {}
    for members in (3, 30):
        dump = tmp_path / f"dump{members}"
        dump.mkdir()
        for name, data in _one_row_members(members):
            (dump / name).write_bytes(data)
        inputs = dump
        if layout == "archive":
            inputs = tmp_path / f"dump{members}.tar"
            with tarfile.open(inputs, "w") as tar:
                tar.add(dump, arcname="dump")
        runs = []
        for _ in range(2):  # new, then every member unchanged
            listings.clear(), saves.clear(), footers.clear()
            summary = ingest([inputs], tmp_path / f"ds{members}")
            assert len(summary.sources) == members
            runs.append((len(listings), len(saves), len(footers)))
        counts[members] = runs
    # (listings, manifest writes, footers read) of the new dataset (created, then saved once)
    # and of the second ingest, whose writer lists the dataset's 6 folders once (root,
    # quarantine, collectives and its 3 rank folders); a folder of inputs adds its 2 listings
    expected = {"archive": [(1, 2, 0), (6, 1, 0)], "folder": [(3, 2, 0), (8, 1, 0)]}
    assert counts[3] == counts[30] == expected[layout]


def test_a_truncated_archive_keeps_its_complete_members_and_rerunning_changes_nothing(
        tmp_path):
    import random

    archive = tmp_path / "whole.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, data in (("r0.csv", hook_log(0, 5).encode()), ("r1.csv", hook_log(1, 3).encode()),
                           ("big.bin", random.Random(1).randbytes(200_000))):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(archive.read_bytes()[:100_000])
    first = ingest([cut], tmp_path / "ds")
    assert [(s.path.rsplit("!", 1)[1], s.status) for s in first.sources] == [
        ("r0.csv", "ingested"), ("r1.csv", "ingested"), ("big.bin", "failed")]
    assert first.failed[0].error.startswith(f"{cut}!big.bin: truncated or corrupt archive")
    manifest = (tmp_path / "ds" / "manifest.json").read_text()
    assert open_dataset(tmp_path / "ds")["collectives"].collect().height == 8
    again = ingest([cut], tmp_path / "ds")
    assert [s.status for s in again.sources] == ["unchanged", "unchanged", "failed"]
    assert json.loads((tmp_path / "ds" / "manifest.json").read_text())["sources"] == \
        json.loads(manifest)["sources"]

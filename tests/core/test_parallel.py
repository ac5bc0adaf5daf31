"""Partitioned execution: a local loop and a Dask LocalCluster give the same outcomes, a
partition that raises is retried and then reported while the others complete, and a cluster
address nobody listens on fails fast with a clear message."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from pathlib import Path

import cloudpickle
import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from tracekit.cli import app
from tracekit.core import parallel, schema
from tracekit.core.dataset import create_dataset, open_dataset
from tracekit.core.errors import InputError, TracekitError
from tracekit.core.parallel import LocalExecutor, map_all, open_executor, partition_size
from tracekit.detect import detect_dataset, episodes, make_detector
from tracekit.detect.episodes import JOB_DETECTORS, JobSeries, detect_series
from tracekit.ingest import pipeline

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests/


def square_or_fail(partition: tuple[int, str]) -> int:
    """Partition ``(n, marker)``: fails the first time when a marker file is named (the file
    lives on disk, so the count survives a retry on another worker process), always below 0."""
    number, marker = partition
    if number < 0:
        raise MemoryError(f"partition {number} ran out of memory")
    if marker and not Path(marker).exists():
        Path(marker).write_text("failed once")
        raise OSError("stale NFS file handle")
    return number * number


def count_to(partition: int, report) -> int:
    for step in range(partition):
        report(step=step)
    return partition


@pytest.fixture(scope="module")
def dask_executor():
    pytest.importorskip("distributed")
    with open_executor("local:2") as executor:
        yield executor


class TwoAtOnce(LocalExecutor):
    """The local loop running two partitions at a time, as ingest runs its files."""

    def map_partitions(self, *arguments, **options):
        return super().map_partitions(*arguments, at_once=2, **options)


@pytest.fixture(params=["loop", "two at once", "dask"])
def executor(request):
    if request.param == "loop":
        return LocalExecutor()
    if request.param == "two at once":
        return TwoAtOnce()
    return request.getfixturevalue("dask_executor")


def test_outcomes_come_back_in_partition_order(executor):
    done = []
    outcomes = executor.map_partitions(square_or_fail, [(n, "") for n in range(6)],
                                       key=lambda p: f"part {p[0]}", on_done=done.append)
    assert [o.value for o in outcomes] == [0, 1, 4, 9, 16, 25]
    assert [o.key for o in outcomes] == [f"part {n}" for n in range(6)]
    assert sorted(o.key for o in done) == sorted(o.key for o in outcomes)


def test_two_at_once_finish_out_of_order_and_are_seen_in_partition_order():
    """The loop's threads: a slow first partition finishes after the next, yet ``on_done``
    (which records sources in the manifest) sees the partitions in their order."""
    finished, done = [], []
    release = threading.Event()

    def slow_first(n: int) -> int:
        if n == 0:
            release.wait(10)
        finished.append(n)
        if n == 1:
            release.set()
        return n

    outcomes = TwoAtOnce().map_partitions(slow_first, [0, 1, 2], on_done=done.append)
    assert finished[0] == 1
    assert [o.value for o in done] == [o.value for o in outcomes] == [0, 1, 2]


def test_failed_partition_is_retried_then_reported_while_others_complete(executor, tmp_path):
    partitions = [(2, ""), (-1, ""), (3, str(tmp_path / "flaky")), (4, "")]
    outcomes = executor.map_partitions(square_or_fail, partitions, key=lambda p: f"rank {p[0]}")
    assert [o.value for o in outcomes] == [4, None, 9, 16]
    assert [o.ok for o in outcomes] == [True, False, True, True]
    assert (tmp_path / "flaky").read_text() == "failed once"
    broken = outcomes[1]
    assert broken.error == "MemoryError: partition -1 ran out of memory"
    assert broken.attempts == 2
    assert broken.failure == ("rank -1: MemoryError: partition -1 ran out of memory (failed 2 "
                              "times; the other partitions completed)")


def refuse_or_crash(partition: tuple[int, str]) -> int:
    """Partition ``(n, marker)``: counts its attempts in the marker file; 0 is input tracekit
    refuses, 1 meets a bug in a reader."""
    number, marker = partition
    with Path(marker).open("a") as attempts:
        attempts.write("x")
    if number == 0:
        raise InputError("not a trace", "a.log")
    raise KeyError("reader bug")


def test_a_refused_input_is_reported_after_one_attempt(executor, tmp_path):
    (outcome,) = executor.map_partitions(refuse_or_crash, [(0, str(tmp_path / "n"))],
                                         key=lambda p: "a.log")
    assert outcome.failure == "a.log: a.log: not a trace (the other partitions completed)"
    assert (tmp_path / "n").read_text() == "x"


def test_a_bug_in_a_partition_is_raised_not_retried(executor, tmp_path):
    with pytest.raises(KeyError, match="reader bug"):
        executor.map_partitions(refuse_or_crash, [(1, str(tmp_path / "n"))])
    assert (tmp_path / "n").read_text() == "x"


def test_progress_reports_reach_the_caller(executor):
    seen: list[tuple[str, int]] = []
    outcomes = executor.map_partitions(count_to, [2, 3], key=lambda n: f"p{n}",
                                       progress=lambda key, info: seen.append((key, info["step"])))
    assert [o.value for o in outcomes] == [2, 3]
    assert sorted(seen) == [("p2", 0), ("p2", 1), ("p3", 0), ("p3", 1), ("p3", 2)]


def test_description_and_worker_memory(dask_executor):
    assert dask_executor.description == {"engine": "dask", "cluster": "local:2", "workers": 2,
                                         "retries": 1}
    peaks = dask_executor.worker_peak_rss_bytes()
    assert len(peaks) == 2 and all(peak > 10 * 2**20 for peak in peaks.values())


def _native_threads() -> dict[str, int | str | None]:
    import os

    return {"polars": pl.thread_pool_size(), "omp": os.environ.get("OMP_NUM_THREADS"),
            "malloc_trim": os.environ.get("MALLOC_TRIM_THRESHOLD_")}


def test_a_local_worker_is_one_core_and_the_client_keeps_its_environment(dask_executor):
    import os

    threads = dask_executor.client.run(_native_threads)
    assert list(threads.values()) == [{"polars": 1, "omp": "1", "malloc_trim": None}] * 2
    assert dask_executor.client.nthreads() == dict.fromkeys(threads, 1)
    assert "POLARS_MAX_THREADS" not in os.environ


def _quiet_settings() -> dict[str, object]:
    import dask

    from tracekit.core.parallel import QUIET_DASK_CONFIG

    return {key: dask.config.get(key) for key in QUIET_DASK_CONFIG}


def test_local_workers_run_without_dask_background_sampling(dask_executor):
    """Workers of a cluster tracekit starts neither profile nor poll several times a second
    (an idle 2-worker cluster cost 5 % of the machine)."""
    from tracekit.core.parallel import QUIET_DASK_CONFIG

    settings = dask_executor.client.run(_quiet_settings)
    assert list(settings.values()) == [QUIET_DASK_CONFIG] * 2
    assert _quiet_settings() != QUIET_DASK_CONFIG  # this process's own settings are untouched


def _warmed_up(timeout_s: float = 60.0) -> list[str]:
    """On a worker: the warm-up modules it has imported, once its warm-up thread is done."""
    import threading
    import time

    from tracekit.core.parallel import WARM_UP

    deadline = time.monotonic() + timeout_s
    while (any(t.name == "tracekit-warm-up" for t in threading.enumerate())
           and time.monotonic() < deadline):
        time.sleep(0.05)
    return [target.partition(":")[0] for target in WARM_UP
            if target.partition(":")[0] in sys.modules]


def test_workers_are_warmed_up_as_the_executor_opens(dask_executor):
    from tracekit.core.parallel import WARM_UP
    from tracekit.detect import bocd_kernel

    warmed = dask_executor.client.run(_warmed_up)
    assert list(warmed.values()) == [[t.partition(":")[0] for t in WARM_UP]] * 2
    loaded = dask_executor.client.run(lambda: bocd_kernel.compiled.loaded)
    assert list(loaded.values()) == [True, True]


def test_warm_up_imports_modules_and_calls_loaders(monkeypatch):
    from tracekit.core import parallel

    calls = []
    monkeypatch.setattr(episodes, "load_kernels", lambda: calls.append("loaded"))
    monkeypatch.delitem(sys.modules, "tracekit.core.identity", raising=False)
    parallel.warm_up(("tracekit.core.identity", "tracekit.detect.episodes:load_kernels"))
    assert "tracekit.core.identity" in sys.modules and calls == ["loaded"]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_unreachable_scheduler_fails_with_the_address():
    address = f"tcp://127.0.0.1:{_free_port()}"
    with pytest.raises(TracekitError, match=f"cannot reach a Dask scheduler at {address} "
                       r"\(Connection refused\); start one"), open_executor(address):
        pass


@pytest.mark.parametrize(("spec", "message"), [
    ("local:0", "worker count must be a positive whole number"),
    ("local:two", "worker count must be a positive whole number"),
    ("yarn://rm:8032", "is not understood; use `local`"),
    ("tcp://no-port", "is not an address"),
])
def test_bad_cluster_values_are_refused(spec, message):
    with pytest.raises(TracekitError, match=message), open_executor(spec):
        pass


def test_cli_unreachable_cluster_is_one_line_and_status_2(tmp_path):
    (tmp_path / "rank0.csv").write_text(HOOK_HEADER + "\n")
    address = f"tcp://127.0.0.1:{_free_port()}"
    result = CliRunner().invoke(app, ["ingest", str(tmp_path / "rank0.csv"), "-o",
                                      str(tmp_path / "ds"), "--cluster", address])
    assert result.exit_code == 2
    assert f"cannot reach a Dask scheduler at {address}" in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "ds").exists()


def test_without_cluster_nothing_of_dask_is_imported(tmp_path):
    (tmp_path / "rank0.csv").write_text(HOOK_HEADER + "\n")
    script = (
        "import sys\nfrom pathlib import Path\nfrom tracekit.ingest.pipeline import ingest\n"
        "from tracekit.core.parallel import open_executor\nimport tracekit.cli\n"
        f"with open_executor(None) as executor:\n"
        f"    ingest([Path({str(tmp_path / 'rank0.csv')!r})], Path({str(tmp_path / 'ds')!r}),"
        " executor=executor)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]"


HOOK_HEADER = ("event_id,t_call_ns,duration_ns,host,pid,rank,device,comm,nranks,call,op,count,"
               "datatype,sendbuff,recvbuff,peer")


def test_ingest_reports_a_crashing_source_and_keeps_the_others(tmp_path, monkeypatch):
    for rank in range(3):
        (tmp_path / f"rank{rank}.csv").write_text(
            f"{HOOK_HEADER}\n0,1700000000000000000,5000,host-a,{100 + rank},{rank},0,0xc0,3,0,"
            "AllReduce,256,7,0x1,0x1,-1\n")
    sniff = pipeline.registry.sniff
    calls = []

    def crash_on_rank1(source):
        calls.append(source.file_name)
        if source.file_name == "rank1.csv":
            raise MemoryError("worker ran out of memory")
        return sniff(source)

    monkeypatch.setattr(pipeline.registry, "sniff", crash_on_rank1)
    summary = pipeline.ingest([tmp_path], tmp_path / "ds")
    assert calls.count("rank1.csv") == 2
    assert [s.status for s in summary.sources] == ["ingested", "failed", "ingested"]
    assert summary.failed[0].error == (f"{tmp_path / 'rank1.csv'}: MemoryError: worker ran out "
                                       "of memory (failed 2 times; the other partitions "
                                       "completed)")
    ranks = open_dataset(tmp_path / "ds")["collectives"].collect()["rank"].to_list()
    assert sorted(ranks) == [0, 2]


# -- end to end: the same dataset with and without a cluster ------------------------------------

@pytest.fixture(scope="module")
def synth_job(tmp_path_factory) -> Path:
    from tracekit.synth.job import JobSpec, generate_job
    from tracekit.synth.layout import Layout

    folder = tmp_path_factory.mktemp("scale") / "job"
    generate_job(folder, JobSpec(Layout.parse("tp2-dp2-pp2", gpus_per_host=4), iterations=120,
                                 seed=3, monitoring=False))
    return folder / "ranks"


def _ingest_and_reconstruct(ranks: Path, target: Path, executor) -> dict[str, pl.DataFrame]:
    from tracekit.iterations import reconstruct_dataset

    summary = pipeline.ingest([ranks], target, job="scale", executor=executor)
    assert not summary.failed
    reconstruct_dataset(open_dataset(target), executor=executor)
    return {name: open_dataset(target)[name].collect() for name in ("collectives", "iterations")}


def test_dataset_is_identical_with_and_without_a_cluster(synth_job, tmp_path, dask_executor):
    local = _ingest_and_reconstruct(synth_job, tmp_path / "loop", LocalExecutor())
    dask = _ingest_and_reconstruct(synth_job, tmp_path / "dask", dask_executor)
    assert (local["collectives"].height, local["iterations"].height) == (55_776, 952)
    assert set(local["collectives"]["rank"].unique().to_list()) == set(range(8))
    keys = {"collectives": ["rank", "seq", "t_start_ns"], "iterations": ["rank", "iteration"]}
    for name, key in keys.items():
        assert dask[name].sort(key).equals(local[name].sort(key)), name
    built = json.loads((tmp_path / "dask" / "manifest.json").read_text())["build"]
    assert built["ingest"] == {"engine": "dask", "cluster": "local:2", "workers": 2,
                               "retries": 1, "partitions": 8, "failed_partitions": 0}
    assert built["iterations"] == {"engine": "dask", "cluster": "local:2", "workers": 2,
                                   "retries": 1, "ranks": 8}
    built = json.loads((tmp_path / "loop" / "manifest.json").read_text())["build"]
    assert built["ingest"]["engine"] == built["iterations"]["engine"] == "local"


def test_failed_rank_batch_fails_the_reconstruction_naming_the_rank(monkeypatch):
    import importlib

    from tracekit.iterations import reconstruct

    module = importlib.import_module("tracekit.iterations.reconstruct")

    ranks = 17  # one batch of 16 ranks and one of rank 16 alone
    calls = pl.DataFrame({"job": "j", "rank": [r for r in range(ranks) for _ in range(40)],
                          "pid": 1, "op": "allreduce", "nranks": 2, "bytes": 64, "peer": -1,
                          "t_start_ns": [i * 1_000_000 for i in range(40)] * ranks},
                         schema_overrides={"rank": pl.Int32, "pid": pl.Int64,
                                           "nranks": pl.Int32, "bytes": pl.Int64,
                                           "peer": pl.Int32})
    calls = calls.with_columns(pl.lit(None, pl.Int64).alias("t_end_ns"))
    rank_function = module._reconstruct_rank

    def broken_rank_16(rank, part, threshold):
        if rank == 16:
            raise ValueError("no symbol repeats")
        return rank_function(rank, part, threshold)

    monkeypatch.setattr(module, "_reconstruct_rank", broken_rank_16)
    with pytest.raises(TracekitError) as failure:
        reconstruct(calls)
    assert str(failure.value) == (
        "1 of 2 partitions failed, nothing was written: ranks 16-16: rank 16: ValueError: "
        "no symbol repeats (the other partitions completed)")


def test_partition_size_gives_several_partitions_per_worker(dask_executor):
    assert partition_size(64, LocalExecutor(), most=16) == 16  # the loop: largest allowed
    assert partition_size(64, dask_executor, most=16) == 8  # 2 workers x 4 partitions
    assert partition_size(1000, dask_executor, most=16) == 16
    assert partition_size(3, dask_executor, most=16) == 1


def test_map_all_raises_one_error_naming_every_failed_partition():
    with pytest.raises(TracekitError) as raised:
        map_all(LocalExecutor(), square_or_fail, [(2, ""), (-1, ""), (-2, "")],
                key=lambda p: f"part {p[0]}")
    assert str(raised.value) == (
        "2 of 3 partitions failed, nothing was written: part -1: MemoryError: partition -1 ran "
        "out of memory (failed 2 times; the other partitions completed); part -2: MemoryError: "
        "partition -2 ran out of memory (failed 2 times; the other partitions completed)")
    assert map_all(LocalExecutor(), square_or_fail, [(3, ""), (4, "")]) == [9, 16]


# -- detect: fixed blocks of ranks ----------------------------------------------------------------

def _job_matrix(ranks: int = 8, points: int = 300) -> JobSeries:
    """A job whose ranks 2 and 5 slow down by 40 % from point 150: every detector finds
    something, so equal results are not equal emptiness."""
    rng = np.random.default_rng(7)
    matrix = 0.2 * (1 + 0.01 * rng.standard_normal((ranks, points)))
    matrix[[2, 5], 150:] *= 1.4
    job = pl.DataFrame({"iteration": np.arange(points), "duration_s": np.median(matrix, axis=0),
                        "t_start_ns": np.arange(points) * 200_000_000,
                        "t_end_ns": (np.arange(points) + 1) * 200_000_000})
    return JobSeries(job, list(range(100, 100 + ranks)), matrix)


def test_detect_rank_events_steps_fixed_blocks_whatever_the_executor(monkeypatch, dask_executor):
    series = _job_matrix()
    detectors = {name: make_detector(name) for name in JOB_DETECTORS}
    whole = {name: detect_series(detector, series.matrix) for name, detector in detectors.items()}
    assert [c.tolist() for c in whole["bocd+v"]][1:3] == [[], [150]]

    def changes_by_rank(events: pl.DataFrame) -> list[list[int]]:
        return [events.filter(pl.col("rank") == rank)["iteration"].to_list()
                for rank in series.ranks]

    # the job fits one block: exactly what the whole matrix stepped together gives
    one_block = episodes.detect_rank_events("j", detectors, series, LocalExecutor())
    for name in detectors:
        assert changes_by_rank(one_block[name]) == [
            series.job["iteration"].gather(c).to_list() for c in whole[name]], name
    monkeypatch.setattr(episodes, "RANKS_PER_BLOCK", 3)
    blocks = {name: [c for first in (0, 3, 6)
                     for c in detect_series(detector, series.matrix[first:first + 3])]
              for name, detector in detectors.items()}
    for executor in (LocalExecutor(), dask_executor):
        found = episodes.detect_rank_events("j", detectors, series, executor)
        assert list(found) == list(JOB_DETECTORS)
        for name in detectors:
            assert changes_by_rank(found[name]) == [
                series.job["iteration"].gather(c).to_list() for c in blocks[name]], name


def _write_iterations(path, series) -> pl.DataFrame:
    """``series`` (8 ranks x 300 iterations) as the ``iterations`` table of a new dataset."""
    iterations = schema.conform("iterations", pl.DataFrame({
        "job": "j", "rank": np.repeat(series.ranks, 300).astype(np.int32), "source": "acf",
        "iteration": np.tile(np.arange(300), 8), "duration_s": series.matrix.ravel(),
        "t_start_ns": np.tile(series.job["t_start_ns"].to_numpy(), 8)}))
    with create_dataset(path, "j").updating() as written:
        written.write_table("iterations", iterations)
    return iterations


def test_detect_with_a_failing_block_names_it_and_writes_nothing(monkeypatch, tmp_path):
    series = _job_matrix()
    _write_iterations(tmp_path / "ds", series)
    monkeypatch.setattr(episodes, "RANKS_PER_BLOCK", 3)

    def fail_on_rank_105(detector, matrix):
        if np.array_equal(matrix[-1], series.matrix[5]):
            raise MemoryError("worker ran out of memory")
        return detect_series(detector, matrix)

    monkeypatch.setattr(episodes, "detect_series", fail_on_rank_105)
    # 3 blocks of ranks and the job-level series
    with pytest.raises(TracekitError, match=r"^1 of 4 partitions failed, nothing was written: "
                       r"bocd on ranks 103-105: MemoryError: worker ran out of memory \(failed "
                       "2 times"):
        detect_dataset(tmp_path / "ds", ["bocd"])
    assert not open_dataset(tmp_path / "ds").has_table("events")


def test_the_job_level_series_is_a_partition_named_in_a_failure(monkeypatch, tmp_path):
    series = _job_matrix()
    series.matrix[:, 150:] *= 1.3  # the whole job slows down: a job-level change and episode
    iterations = _write_iterations(tmp_path / "ds", series)
    found = detect_dataset(tmp_path / "ds", ["bocd+v"])
    job_level = found.events.filter(pl.col("rank").is_null())
    changes, confirmed = make_detector("bocd+v").confirm(
        episodes.job_series(iterations).job["duration_s"].to_numpy())
    assert job_level["iteration"].to_list() == changes.tolist() == [150]
    assert job_level["confirmed_iteration"].to_list() == confirmed.tolist()
    assert found.episodes.select("start_iteration", "end_iteration", "ranks").rows() == [
        (150, 299, ",".join(map(str, series.ranks)))]

    def failing_confirm(self, durations):
        raise MemoryError("worker ran out of memory")

    monkeypatch.setattr(type(make_detector("bocd+v")), "confirm", failing_confirm)
    with pytest.raises(TracekitError, match=r"^1 of 2 partitions failed, nothing was written: "
                       r"bocd\+v on the job-level series: MemoryError"):
        detect_dataset(tmp_path / "ds", ["bocd+v"])


# -- analyze: every stage on the cluster, the same dataset ---------------------------------------

@pytest.fixture(scope="module")
def slow_job(tmp_path_factory) -> Path:
    """8 ranks, 300 iterations, rank 3's GPU throttled from iteration 120 to 220, with
    monitoring, so detect finds an episode and attribute judges it."""
    from tracekit.synth.faults import Injection
    from tracekit.synth.job import JobSpec, generate_job
    from tracekit.synth.layout import Layout

    folder = tmp_path_factory.mktemp("slow") / "job"
    generate_job(folder, JobSpec(Layout.parse("tp2-dp2-pp2", gpus_per_host=2), iterations=300,
                                 seed=5, injections=(Injection.parse(
                                     "thermal:rank=3@120+100x2.0"),), job="slow"))
    return folder


def test_analyze_is_identical_with_and_without_a_cluster(slow_job, tmp_path, dask_executor):
    from tracekit.pipeline.analyze import analyze

    tables = ("collectives", "iterations", "events", "episodes", "gpu_metrics")
    keys = {"collectives": ["rank", "seq", "t_start_ns"], "iterations": ["source", "rank",
            "iteration"], "events": ["detector", "rank", "iteration"],
            "episodes": ["detector", "episode"], "gpu_metrics": ["host", "gpu", "metric", "ts_ns"]}
    built = {}
    for name, executor in (("loop", LocalExecutor()), ("dask", dask_executor)):
        result = analyze([slow_job], tmp_path / name, job="slow", executor=executor,
                         write_job_report=False)
        assert [(s.name, s.status) for s in result.stages][:4] == [
            ("ingest", "done"), ("iterations", "done"), ("detect", "done"), ("attribute", "done")]
        ds = open_dataset(tmp_path / name)
        built[name] = ({t: ds[t].collect().sort(keys[t], nulls_last=True) for t in tables},
                       ds.manifest["build"])
    (loop, loop_build), (dask, dask_build) = built["loop"], built["dask"]
    for table in tables:
        assert dask[table].equals(loop[table]), table
    bocd = loop["episodes"].filter(pl.col("detector") == "bocd+v")
    assert bocd.select("start_iteration", "kind", "cause", "target").rows()[0][1:] == (
        "compute", "gpu-thermal", "rank:3")
    assert loop["events"].height > 0
    cluster = {"engine": "dask", "cluster": "local:2", "workers": 2, "retries": 1}
    assert dask_build["detect"] == {**cluster, "ranks_per_block": episodes.RANKS_PER_BLOCK}
    assert dask_build["attribute"] == {**cluster, "partitions": {
        "ranks": 8, "groups": 6, "episodes": loop["episodes"].height}}
    assert loop_build["attribute"]["partitions"] == {"ranks": 1, "groups": 1,
                                                     "episodes": loop["episodes"].height}
    assert dask_build["ingest"]["engine"] == dask_build["iterations"]["engine"] == "dask"
    assert {stage: b["engine"] for stage, b in loop_build.items()} == {
        "ingest": "local", "iterations": "local", "detect": "local", "attribute": "local"}


@pytest.mark.parametrize("command", ["detect", "attribute", "analyze"])
def test_cli_analysis_commands_refuse_an_unreachable_cluster(tmp_path, command):
    address = f"tcp://127.0.0.1:{_free_port()}"
    create_dataset(tmp_path / "ds", "j")
    arguments = [command, str(tmp_path / "ds"), "--cluster", address]
    if command == "analyze":
        arguments[1:2] = [str(tmp_path / "ds"), "-o", str(tmp_path / "out")]
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 2, result.output
    assert f"cannot reach a Dask scheduler at {address}" in result.output
    assert "Traceback" not in result.output


def test_rank_scans_open_only_each_ranks_folder_and_parts_outside_rank_folders(tmp_path,
                                                                                monkeypatch):
    """Each rank's scan reads its ``rank=N`` folder and the parts outside rank folders (whose
    rows may be of any rank), never another rank's folder."""
    dataset = create_dataset(tmp_path / "ds")
    folder = tmp_path / "ds" / "collectives"
    rows = {"rank=0/a": [0, 0], "rank=1/a": [1], "loose": [1, 2]}
    files = {}
    for stem, ranks in rows.items():
        (folder / stem).parent.mkdir(parents=True, exist_ok=True)
        frame = pl.DataFrame({"rank": ranks, "t_start_ns": range(len(ranks))},
                             schema={"rank": pl.Int32, "t_start_ns": pl.Int64})
        file, stats = dataset.write_file("collectives", schema.conform("collectives", frame), stem)
        files[file] = stats
    dataset.list_files("test", {"collectives": files})
    opened: list[list[str]] = []
    scan = pl.scan_parquet

    def recording_scan(parts, **options):
        opened.append([str(Path(p).relative_to(folder)) for p in parts])
        return scan(parts, **options)

    monkeypatch.setattr(parallel.pl, "scan_parquet", recording_scan)
    scans = parallel.rank_scans(dataset, "collectives", [0, 1, 2, 3])
    assert opened == [["loose.parquet", "rank=0/a.parquet"], ["loose.parquet", "rank=1/a.parquet"],
                      ["loose.parquet"], ["loose.parquet"]]
    assert {rank: scan.collect()["rank"].to_list() for rank, scan in scans.items()} == {
        0: [0, 0], 1: [1, 1], 2: [2], 3: []}

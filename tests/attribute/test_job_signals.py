"""Attribution's job-wide signals by partitions: the same instances, own times and verdicts as
one pass over the whole job, whatever the partitioning and however finely a bin's calls are cut
into windows of call numbers; whole groups per bin, costliest first; integer group ids in name
order; a bin reads only its members' folders."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tracekit.attribute import attribute_episodes, job_signals
from tracekit.attribute.arrival import call_gaps
from tracekit.attribute.groups import handle_groups
from tracekit.attribute.instances import collective_instances, member_calls
from tracekit.core import parallel
from tracekit.core.dataset import open_dataset
from tracekit.core.errors import TracekitError
from tracekit.core.parallel import LocalExecutor
from tracekit.ingest.pipeline import ingest
from tracekit.synth.faults import Injection
from tracekit.synth.job import JobSpec, generate_job
from tracekit.synth.layout import Layout


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """tp2-dp2-pp2 on 2 GPUs per host, rank 3 throttled from iteration 60 to 100."""
    root = tmp_path_factory.mktemp("signals")
    spec = JobSpec(Layout.parse("tp2-dp2-pp2", gpus_per_host=2), 160, 5,
                   (Injection.parse("thermal:rank=3@60+40x2.0"),), job="signals")
    generate_job(root / "job", spec)
    ingest([root / "job" / "ranks"], root / "ds", job="signals")
    return root / "ds"


def _one_pass(ds) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Instances and own times over the whole job in this process (no partitions)."""
    groups = handle_groups(ds.table("collectives"), ds.table("comms").collect())
    return (collective_instances(member_calls(ds.table("collectives"), groups)),
            call_gaps(ds.table("collectives")))


def _executor(workers: int, engine: str = "local") -> LocalExecutor:
    """The local loop, saying it has ``workers`` workers (partitioning follows the count) and
    is ``engine`` (anything but ``local`` leaves rows in Arrow IPC parts, as on a cluster)."""
    executor = LocalExecutor()
    executor.description.update(workers=workers, engine=engine)
    return executor


@pytest.mark.parametrize(("ranks_per_batch", "workers", "engine", "partitions"), [
    (8, 1, "local", {"ranks": 1, "groups": 1}), (3, 1, "dask", {"ranks": 3, "groups": 1}),
    (8, 2, "local", {"ranks": 8, "groups": 6}), (8, 4, "dask", {"ranks": 8, "groups": 7})])
def test_partitions_give_what_one_pass_gives(dataset, monkeypatch, ranks_per_batch, workers,
                                             engine, partitions):
    monkeypatch.setattr(job_signals, "RANKS_PER_BATCH", ranks_per_batch)
    ds = open_dataset(dataset)
    instances, gaps = _one_pass(ds)
    names = sorted(instances["group"].unique().to_list())
    executor = _executor(workers, engine)
    with job_signals.scratch_folder(ds) as scratch:
        everything = job_signals.signals_in_windows(ds, [(None, None)], executor, scratch)
        assert everything.partitions == partitions and len(names) == 13
        assert everything.instance_count == instances.height == 31_536
        assert len(everything.instance_parts) == partitions["groups"]
        assert scratch.parent == dataset and scratch.name.startswith(".attribute-")
        assert all(Path(p).parent == scratch for p in everything.instance_parts)
        by_name = everything.instances().with_columns(
            pl.col("group").replace_strict(list(range(len(names))), names))
        assert_frame_equal(by_name, instances)
        assert_frame_equal(everything.gaps(), gaps)
        assert everything.span_ns == (instances["t_ns"].min(), instances["t_ns"].max())
        assert everything.ranks.rows() == [(r, f"gpu{r // 2 + 1:02d}", r % 2) for r in range(8)]
        start, end = int(instances["t_ns"][1000]), int(instances["t_ns"][1500])
        inside = pl.col("t_ns").is_between(start, end, closed="left")
        assert_frame_equal(everything.instances(start, end).with_columns(
            pl.col("group").replace_strict(list(range(len(names))), names)),
            instances.filter(inside))
        assert_frame_equal(everything.gaps(start, end), gaps.filter(inside))
    with job_signals.scratch_folder(ds) as scratch:
        cut = job_signals.signals_in_windows(ds, [(start, end)], executor, scratch)
        assert_frame_equal(cut.instances().with_columns(
            pl.col("group").replace_strict(list(range(len(names))), names)),
            instances.filter(inside))
        assert_frame_equal(cut.gaps(), gaps.filter(inside))
        assert cut.instance_count == 31_536 and cut.span_ns == everything.span_ns
        assert cut.any_gap.rows() == gaps.head(1).rows()
    assert not scratch.exists()
    assert sorted(p.name for p in dataset.iterdir()) == sorted(
        p.name for p in dataset.iterdir() if not p.name.startswith("."))


@pytest.mark.parametrize("engine", ["local", "dask"])
def test_windows_of_call_numbers_give_what_the_whole_bin_gives(dataset, monkeypatch, engine):
    ds = open_dataset(dataset)
    executor = _executor(1, engine)
    episode = (ds.table("collectives").select(pl.col("t_start_ns").quantile(q).alias(str(q))
                                               for q in (0.3, 0.6)).collect().row(0))
    cuts = [(None, None), (int(episode[0]), int(episode[1]))]
    whole = _signals(ds, cuts, executor)
    handles = handle_groups(ds.table("collectives"), ds.table("comms").collect())
    monkeypatch.setattr(job_signals, "CALLS_PER_WINDOW", 500)
    assert len(job_signals.seq_windows(handles["last_seq"], 500)) == 152
    windowed = _signals(ds, cuts, executor)
    for one, cut in zip(whole, windowed, strict=True):
        assert cut[:3] == one[:3]
        for mine, theirs in zip(cut[3:], one[3:], strict=True):
            assert_frame_equal(mine, theirs)
    assert whole[0][:2] == ({"ranks": 1, "groups": 1}, 31_536)
    assert windowed[1][3].height == 9_459  # the episode's cut


def _signals(ds, cuts, executor) -> list[tuple]:
    """Per window of ``cuts``, everything the job signals hold: partitions, instance count,
    span, then the instances, own times and ranks."""
    out = []
    for window in cuts:
        with job_signals.scratch_folder(ds) as scratch:
            job = job_signals.signals_in_windows(ds, [window], executor, scratch)
            out.append((job.partitions, job.instance_count, job.span_ns, job.instances(),
                        job.gaps(), job.ranks))
    return out


def test_a_window_holds_at_most_the_calls_asked():
    """Three handles with calls 0-9, 0-9 and 0-3: one call number a window while all three
    call (3 calls), then 3 and 4 (3 + 2 calls: the third handle's last is 3), then two
    numbers of two handles (4 calls); the first window also takes unnumbered calls."""
    last = pl.Series([9, 9, 3])
    windows = job_signals.seq_windows(last, 5)
    assert windows == [(None, 1), (1, 2), (2, 3), (3, 5), (5, 7), (7, 9), (9, None)]
    calls = pl.DataFrame({"seq": [*range(10), *range(10), *range(4)]})
    assert [calls.filter(job_signals._in_seq(first, end)).height
            for first, end in windows] == [3, 3, 3, 5, 4, 4, 2]
    assert job_signals.seq_windows(last, 100) == [(None, None)]
    assert job_signals.seq_windows(pl.Series([0] * 10), 5) == [(None, None)]
    assert job_signals.seq_windows(pl.Series([None], dtype=pl.Int64), 5) == [(None, None)]
    calls = pl.DataFrame({"seq": [None, 0, 1, 5, 8, 9]}, schema={"seq": pl.Int64})
    assert [calls.filter(job_signals._in_seq(first, end))["seq"].to_list()
            for first, end in [(None, 1), (1, 6), (6, 8), (8, None)]] == [
        [None, 0], [1, 5], [], [8, 9]]


def test_the_scratch_folder_is_removed_when_a_partition_fails(dataset, monkeypatch):
    ds = open_dataset(dataset)

    def failing(partition):
        raise OSError("disk full")

    monkeypatch.setattr(job_signals, "_group_bin", failing)
    executor = _executor(1, "dask")
    with pytest.raises(TracekitError, match="disk full"), \
            job_signals.scratch_folder(ds) as scratch:
        job_signals.signals_in_windows(ds, [(None, None)], executor, scratch)
    assert scratch.name.startswith(".attribute-") and not scratch.exists()
    assert not [p for p in dataset.iterdir() if p.name.startswith(".attribute-")]


def test_verdicts_do_not_depend_on_the_partitioning(dataset, monkeypatch):
    ds = open_dataset(dataset)
    iterations = (ds.table("collectives").filter(pl.col("rank") == 0)
                  .select(pl.col("t_start_ns").min().alias("first"),
                          pl.col("t_start_ns").max().alias("last")).collect())
    first, last = iterations.row(0)
    length = (last - first) // 160
    episodes = pl.DataFrame({
        "job": "signals", "detector": "labels", "episode": [1, 2],
        "t_start_ns": [first + 60 * length, first + 150 * length],
        "t_end_ns": [first + 100 * length, None]}).pipe(_as_episodes)
    default = attribute_episodes(ds, episodes)
    assert default.select("cause", "target").rows()[0] == ("insufficient-evidence", "rank:3")
    assert_frame_equal(attribute_episodes(ds, episodes, _executor(4)), default)
    assert_frame_equal(attribute_episodes(ds, episodes, _executor(4, "dask")), default)
    monkeypatch.setattr(job_signals, "CALLS_PER_WINDOW", 500)  # 152 windows a bin
    assert_frame_equal(attribute_episodes(ds, episodes), default)
    assert_frame_equal(attribute_episodes(ds, episodes, _executor(4)), default)


def _as_episodes(frame: pl.DataFrame) -> pl.DataFrame:
    from tracekit.core import schema

    return schema.conform("episodes", frame)


def test_bins_hold_whole_groups_largest_first(monkeypatch):
    groups = pl.DataFrame({"host": "h", "pid": 1, "comm": [f"c{i}" for i in range(7)],
                           "rank": [0, 1, 0, 1, 2, 3, 4], "group": [0, 0, 1, 1, 2, 3, 4],
                           "calls": [50, 50, 30, 30, 70, 20, 5]})
    bins = job_signals._bins(groups, _executor(1))
    assert [sorted(set(b["group"])) for b in bins] == [[0, 1, 2, 3, 4]]
    bins = job_signals._bins(groups, _executor(2))  # 5 bins (one per group) of 51 calls asked
    assert [sorted(set(b["group"])) for b in bins] == [[0], [2], [1], [3, 4]]
    assert [b["calls"].sum() for b in bins] == [100, 70, 60, 25]
    monkeypatch.setattr(job_signals, "CALLS_PER_BIN", 110)  # 255 calls: 3 bins in one worker
    bins = job_signals._bins(groups, _executor(1))
    assert [sorted(set(b["group"])) for b in bins] == [[0], [2, 3, 4], [1]]
    assert [b["calls"].sum() for b in bins] == [100, 95, 60]


def test_groups_that_share_ranks_share_a_bin(monkeypatch):
    """By calls alone A and D would share a bin, and so would B and C: both bins would read
    all four ranks. Counting what a bin reads, each reads two."""
    groups = pl.DataFrame({"host": "h", "pid": 1, "comm": [f"c{i}" for i in range(8)],
                           "rank": [0, 1, 2, 3, 0, 1, 2, 3], "group": [0, 0, 1, 1, 2, 2, 3, 3],
                           "calls": [50, 50, 48, 48, 30, 30, 25, 25]})
    monkeypatch.setattr(job_signals, "CALLS_PER_BIN", 160)  # 306 calls: 2 bins
    bins = job_signals._bins(groups, _executor(1))
    assert [sorted(set(b["group"])) for b in bins] == [[0, 2], [1, 3]]
    assert [sorted(set(b["rank"])) for b in bins] == [[0, 1], [2, 3]]


def _megatron_groups(layout: Layout) -> pl.DataFrame:
    """One handle per member of each communicator with collectives, with the calls of the
    benchmarks' synthesized jobs of 1,000 iterations: 40,000 a TP handle, 6,000 a DP handle of
    the first stage and 10,000 of the second, 1,100 a world one, 1,000 an embedding one."""
    def calls(comm) -> int:
        if comm.kind == "dp":
            return 6_000 if layout.coords(comm.ranks[0])[2] == 0 else 10_000
        return {"world": 1_100, "tp": 40_000, "embedding": 1_000}[comm.kind]

    comms = [c for c in layout.communicators if c.kind in ("world", "tp", "dp", "embedding")]
    return pl.DataFrame([("h", rank, c.name, rank, group, calls(c))
                         for group, c in enumerate(comms) for rank in c.ranks],
                        schema={"host": pl.String, "pid": pl.Int64, "comm": pl.String,
                                "rank": pl.Int32, "group": pl.Int32, "calls": pl.Int64},
                        orient="row")


@pytest.mark.parametrize(("layout", "calls_per_bin", "bins", "reads"), [
    ("tp2-dp8-pp2", 1_000_000, [818_000, 785_200], {1: 12, 2: 20}),
    ("tp2-dp8-pp2", 410_000, [379_200, 408_000, 408_000, 408_000], {1: 2, 2: 30}),
    ("tp2-dp16-pp2", 1_000_000, [806_400, 848_000, 832_000, 720_000], {2: 38, 3: 26})])
def test_bins_read_each_rank_in_few_bins(monkeypatch, layout, calls_per_bin, bins, reads):
    """How many ranks are read by how many bins: with the world group, whose bin reads every
    rank, a rank is read by at most one bin more where a pipeline stage fits a bin, two where
    it does not (its DP groups straddle bins too). Packing for calls alone read 2 bins' worth
    of every rank at 32 ranks (``{2: 32}``), ``{2: 11, 3: 19, 4: 2}`` in 4 bins, and
    ``{2: 28, 3: 33, 4: 3}`` at 64 ranks: 64, 87 and 167 rank reads against 52, 62 and 154."""
    monkeypatch.setattr(job_signals, "CALLS_PER_BIN", calls_per_bin)
    packed = job_signals._bins(_megatron_groups(Layout.parse(layout)), _executor(1))
    assert [b["calls"].sum() for b in packed] == bins
    per_rank = pl.concat([b.select(pl.col("rank").unique()) for b in packed])["rank"]
    assert per_rank.value_counts(name="bins")["bins"].value_counts(name="ranks").sort(
        "bins").rows() == sorted(reads.items())


def test_group_ids_are_integers_in_name_order():
    named = pl.DataFrame({"group": ["b/2", "a/8", None, "b/2", "0x1/4"]})
    assert job_signals._numbered(named)["group"].to_list() == [2, 1, 2, 0]


def test_a_bin_reads_only_its_members_rank_folders(dataset, monkeypatch):
    read: list[list[str]] = []
    scan = pl.scan_parquet

    def recording_scan(parts, **options):
        read.append(sorted(Path(p).parent.name for p in parts))
        return scan(parts, **options)

    ds = open_dataset(dataset)
    handles = job_signals._numbered(handle_groups(ds.table("collectives"),
                                                  ds.table("comms").collect()))
    pairs = handles.filter(pl.len().over("group") == 2, pl.col("rank").max().over("group") > 2)
    pair = pairs.filter(pl.col("group") == pairs["group"].min())
    members = sorted(pair["rank"])
    monkeypatch.setattr(parallel.pl, "scan_parquet", recording_scan)
    (calls,) = job_signals._window_calls(str(dataset), pair, Path("unused"))
    assert read == [[f"rank={rank}"] for rank in members]
    assert calls["rank"].unique().sort().to_list() == members
    assert calls["group"].unique().to_list() == pair["group"].unique().to_list()
    assert calls.height == pair["calls"].sum() > 100

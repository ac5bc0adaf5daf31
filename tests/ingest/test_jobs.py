"""Telling the jobs of one dump apart: job ids in paths, shared NCCL commIds, and where the
sources without either go."""

from __future__ import annotations

import polars as pl

from tests.conftest import FORMATS
from tracekit.ingest.jobs import CommEvidence, describe, find_jobs


def names(found):
    jobs, shared = found
    return [(job.name, job.sources) for job in jobs], shared


def test_one_job_when_nothing_tells_sources_apart():
    assert names(find_jobs(["d/rank0.log", "d/rank1.log", "d/dcgm.prom"], {})) == (
        [], ["d/rank0.log", "d/rank1.log", "d/dcgm.prom"])


def test_per_rank_logs_joined_through_their_comms():
    """Rank 0 and rank 3 of a tp2 x dp2 job share no comm; rank 1 links them."""
    keys = {"d/r0.log": ["commId 0xa", "commId 0xb"], "d/r1.log": ["commId 0xa", "commId 0xd"],
            "d/r3.log": ["commId 0xc", "commId 0xd"]}
    jobs, shared = find_jobs(list(keys), keys)
    assert [(job.name, job.sources) for job in jobs] == [
        ("r0.log", ["d/r0.log", "d/r1.log", "d/r3.log"])]
    assert shared == []


def test_trials_in_folders_take_the_folder_files_without_evidence():
    paths = ["d/trial1/nccl.log", "d/trial1/dcgm.prom", "d/trial2/nccl.log", "d/trial2/dcgm.prom",
             "d/trial3/nccl.log", "d/notes.txt"]
    keys = {"d/trial1/nccl.log": ["commId 0x1"], "d/trial2/nccl.log": ["commId 0x2"],
            "d/trial3/nccl.log": ["commId 0x3"]}
    jobs, shared = find_jobs(paths, keys)
    assert [(job.name, job.sources) for job in jobs] == [
        ("trial1", ["d/trial1/nccl.log", "d/trial1/dcgm.prom"]),
        ("trial2", ["d/trial2/nccl.log", "d/trial2/dcgm.prom"]),
        ("trial3", ["d/trial3/nccl.log"])]
    assert shared == ["d/notes.txt"]
    assert describe(jobs) == "trial1 (2 sources), trial2 (2 sources), trial3 (1 source)"


def test_logs_of_three_runs_in_one_folder_by_commid():
    keys = {"bench/a.log": ["commId 0x1"], "bench/b.log": ["commId 0x2"],
            "bench/c.log": ["commId 0x3"]}
    jobs, _ = find_jobs(list(keys), keys)
    assert [job.name for job in jobs] == ["a.log", "b.log", "c.log"]


def test_job_ids_in_file_names_and_archive_members():
    paths = ["x/job_2_norm.csv", "x/job_3_norm.csv", "dump.tar.gz!slurm-41_0.out",
             "dump.tar.gz!slurm-41_1.out"]
    jobs, _ = find_jobs(paths, {})
    assert [(job.name, len(job.sources)) for job in jobs] == [
        ("job_2", 1), ("job_3", 1), ("slurm-41", 2)]


def test_rank_and_node_numbers_are_not_job_ids():
    jobs, shared = find_jobs(["d/node07-rank3.log", "d/node08-rank4.log"], {})
    assert (jobs, len(shared)) == ([], 2)


def test_comm_evidence_across_chunks():
    evidence = CommEvidence()
    evidence.add(pl.DataFrame({"comm_id": ["0xb", None, "0xa"]}))
    evidence.add(pl.DataFrame({"comm_id": ["0xa"]}))
    evidence.add(pl.DataFrame({"comm": ["0x55"]}))
    assert evidence.keys() == ["commId 0xa", "commId 0xb"]


def nccl_trial(folder, comm_id: str, ranks: int) -> None:
    """A trial's NCCL log (Init lines of a world comm) and its training log, which names no
    job."""
    folder.mkdir(parents=True)
    (folder / "nccl.log").write_text("".join(
        f"gpu-a{r // 8:02d}:{100 + r}:{200 + r} [0] NCCL INFO ncclCommInitRank comm 0x55{r:04x}0 "
        f"rank {r} nranks {ranks} cudaDev 0 nvmlDev {r % 8} busId {r % 8 + 1}8000 commId "
        f"{comm_id} - Init COMPLETE\n" for r in range(ranks)))
    log = (FORMATS / "megatron_train.log").read_text()
    (folder / "train.log").write_text(f"{log}run {comm_id}\n")


def trials(tmp_path):
    dump = tmp_path / "bench"
    for n, (comm_id, ranks) in enumerate([("0x1a", 16), ("0x2b", 16), ("0x3c", 36)], start=1):
        nccl_trial(dump / f"trial{n}", comm_id, ranks)
    return dump


def test_several_jobs_are_refused_in_one_line_and_nothing_is_kept(tmp_path):
    import pytest

    from tracekit.core.dataset import open_dataset
    from tracekit.core.errors import InputError
    from tracekit.ingest.pipeline import ingest

    dump = trials(tmp_path)
    with pytest.raises(InputError) as refused:
        ingest([dump], tmp_path / "ds")
    assert str(refused.value) == (
        f"{dump}: 3 jobs in one dump: trial1 (2 sources), trial2 (2 sources), trial3 (2 sources); "
        "ingest one with --job NAME (or each into its own dataset)")
    assert not (tmp_path / "ds" / "manifest.json").exists()  # no dataset was made
    ingest([dump], tmp_path / "ds", job="trial1")
    opened = open_dataset(tmp_path / "ds")
    assert (opened.job, len(opened.manifest["sources"])) == ("trial1", 2)


def test_job_picks_one_and_rerunning_keeps_it(tmp_path):
    import json

    from tracekit.core.dataset import open_dataset
    from tracekit.ingest.pipeline import ingest

    dump = trials(tmp_path)
    summary = ingest([dump], tmp_path / "ds", job="trial3")
    assert [(s.path.removeprefix(f"{dump}/"), s.status) for s in summary.sources] == [
        ("trial1/nccl.log", "other job"), ("trial1/train.log", "other job"),
        ("trial2/nccl.log", "other job"), ("trial2/train.log", "other job"),
        ("trial3/nccl.log", "ingested"), ("trial3/train.log", "ingested")]
    assert summary.sources[0].notes == ["left out: a source of job trial1, not trial3"]
    assert [s.total_rows for s in summary.sources[:4]] == [0, 0, 0, 0]
    opened = open_dataset(tmp_path / "ds")
    assert opened.job == "trial3"
    comms = opened.table("comms").collect()
    assert (comms.height, comms["comm_id"].unique().to_list()) == (36, ["0x3c"])
    assert [s["path"] for s in opened.manifest["sources"]] == [
        str(dump / "trial3" / "nccl.log"), str(dump / "trial3" / "train.log")]
    manifest = json.loads((tmp_path / "ds" / "manifest.json").read_text())
    again = ingest([dump], tmp_path / "ds", job="trial3")
    assert [s.status for s in again.sources][-2:] == ["unchanged", "unchanged"]
    assert json.loads((tmp_path / "ds" / "manifest.json").read_text())["sources"] == \
        manifest["sources"]

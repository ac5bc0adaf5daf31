"""NCCL_DEBUG=INFO reader: exact values on the real-format samples, prefixes, timestamps,
torn lines, streaming state across batches and the accounting invariant."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.ingest.collective_helpers import file_source, read_all
from tracekit.core.dataset import open_dataset
from tracekit.ingest import registry
from tracekit.ingest.base import Source
from tracekit.ingest.nccl_debug import NO_TIMESTAMP_NOTE, NcclDebugReader
from tracekit.ingest.pipeline import ingest

READER = NcclDebugReader()


@pytest.fixture(autouse=True, params=[True, False], ids=["compiled-scan", "polars-only"])
def parser(request, monkeypatch):
    """Every test runs with the compiled COLL scan and with the polars parser alone."""
    import tracekit.ingest.nccl_debug as module

    monkeypatch.setattr(module, "COMPILED_SCAN", request.param)
COLL = ("gpu-b04:19230:19230 [0] NCCL INFO AllReduce: opCount {op:x} sendbuff 0x7f11b4000000 "
        "recvbuff 0x7f11b4000000 count 16777216 datatype 9 op 0 root 0 comm 0x55b7e3a81c20 "
        "[nranks=16] stream 0x562f1c2e9d60")
INIT = ("gpu-b04:19230:19401 [0] NCCL INFO ncclCommInitRankConfig comm 0x55b7e3a81c20 rank 8 "
        "nranks 16 cudaDev 0 nvmlDev 0 busId 18000 commId 0xa3b91e07c45d2f68 - Init START")


def read_text(text: str, **options: str):
    return read_all(READER, Source.from_bytes("test.log", text.encode()), options)


def test_v2_18_sample_exact_rows(formats_dir):
    result = read_all(READER, file_source(formats_dir / "nccl_debug_coll.log"))
    calls = result.tables["collectives"]
    assert calls.height == 20
    first = calls.row(0, named=True)
    # Recovered from line 20, where rank 0's call was spliced into rank 1's Init COMPLETE.
    assert {k: first[k] for k in ("rank", "host", "pid", "comm", "op", "seq", "op_count", "count",
                                  "dtype", "bytes", "nranks")} == {
        "rank": 0, "host": "gpu-a17", "pid": 31170, "comm": "0x55d1c8a3f2a0", "op": "allreduce",
        "seq": 0, "op_count": 0, "count": 1, "dtype": "float32", "bytes": 4, "nranks": 16}
    rank8 = calls.filter((pl.col("rank") == 8) & (pl.col("comm") == "0x5589f2177d10"))
    assert rank8["seq"].to_list() == [0, 1, 2]
    assert rank8["op_count"].to_list() == [0x1a, 0x1b, 0x1c]
    assert rank8["bytes"].to_list() == [33554432] * 3
    send = calls.filter(pl.col("op") == "send").row(0, named=True)
    recv = calls.filter(pl.col("op") == "recv").row(0, named=True)
    assert (send["rank"], send["peer"], send["count"], send["bytes"]) == (0, 1, 8388608, 16777216)
    assert (recv["rank"], recv["peer"]) == (8, 0)
    broadcast = calls.filter(pl.col("op") == "broadcast").row(0, named=True)
    assert (broadcast["peer"], broadcast["dtype"], broadcast["bytes"]) == (0, "int64", 32)
    assert calls.filter(pl.col("op") == "allreduce")["peer"].null_count() == 13
    assert calls["t_start_ns"].null_count() == 20
    assert NO_TIMESTAMP_NOTE in result.notes
    assert "NCCL 2.18.5+cuda12.2" in result.notes
    # The torn Init head, its orphaned tail and the truncated last line.
    assert result.quarantine["line_no"].to_list() == [20, 21, 52]
    assert result.quarantine["reason"].to_list() == [
        "incomplete Init line (torn or truncated)",
        "torn line: NCCL COLL/Init text without its host:pid:tid [dev] prefix",
        "truncated last line (the file ends without a line end)",
    ]
    assert result.rows() + result.skipped + result.quarantine.height == result.lines


def test_v2_18_sample_comms(formats_dir):
    comms = read_all(READER, file_source(formats_dir / "nccl_debug_coll.log")).tables["comms"]
    assert comms.height == 8
    world = comms.filter(pl.col("comm") == "0x5589f0c3a860").row(0, named=True)
    assert {k: world[k] for k in ("comm_id", "rank", "comm_rank", "nranks", "host", "pid",
                                  "cuda_dev", "nvml_dev", "bus_id")} == {
        "comm_id": "0x7c3e5b2f9a1d4e60", "rank": 8, "comm_rank": 8, "nranks": 16,
        "host": "gpu-a18", "pid": 28804, "cuda_dev": 0, "nvml_dev": 0, "bus_id": "0000:18:00.0"}
    # Rank 8 is rank 0 of its 8-rank comm; the global rank comes from the world comm.
    sub = comms.filter(pl.col("comm") == "0x5589f2177d10").row(0, named=True)
    assert (sub["rank"], sub["comm_rank"], sub["nranks"]) == (8, 0, 8)
    assert comms.filter(pl.col("host") == "gpu-a17", pl.col("pid") == 31171)["bus_id"].to_list() \
        == ["0000:2a:00.0", "0000:2a:00.0"]


def test_v2_27_srun_prefix_and_split_comms(formats_dir):
    result = read_all(READER, file_source(formats_dir / "nccl_debug_coll_v2.27.log"))
    calls, comms = result.tables["collectives"], result.tables["comms"]
    assert calls.height == 15
    assert calls.group_by("rank").len().sort("rank").rows() == [(0, 9), (1, 3), (8, 3)]
    # opCount never advances on NVLink-only comms in 2.27: seq still counts calls.
    tp = calls.filter(pl.col("comm") == "0x562f1f4d2e80")
    assert tp["op_count"].to_list() == [0, 0, 0] and tp["seq"].to_list() == [0, 1, 2]
    fp8 = calls.filter(pl.col("dtype") == "float8e4m3").row(0, named=True)
    assert (fp8["count"], fp8["bytes"], fp8["seq"]) == (8388608, 8388608, 5)
    split = comms.filter(pl.col("comm") == "0x55b7e5e44b90").row(0, named=True)
    assert (split["comm_id"], split["parent_comm"], split["split_color"], split["rank"],
            split["comm_rank"]) == (None, "0x55b7e3a81c20", 907118325, 8, 1)
    assert result.quarantine.height == 0
    assert result.rows() + result.skipped == result.lines


def test_every_init_variant(formats_dir):
    comms = read_all(READER, file_source(formats_dir / "nccl_init.log")).tables["comms"]
    assert comms.height == 9
    # 2.14: no nvmlDev, no commId; one process driving two GPUs keeps one rank per GPU.
    old = comms.filter(pl.col("host") == "a03-r28").sort("comm_rank")
    assert old.select("rank", "comm_rank", "cuda_dev", "nvml_dev", "bus_id").rows() == [
        (0, 0, 0, None, "0000:25:00.0"), (1, 1, 1, None, "0000:2b:00.0")]
    # 2.23 split without commId (and the "key 0- Init START" typo) vs 2.21 split with one.
    splits = comms.filter(pl.col("comm") == "0x55d1ca01b9c0")
    assert sorted(splits["comm_id"].to_list(), key=str) == ["0x41d2e9c07ab35f18", None]
    head = comms.filter(pl.col("comm") == "0x5594b2f07a90").row(0, named=True)
    assert (head["parent_comm"], head["split_color"], head["nranks"], head["bus_id"]) == (
        "0x5594b0e31c00", 1340275184, 8, "0000:1b:00.0")
    assert comms.filter(pl.col("comm") == "0x5594b0e31c00")["nranks"].to_list() == [64]


def test_launcher_prefixes_and_timestamps():
    lines = [
        "[2025-10-14 09:31:07] " + INIT,
        "8: [2025-10-14 09:31:07.123456] " + COLL.format(op=0),
        "2025-10-14T09:31:08.5Z [1,8]<stdout>:" + COLL.format(op=1),
        "1760434269.000000123 (RayTrainWorker pid=615, ip=10.72.7.6) " + COLL.format(op=2),
        "[default7]:" + COLL.format(op=3),
        "2025-10-14T11:31:08+02:00 " + COLL.format(op=4),
    ]
    result = read_text("\n".join(lines) + "\n")
    calls = result.tables["collectives"]
    assert calls["rank"].to_list() == [8] * 5
    assert calls["host"].to_list() == ["gpu-b04"] * 5
    assert calls["t_start_ns"].to_list() == [
        1760434267123456000, 1760434268500000000, 1760434269000000123, None,
        1760434268000000000]
    assert result.tables["comms"]["t_init_ns"].to_list() == [1760434267000000000]
    assert "1 of 5 calls have no timestamp" in result.notes


def test_local_time_zone_option():
    text = "[2025-10-14 11:31:07] " + COLL.format(op=0) + "\n"
    utc = read_text(text).tables["collectives"]["t_start_ns"][0]
    paris = read_text(text, tz="Europe/Paris").tables["collectives"]["t_start_ns"][0]
    assert utc - paris == 2 * 3600 * 10**9


def test_rccl_globalrank_wins_and_calls_without_init():
    line = COLL.format(op=0) + " task 5 globalrank 13"
    calls = read_text(line + "\n" + COLL.format(op=1) + "\n").tables["collectives"]
    assert calls["rank"].to_list() == [13, None]


def test_state_carries_across_batches(monkeypatch):
    """Init lines in the first batch rank COLL lines in later ones; seq continues."""
    from tracekit.ingest import base

    text = INIT + "\n" + "\n".join(COLL.format(op=i) for i in range(50)) + "\n"
    monkeypatch.setattr(base, "LINE_BATCH_BYTES", 1000)
    result = read_text(text)
    calls = result.tables["collectives"]
    assert calls["seq"].to_list() == list(range(50))
    assert calls["rank"].to_list() == [8] * 50
    assert result.tables["comms"].height == 1


def test_blocks_split_on_the_parse_threads_give_the_one_block_output(monkeypatch):
    """A file of many blocks, split two at a time on the parse threads and numbered in order,
    gives exactly what it gives read as one block: rows, seq, ranks, line numbers, counts."""
    from tracekit.ingest import base

    torn = COLL.format(op=7)[40:]
    other = "gpu-b04:19230:19300 [0] NCCL INFO Channel 00/0 : 8[0] -> 9[0] via P2P/IPC"
    lines = [INIT, *(COLL.format(op=i) if i % 7 else other for i in range(120)), torn,
             INIT.replace("rank 8", "rank 3").replace("19230", "19231"),
             *(COLL.format(op=i).replace("19230", "19231") for i in range(30)),
             COLL.format(op=99)[:70]]
    source = Source.from_bytes("many.log", "\n".join(lines).encode())
    one_block = read_all(READER, source)
    monkeypatch.setattr(base, "LINE_BATCH_BYTES", 700)
    threaded = read_all(READER, source)
    for name in one_block.tables:
        assert threaded.tables[name].equals(one_block.tables[name])
    assert threaded.quarantine.equals(one_block.quarantine)
    assert threaded.quarantine["line_no"].to_list() == [122, 154]
    calls = threaded.tables["collectives"]
    assert calls.filter(pl.col("pid") == 19231)["rank"].to_list() == [3] * 30
    assert calls.filter(pl.col("pid") == 19230)["seq"].to_list() == list(range(102))
    assert (threaded.lines, threaded.skipped) == (one_block.lines, one_block.skipped) == (154, 18)


def test_malformed_coll_lines_are_quarantined():
    good = COLL.format(op=1)
    bad = [good.replace("count 16777216", "count many"),
           good.replace("opCount 1", "opCount zz"),
           good.replace("[nranks=16]", "nranks=16")]
    result = read_text("\n".join([good, *bad, "Python warning: whatever"]) + "\n")
    assert result.tables["collectives"].height == 1
    assert result.quarantine["reason"].to_list() == [
        "count is not an integer", "opCount is not hexadecimal",
        "COLL line with unexpected fields"]
    assert result.skipped == 1


def test_numbers_too_large_for_their_column_are_quarantined():
    huge_rank = INIT.replace("rank 8 ", "rank 99999999999 ")
    huge_root = COLL.format(op=0).replace("root 0", "root 4294967296")
    result = read_text("\n".join([huge_rank, INIT, huge_root, COLL.format(op=1)]) + "\n")
    assert result.quarantine.select("line_no", "reason").rows() == [
        (1, "Init line with a number out of range"), (3, "root is not an integer")]
    assert result.tables["collectives"]["rank"].to_list() == [8]
    assert result.rows() + result.skipped + result.quarantine.height == result.lines


def test_byte_order_mark_is_not_part_of_the_host():
    calls = read_text("\ufeff" + INIT + "\r\n" + COLL.format(op=0) + "\r\n").tables["collectives"]
    assert (calls["host"].to_list(), calls["rank"].to_list()) == (["gpu-b04"], [8])


def test_sniffed_among_all_readers(formats_dir):
    for name in ("nccl_debug_coll.log", "nccl_debug_coll_v2.27.log", "nccl_init.log"):
        assert registry.sniff(file_source(formats_dir / name)).format == "nccl-debug"


def test_ingest_is_idempotent(formats_dir, tmp_path):
    log = formats_dir / "nccl_debug_coll.log"
    first = ingest([log], tmp_path / "ds", job="j")
    again = ingest([log], tmp_path / "ds", job="j")
    assert first.sources[0].rows == {"collectives": 20, "comms": 8}
    assert first.sources[0].quarantined == 3
    assert again.sources[0].status == "unchanged"
    assert open_dataset(tmp_path / "ds").table("collectives").collect().height == 20


nccl_words = st.sampled_from([
    "NCCL", "INFO", "opCount", "comm", "rank", "nranks", "- Init START", "[nranks=8]",
    "gpu-a1:1:2", "[0]", "AllReduce:", "0x7f00", "(nil)", "count", "datatype", " NCCL INFO ",
    "\t", "é", "::", "[", "]", COLL.format(op=7), INIT])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=80), st.lists(nccl_words, max_size=12).map(" ".join)),
                max_size=25))
def test_garbage_lines_are_all_accounted_for(garbage):
    text = "\n".join(line.replace("\n", " ").replace("\r", " ") for line in garbage)
    result = read_text(text)
    assert result.rows() + result.skipped + result.quarantine.height == result.lines


@pytest.mark.parametrize("cut", [60, 120, 200])
def test_truncated_last_line(cut):
    text = INIT + "\n" + COLL.format(op=0) + "\n" + COLL.format(op=1)[:cut]
    result = read_text(text)
    assert result.tables["collectives"].height == 1
    assert result.quarantine["line_no"].to_list() == [3]
    assert result.rows() + result.skipped + result.quarantine.height == result.lines


def test_unterminated_last_line_that_is_complete_is_still_refused():
    """Without a line end nothing proves the pointer or count was not cut short."""
    result = read_text(COLL.format(op=0) + "\n" + "Python warning: unrelated")
    assert result.tables["collectives"].height == 1 and result.skipped == 1


call_rows = st.lists(st.tuples(st.sampled_from(["a", "b"]), st.sampled_from([1, 2]),
                               st.sampled_from(["0x1", "0x2"]), st.sampled_from([0, 1, None]),
                               st.sampled_from([None, None, 5])), max_size=25)


@settings(max_examples=60, deadline=None)
@given(st.lists(call_rows, min_size=1, max_size=3),
       st.lists(st.tuples(st.sampled_from(["a", "b"]), st.sampled_from([1, 2]),
                          st.sampled_from([0, 1]), st.integers(0, 7)), max_size=4))
def test_calls_are_numbered_per_comm_and_ranked_per_device_across_batches(batches, ranks):
    """seq counts each (host, pid, comm)'s calls over every batch; rank is the call's own
    global rank, else its (host, pid, cuda_dev)'s, else the first known for its (host, pid)."""
    import tracekit.ingest.nccl_debug as module

    state = module._JoinState()
    process_ranks = pl.DataFrame(
        [(h, p, d, 8, False, r) for h, p, d, r in ranks], orient="row",
        schema=state.process_ranks.schema | {"host_id": pl.String}).unique(
        ["host_id", "pid", "cuda_dev"], keep="first", maintain_order=True)
    by_device = {(h, p, d): r for h, p, d, _, _, r in process_ranks.iter_rows()}
    state.process_ranks = process_ranks.with_columns(state.ids(process_ranks["host_id"]))
    by_process = {}
    for (h, p, _), r in by_device.items():
        by_process.setdefault((h, p), r)
    counters = {}
    for rows in batches:
        calls = pl.DataFrame(
            [(h, p, d, c, g, "allreduce", "float32") for h, p, c, d, g in rows], orient="row",
            schema={"host_id": pl.String, "pid": pl.Int64, "cuda_dev": pl.Int32,
                    "comm_id": pl.String, "global_rank": pl.Int32, "op": pl.String,
                    "dtype": pl.String}).with_columns(
            *(pl.lit(None, dtype).alias(c) for c, dtype in (
                ("nranks", pl.Int32), ("op_count", pl.Int64), ("count", pl.Int64),
                ("bytes", pl.Int64), ("peer", pl.Int32), ("t_start_ns", pl.Int64))))
        calls = calls.with_columns(state.ids(calls["host_id"]), state.ids(calls["comm_id"]))
        got = module._number_and_rank(calls, state)
        expected_seq, expected_rank = [], []
        for h, p, c, d, g in rows:
            expected_seq.append(counters.get((h, p, c), 0))
            counters[(h, p, c)] = expected_seq[-1] + 1
            expected_rank.append(g if g is not None else by_device.get(
                (h, p, d), by_process.get((h, p))))
        assert got["seq"].to_list() == expected_seq
        assert got["rank"].to_list() == expected_rank


def test_real_lines_with_trailing_blanks():
    """COLL lines as posted in NVIDIA/nccl#1238 (a single-rank comm: opCount stays 0), each
    ending in a blank, with an Init line of <= 2.17 (src/init.cc v2.14.3-1: "comm %p rank %d
    nranks %d cudaDev %d busId %lx - Init COMPLETE") ending alike."""
    coll = ("ip-172-31-54-74:30125:30125 [0] NCCL INFO AllReduce: opCount 0 sendbuff "
            "0x7fc9c4000000 recvbuff 0x7fc9bc000000 count 33554432 datatype 7 op 0 root 0 comm "
            "0x5631f0816b40 [nranks=1] stream 0x5631f0021140 ")
    init = ("ip-172-31-54-74:30125:30125 [0] NCCL INFO comm 0x5631f0816b40 rank 0 nranks 1 "
            "cudaDev 0 busId 101c0 - Init COMPLETE ")
    result = read_text("\n".join([init, coll, coll]) + "\n")
    calls = result.tables["collectives"]
    assert calls.select("rank", "host", "pid", "op", "seq", "op_count", "bytes").rows() == [
        (0, "ip-172-31-54-74", 30125, "allreduce", 0, 0, 134217728),
        (0, "ip-172-31-54-74", 30125, "allreduce", 1, 0, 134217728)]
    assert result.tables["comms"].select("comm", "bus_id").rows() == [
        ("0x5631f0816b40", "0000:10:1c.0")]
    assert result.quarantine.is_empty()


def test_rccl_init_lines_with_their_memory_suffix():
    """RCCL's Init COMPLETE (ROCm/rccl src/init.cc): "comm %p rank %d nranks %d cudaDev %d busId
    %lx used %ld bytes - Init COMPLETE", later with "commId 0x%llx localSize %ld" before "used"
    (lines from real logs posted in ROCm/rccl issues, an OLCF Crusher node and a 2-GPU box);
    COLL lines with RCCL's task / globalrank suffix."""
    lines = [
        "crusher002:81767:81780 [0] NCCL INFO comm 0x7f6400000ef0 rank 0 nranks 2 cudaDev 0 "
        "busId c1000 used 27440 bytes - Init COMPLETE",
        "b1cc0f529b57:526:680 [1] NCCL INFO comm 0x7e7ba40 rank 1 nranks 2 cudaDev 1 busId 3000 "
        "commId 0xddf7a5357adcc52d localSize 0 used 20984624 bytes - Init COMPLETE",
        "b1cc0f529b57:526:526 [1] NCCL INFO AllReduce: opCount 0 sendbuff 0x7f11b4000000 recvbuff "
        "0x7f11b4000000 count 8 datatype 7 op 0 root 0 comm 0x7e7ba40 [nranks=2] stream 0x5 "
        "task 0 globalrank 1",
    ]
    result = read_text("\n".join(lines) + "\n")
    comms = result.tables["comms"]
    assert comms.select("host", "comm", "comm_id", "rank", "nranks", "bus_id").rows() == [
        ("crusher002", "0x7f6400000ef0", None, 0, 2, "0000:c1:00.0"),
        ("b1cc0f529b57", "0x7e7ba40", "0xddf7a5357adcc52d", 1, 2, "0000:03:00.0")]
    assert result.tables["collectives"].select("rank", "comm", "bytes").rows() == [
        (1, "0x7e7ba40", 32)]
    assert result.quarantine.is_empty()
def test_hosts_are_spelled_as_the_monitoring_spells_them(tmp_path):
    """NCCL prints ``gethostname()`` as the host has it: ``DGX-H100-01`` in the ranks' tables
    and ``dgx-h100-01`` in dcgm-exporter's left a congested link without its NICs' rows."""
    host = "DGX-H100-01"
    lines = [f"[2025-10-14 09:31:07] {INIT.replace('gpu-b04', host)}",
             f"[2025-10-14 09:31:08] {COLL.format(op=0).replace('gpu-b04', host)}"]
    (tmp_path / f"nccl.{host}.19230.log").write_text("\n".join(lines) + "\n")
    (tmp_path / "dcgm.dgx-h100-01.1760434268.prom").write_text(
        'DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-1",Hostname="dgx-h100-01"} 1410\n')
    ingest([tmp_path], tmp_path / "ds")
    dataset = open_dataset(tmp_path / "ds")
    for table in ("collectives", "comms", "gpu_metrics"):
        assert dataset[table].collect()["host"].cast(pl.String).to_list() == ["dgx-h100-01"]

"""NCCL_DEBUG=INFO logs without COLL lines (the default NCCL_DEBUG_SUBSYS): Init, NET and
topology lines of NCCL 2.4, 2.7 and 2.19 give the comms, with each process's network and NICs,
and one note says collective timing needs COLL lines. The samples are written here in the
formats real logs of those versions print."""

from __future__ import annotations

import polars as pl
import pytest

from tests.ingest.collective_helpers import read_all
from tracekit.ingest import registry
from tracekit.ingest.base import Source
from tracekit.ingest.nccl_debug import NO_COLL_NOTE, NO_TIMESTAMP_NOTE, NcclDebugReader
from tracekit.ingest.pipeline import ingest

READER = NcclDebugReader()


@pytest.fixture(autouse=True, params=[True, False], ids=["compiled-scan", "polars-only"])
def parser(request, monkeypatch):
    """With the compiled COLL scan (which leaves every line of these logs to polars) and
    without it."""
    import tracekit.ingest.nccl_debug as module

    monkeypatch.setattr(module, "COMPILED_SCAN", request.param)

V2_4 = """\
[1,0]<stdout>:ip-10-0-0-11:4521:4521 [0] NCCL INFO Bootstrap : Using [0]eth0:10.0.0.11<0>
[1,0]<stdout>:ip-10-0-0-11:4521:4521 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so).
[1,0]<stdout>:ip-10-0-0-11:4521:4521 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.11<0>
[1,0]<stdout>:NCCL version 2.4.8+cuda10.1
[1,1]<stdout>:ip-10-0-0-11:4522:4522 [1] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.11<0>
[1,2]<stdout>:ip-10-0-0-12:7310:7310 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.0.0.12<0>
[1,3]<stdout>:ip-10-0-0-12:7311:7311 [1] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.0.0.12<0>
[1,0]<stdout>:ip-10-0-0-11:4521:4560 [0] NCCL INFO Setting affinity for GPU 0 to 0fff
[1,0]<stdout>:ip-10-0-0-11:4521:4560 [0] NCCL INFO Channel 00 :    0   1   2   3
[1,0]<stdout>:ip-10-0-0-11:4521:4560 [0] NCCL INFO Ring 00 : 3 -> 0 [receive] via NET/IB/0
[1,0]<stdout>:ip-10-0-0-11:4521:4560 [0] NCCL INFO Ring 00 : 0[0] -> 1[1] via P2P/IPC
[1,2]<stdout>:ip-10-0-0-12:7310:7350 [0] NCCL INFO Ring 00 : 2[0] -> 3[1] via P2P/IPC
[1,0]<stdout>:ip-10-0-0-11:4521:4560 [0] NCCL INFO Trees [0] -1->0->1/-1/-1
[1,0]<stdout>:ip-10-0-0-11:4521:4560 [0] NCCL INFO comm 0x7f1c40002250 rank 0 nranks 4 cudaDev 0 nvmlDev 0 - Init COMPLETE
[1,1]<stdout>:ip-10-0-0-11:4522:4561 [1] NCCL INFO comm 0x7f5a8c002250 rank 1 nranks 4 cudaDev 1 nvmlDev 1 - Init COMPLETE
[1,2]<stdout>:ip-10-0-0-12:7310:7350 [0] NCCL INFO comm 0x7fb3dc002250 rank 2 nranks 4 cudaDev 0 nvmlDev 0 - Init COMPLETE
[1,3]<stdout>:ip-10-0-0-12:7311:7351 [1] NCCL INFO comm 0x7f0e64002250 rank 3 nranks 4 cudaDev 1 nvmlDev 1 - Init COMPLETE
[1,0]<stdout>:ip-10-0-0-11:4521:4521 [0] NCCL INFO Launch mode Parallel
"""  # noqa: E501 (log lines are as long as NCCL prints them)

V2_7 = """\
gpu-n01:2211:2211 [0] NCCL INFO Bootstrap : Using [0]ib0:192.168.10.1<0>
gpu-n01:2211:2211 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE ; OOB ib0:192.168.10.1<0>
gpu-n01:2211:2211 [0] NCCL INFO Using network IB
NCCL version 2.7.8+cuda11.0
gpu-n02:3301:3301 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE ; OOB ib0:192.168.10.2<0>
gpu-n02:3301:3301 [0] NCCL INFO Using network IB
gpu-n01:2211:2260 [0] NCCL INFO Channel 00/02 :    0   1
gpu-n01:2211:2260 [0] NCCL INFO Channel 00 : 1[1a000] -> 0[1a000] [receive] via NET/IB/0
gpu-n02:3301:3340 [0] NCCL INFO Channel 00 : 0[1a000] -> 1[1a000] [receive] via NET/IB/0
gpu-n01:2211:2260 [0] NCCL INFO comm 0x7f2a1c000e00 rank 0 nranks 2 cudaDev 0 busId 1a000 - Init COMPLETE
gpu-n02:3301:3340 [0] NCCL INFO comm 0x7f9b30000e00 rank 1 nranks 2 cudaDev 0 busId 1a000 - Init COMPLETE
"""  # noqa: E501

V2_19 = """\
NCCL version 2.19.3+cuda12.3
node-a:1707:1707 [0] NCCL INFO cudaDriverVersion 12000
node-a:1707:1889 [0] NCCL INFO NET/IB : No device found.
node-a:1707:1889 [0] NCCL INFO NET/Socket : Using [0]ens7:10.128.0.33<0> [1]ens8:10.128.1.33<0>
node-a:1707:1889 [0] NCCL INFO Using non-device net plugin version 0
node-a:1707:1889 [0] NCCL INFO Using network Socket
node-a:1707:1889 [0] NCCL INFO comm 0x558ef922a470 rank 0 nranks 2 cudaDev 0 nvmlDev 3 busId 3d000 commId 0x7ef9513a104d9d97 - Init START
node-a:1707:1889 [0] NCCL INFO comm 0x558ef922a470 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0
node-a:1708:1890 [1] NCCL INFO comm 0x55d0e3b1c2a0 rank 1 nranks 2 cudaDev 1 nvmlDev 4 busId 3e000 commId 0x7ef9513a104d9d97 - Init START
node-a:1707:1889 [0] NCCL INFO Channel 00/02 :    0   1
node-a:1707:1889 [0] NCCL INFO Channel 00/0 : 0[3] -> 1[4] via P2P/IPC
node-a:1707:1889 [0] NCCL INFO Connected all rings
node-a:1707:1889 [0] NCCL INFO comm 0x558ef922a470 rank 0 nranks 2 cudaDev 0 nvmlDev 3 busId 3d000 commId 0x7ef9513a104d9d97 - Init COMPLETE
node-a:1708:1890 [1] NCCL INFO comm 0x55d0e3b1c2a0 rank 1 nranks 2 cudaDev 1 nvmlDev 4 busId 3e000 commId 0x7ef9513a104d9d97 - Init COMPLETE
"""  # noqa: E501

IDENTITY = ("rank", "host", "pid", "cuda_dev", "nvml_dev", "bus_id", "comm_id", "net", "nics")


def read_text(text: str):
    return read_all(READER, Source.from_bytes("info.log", text.encode()))


def test_v2_4_init_lines_without_bus_id():
    result = read_text(V2_4)
    assert result.quarantine.height == 0
    assert result.tables["collectives"].height == 0
    assert result.tables["comms"].sort("rank").select(IDENTITY).rows() == [
        (0, "ip-10-0-0-11", 4521, 0, 0, None, None, None, "mlx5_0:1/IB"),
        (1, "ip-10-0-0-11", 4522, 1, 1, None, None, None, "mlx5_0:1/IB"),
        (2, "ip-10-0-0-12", 7310, 0, 0, None, None, None, "mlx5_0:1/IB,mlx5_1:1/IB"),
        (3, "ip-10-0-0-12", 7311, 1, 1, None, None, None, "mlx5_0:1/IB,mlx5_1:1/IB"),
    ]
    assert result.notes == ["NCCL 2.4.8+cuda10.1", NO_COLL_NOTE]
    assert result.rows() + result.skipped + result.quarantine.height == result.lines


def test_v2_7_bus_ids_and_roce_nics():
    result = read_text(V2_7)
    assert result.tables["comms"].select(IDENTITY).rows() == [
        (0, "gpu-n01", 2211, 0, None, "0000:1a:00.0", None, "IB", "mlx5_0:1/RoCE,mlx5_1:1/RoCE"),
        (1, "gpu-n02", 3301, 0, None, "0000:1a:00.0", None, "IB", "mlx5_0:1/RoCE,mlx5_1:1/RoCE"),
    ]
    assert result.notes == ["NCCL 2.7.8+cuda11.0", NO_COLL_NOTE]


def test_v2_19_sockets_and_start_complete_pairs():
    """START and COMPLETE name one membership (one row each); the topology line ``nRanks ..
    nNodes`` is not an Init line; socket devices are named without their address."""
    result = read_text(V2_19)
    assert result.quarantine.height == 0
    assert result.tables["comms"].select(IDENTITY).rows() == [
        (0, "node-a", 1707, 0, 3, "0000:3d:00.0", "0x7ef9513a104d9d97", "Socket", "ens7,ens8"),
        (1, "node-a", 1708, 1, 4, "0000:3e:00.0", "0x7ef9513a104d9d97", None, None),
    ]
    assert NO_TIMESTAMP_NOTE not in result.notes


@pytest.mark.parametrize("sample", [V2_4, V2_7, V2_19], ids=["2.4", "2.7", "2.19"])
def test_sniffed_when_init_lines_are_past_the_head(sample):
    """A large job prints thousands of topology lines before its first Init COMPLETE (2.4 -
    2.17 print no Init START): the head alone must be enough to know the format."""
    lines = sample.splitlines(keepends=True)
    channels = "".join(f"gpu-n01:2211:2260 [0] NCCL INFO Channel {c % 32:02d}/32 :    0   1\n"
                       for c in range(2000))
    text = lines[0] + channels + "".join(lines[1:])
    source = Source.from_bytes("nccl.out", text.encode())
    assert "- Init " not in source.head_text
    assert registry.sniff(source).format == "nccl-debug"


def test_not_claimed_without_nccl_lines():
    source = Source.from_bytes("train.log", b"epoch 1 loss 2.31\nNCCL INFO without envelope\n")
    assert not READER.sniff(source)


def test_no_note_for_a_file_without_nccl_lines():
    assert read_text("hello\nworld\n").notes == []


def test_ingest_keeps_one_note(tmp_path):
    log = tmp_path / "dump" / "nccl.log"
    log.parent.mkdir()
    log.write_text(V2_4 + V2_7)
    summary = ingest([log.parent], tmp_path / "ds")
    (source,) = summary.sources
    assert (source.format, source.rows, source.quarantined) == ("nccl-debug", {"comms": 6}, 0)
    assert source.notes.count(NO_COLL_NOTE) == 1
    assert pl.read_parquet(tmp_path / "ds" / "comms").height == 6


def test_analyze_of_an_info_only_log_names_its_ranks_and_says_why_there_is_no_verdict(
        tmp_path):
    from tracekit.core.dataset import open_dataset
    from tracekit.core.identity import rank_gpus
    from tracekit.pipeline.analyze import analyze

    dump = tmp_path / "dump"
    dump.mkdir()
    (dump / "nccl.log").write_text(V2_19)
    result = analyze([dump], tmp_path / "ds", write_job_report=False)
    assert [(s.name, s.status, s.detail) for s in result.stages][1:3] == [
        ("iterations", "skipped", "no collectives and no framework log: nothing to time "
         "iterations with"),
        ("detect", "skipped", "no iterations to detect on")]
    ranks = rank_gpus(open_dataset(tmp_path / "ds").table("comms").collect(), pl.DataFrame(
        schema={"host": pl.String, "gpu": pl.Int32, "gpu_uuid": pl.String, "bus_id": pl.String}))
    assert ranks.select("rank", "host", "gpu", "bus_id").rows() == [
        (0, "node-a", 3, "0000:3d:00.0"), (1, "node-a", 4, "0000:3e:00.0")]

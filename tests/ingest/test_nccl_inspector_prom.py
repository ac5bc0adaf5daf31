"""NCCL Inspector Prometheus files, on the real-format sample and hand-written variants."""

from __future__ import annotations

import functools
from pathlib import Path

import polars as pl
import pytest

from tracekit.core import schema
from tracekit.core.dataset import open_dataset
from tracekit.ingest import nccl_inspector_prom, registry
from tracekit.ingest.base import Source, iter_line_batches
from tracekit.ingest.nccl_inspector_prom import NcclInspectorPromReader
from tracekit.ingest.pipeline import ingest

UUID = "GPU-5b1e8c3a-0f6d-4b7e-9a21-6c0d9e7f4a13"
STANDARD_NAME = f"nccl_inspector_metrics_{UUID}.prom"
LABELS = ('version="v5.1",slurm_job_id="418827",node="gpu-b03",gpu="GPU{gpu}",'
          'comm_name="DP Group 0",n_nodes="2",nranks="16",collective="AllReduce",'
          'message_size="{size}",algo_proto="{algo}"')
MiB = 1024**2


def _bucket(size: str, bandwidth: str = "20", exec_us: str = "100", gpu: int = 0,
            algo: str = "Ring_LL") -> str:
    labels = LABELS.format(gpu=gpu, size=size, algo=algo)
    return (f"nccl_bus_bandwidth_gbs{{{labels}}} {bandwidth}\n"
            f"nccl_collective_exec_time_microseconds{{{labels}}} {exec_us}\n")


def _read(text: str, name: str = STANDARD_NAME, options: dict[str, str] | None = None):
    chunks = list(NcclInspectorPromReader().read(Source.from_bytes(name, text.encode()),
                                                 options or {}))
    tables = [c.tables["collective_buckets"] for c in chunks if "collective_buckets" in c.tables]
    rows = pl.concat(tables) if tables else schema.COLLECTIVE_BUCKETS.empty()
    quarantine = pl.concat([c.quarantine for c in chunks if c.quarantine is not None])
    notes = [n for c in chunks for n in c.notes]
    return rows, quarantine, chunks, notes


@pytest.fixture(scope="module")
def sample(formats_dir) -> Path:
    return formats_dir / STANDARD_NAME


def test_sample_rows_exact(sample):
    rows, quarantine, chunks, notes = _read(sample.read_text())
    schema.validate("collective_buckets", rows)
    assert quarantine.height == 0
    assert sum(c.lines for c in chunks) == 6 and sum(c.skipped for c in chunks) == 0
    assert rows.select("op", "kind", "comm_name", "nranks", "n_nodes", "algorithm", "protocol",
                       "bytes_low", "bytes_high", "busbw_geomean_gbs",
                       "exec_time_mean_us").rows() == [
        ("reducescatter", "collective", "DP Group 0", 2, 2, "ring", "simple",
         320 * MiB, 321 * MiB, 23.6232, 7102.4),
        ("allreduce", "collective", None, 16, 2, "ring", "ll128",
         32 * MiB, 33 * MiB, 21.8909, 2874.0),
        ("send", "p2p", "PP Group 3", 2, 2, None, None, 16 * MiB, 17 * MiB, 40.7214, 412.0),
    ]
    assert rows["host"].unique().to_list() == ["gpu-b03"]
    assert rows["cuda_dev"].unique().to_list() == [0]
    assert rows["slurm_job_id"].unique().to_list() == ["418827"]
    assert rows["gpu_uuid"].unique().to_list() == [UUID]
    assert rows["inspector_version"].unique().to_list() == ["v5.1"]
    assert rows["ts_ns"].null_count() == 3
    assert any("--option ts=" in n for n in notes)


def test_message_size_every_unit_is_1024_based():
    sizes = ["0B", "512-513B", "8-9KB", "320-321MB", "2-3GB", "1-2TB", "2048-2049TB"]
    rows, quarantine, _, _ = _read("".join(_bucket(s) for s in sizes))
    assert quarantine.height == 0
    assert rows.select("bytes_low", "bytes_high").rows() == [
        (0, 1), (512, 513), (8 * 1024, 9 * 1024), (320 * MiB, 321 * MiB),
        (2 * 1024**3, 3 * 1024**3), (1024**4, 2 * 1024**4), (2048 * 1024**4, 2049 * 1024**4),
    ]


def test_p2p_rows_take_p2p_operation_and_have_no_algorithm():
    labels = ('version="v5.1",slurm_job_id="unknown",node="GPU-B03.dc1",gpu="GPU5",'
              'comm_name="unknown",n_nodes="1",nranks="8",p2p_operation="Recv",'
              'message_size="4-5MB"')
    text = (f"nccl_p2p_bus_bandwidth_gbs{{{labels}}} 0\n"
            f"nccl_p2p_exec_time_microseconds{{{labels}}} 1.23457e+06\n")
    rows, _, _, _ = _read(text)
    assert rows.select("kind", "op", "cuda_dev", "host", "slurm_job_id", "comm_name",
                       "algorithm", "protocol", "nranks", "n_nodes", "busbw_geomean_gbs",
                       "exec_time_mean_us").row(0) == (
        "p2p", "recv", 5, "gpu-b03", None, None, None, None, 8, 1, None, 1234570.0)


def test_gpu_uuid_only_from_the_standard_file_name():
    text = _bucket("1-2MB")
    assert _read(text)[0]["gpu_uuid"].to_list() == [UUID]
    assert _read(text, f"dump/host1/{STANDARD_NAME}")[0]["gpu_uuid"].to_list() == [UUID]
    assert _read(text, "gpu0_metrics.prom")[0]["gpu_uuid"].to_list() == [None]


def test_damaged_lines_quarantined_with_line_and_reason():
    text = (_bucket("1-2MB")
            + 'nccl_bus_bandwidth_gbs{version="v5.1",node="gpu-b03",gpu="GP\n'
            + _bucket("3-4XB")
            + _bucket("1-2MB", gpu=1).replace('gpu="GPU1"', 'gpu="cuda1"')
            + _bucket("5-6MB"))
    rows, quarantine, chunks, _ = _read(text)
    assert rows["bytes_low"].to_list() == [1 * MiB, 5 * MiB]
    assert quarantine.select("line_no", "reason").rows() == [
        (3, 'value {version="v5.1",node="gpu-b03",gpu="GP is not a number'),
        (4, "message_size 3-4XB is not <low>-<high><B|KB|MB|GB|TB>"),
        (5, "message_size 3-4XB is not <low>-<high><B|KB|MB|GB|TB>"),
        (6, "gpu label cuda1 is not GPU<index>"),
        (7, "gpu label cuda1 is not GPU<index>"),
    ]
    assert quarantine["source"].unique().to_list() == [STANDARD_NAME]
    assert quarantine["raw"][0].startswith("nccl_bus_bandwidth_gbs{")
    assert sum(c.lines for c in chunks) == 9


def test_nccl_228_per_op_layout_is_quarantined_with_a_way_out():
    old = ('nccl_bus_bandwidth_gbs{comm_id="0x7f",hostname="gpu-b03",rank="0",slurm_job="x",'
           'slurm_job_id="1",nranks="8",n_nodes="1",gpu_device_id="GPU0",collective="AllReduce",'
           'coll_sn="12",timestamp="2025-10-14T09:20:00Z",message_size="12.00MB"} 21.5\n')
    rows, quarantine, _, _ = _read(old)
    assert rows.height == 0
    assert "NCCL 2.28" in quarantine["reason"][0] and "JSON Lines" in quarantine["reason"][0]


def test_device_totals_skipped_and_counted():
    totals = ('nccl_collectives_total{version="v5.1",slurm_job_id="1",node="n",gpu="GPU0"} 42\n'
              'nccl_collectives_dropped_total{version="v5.1",slurm_job_id="1",node="n",gpu="GPU0"}'
              ' 0\n')
    rows, quarantine, chunks, notes = _read(_bucket("1-2MB") + totals)
    assert rows.height == 1 and quarantine.height == 0
    assert sum(c.skipped for c in chunks) == 2
    assert "skipped other NCCL metrics: nccl_collectives_dropped_total, nccl_collectives_total" \
        in notes


def test_time_from_markers_file_name_and_option():
    snapshots = "# ts=1760433600\n" + _bucket("1-2MB") + "# ts=1760433630\n" + _bucket("1-2MB")
    rows, _, chunks, notes = _read(snapshots)
    assert rows["ts_ns"].to_list() == [1760433600 * 10**9, 1760433630 * 10**9]
    assert sum(c.skipped for c in chunks) == 2  # the two markers
    assert not any("--option ts=" in n for n in notes)
    named = _read(_bucket("1-2MB"), f"nccl_inspector_metrics_{UUID}_1760433660.prom")[0]
    assert named["ts_ns"].to_list() == [1760433660 * 10**9]
    assert named["gpu_uuid"].to_list() == [None]  # not the standard name any more
    forced = _read(_bucket("1-2MB"), options={"ts": "2025-10-14T09:21:30Z"})[0]
    assert forced["ts_ns"].to_list() == [1760433690 * 10**9]


def test_pairs_split_across_batches_become_one_row(monkeypatch):
    text = "".join(_bucket(f"{n}-{n + 1}MB", exec_us=str(n)) for n in range(1, 6))
    monkeypatch.setattr(nccl_inspector_prom, "iter_line_batches",
                        functools.partial(iter_line_batches, batch_bytes=300))
    rows, _, chunks, notes = _read(text)
    assert len([c for c in chunks if c.lines]) > 3  # really several batches
    assert rows["exec_time_mean_us"].to_list() == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert rows["busbw_geomean_gbs"].to_list() == [20.0] * 5
    assert len(notes) == 1 and "--option ts=" in notes[0]  # no bucket left half-filled


def test_bucket_missing_its_time_sample_kept_with_a_note():
    text = _bucket("1-2MB") + _bucket("2-3MB").splitlines(keepends=True)[0]
    rows, _, _, notes = _read(text)
    assert rows.select("bytes_low", "busbw_geomean_gbs", "exec_time_mean_us").rows() == [
        (1 * MiB, 20.0, 100.0), (2 * MiB, 20.0, None)]
    assert any(n.startswith("1 buckets have only one") for n in notes)


def test_sniffing_sends_inspector_files_here_and_exporters_elsewhere(formats_dir, sample):
    def fmt(path: Path) -> str:
        return registry.sniff(Source.from_bytes(path.name, path.read_bytes())).format

    assert fmt(sample) == "nccl-inspector-prom"
    assert fmt(formats_dir / "dcgm_exporter.prom") == "prometheus-text"
    assert fmt(formats_dir / "node_exporter_infiniband.prom") == "prometheus-text"
    assert fmt(next(formats_dir.glob("nccl_inspector_gpu-*.log"))) == "nccl-inspector"
    renamed = Source.from_bytes("metrics.txt", sample.read_bytes())
    assert registry.sniff(renamed).format == "nccl-inspector-prom"
    reader = NcclInspectorPromReader()
    assert not reader.sniff(Source.from_bytes(STANDARD_NAME, b""))
    assert not reader.sniff(Source.from_bytes(STANDARD_NAME, b"# HELP only a comment\n"))
    assert reader.sniff(Source.from_bytes(STANDARD_NAME, b"# comment\nnccl_p2p_total 4\n"))


def test_reingest_is_idempotent(sample, tmp_path):
    out = tmp_path / "ds"
    first = ingest([sample], out, options={"ts": "1760433600"})
    second = ingest([sample], out, options={"ts": "1760433600"})
    assert not first.failed and first.sources[0].rows == {"collective_buckets": 3}
    assert second.sources[0].status == "unchanged"
    table = open_dataset(out).table("collective_buckets").collect()
    assert table.height == 3
    assert table["ts_ns"].unique().to_list() == [1760433600 * 10**9]
    assert table["job"].null_count() == 0

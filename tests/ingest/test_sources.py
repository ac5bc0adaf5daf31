"""Walking inputs: folders in order, archives member by member, hostile archives refused."""

from __future__ import annotations

import gzip
import io
import tarfile

import pytest

from tracekit.core.dataset import open_dataset
from tracekit.core.errors import InputError
from tracekit.ingest.limits import Limits
from tracekit.ingest.pipeline import ingest
from tracekit.ingest.sources import iter_sources


def make_tar(path, members: dict[str, bytes], mode="w:gz", link: str | None = None):
    with tarfile.open(path, mode) as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        if link:
            info = tarfile.TarInfo(link)
            info.type = tarfile.SYMTYPE
            info.linkname = "/etc/passwd"
            archive.addfile(info)
    return path


def test_folder_is_walked_sorted_skipping_hidden(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "2.log").write_text("x")
    (tmp_path / "a.log").write_text("y")
    (tmp_path / ".cache").mkdir()
    (tmp_path / ".cache" / "z.log").write_text("z")
    names = [s.name for s in iter_sources([tmp_path])]
    assert names == [str(tmp_path / "a.log"), str(tmp_path / "b" / "2.log")]


def test_archive_members_are_read_without_extracting(tmp_path):
    archive = make_tar(tmp_path / "dump.tar.gz", {"logs/r0.log": b"hello\n", "r1.log": b"x"})
    sources = []
    for source in iter_sources([archive]):
        with source.open() as stream:
            sources.append((source.name, stream.read(), source.sha256[:8]))
    assert [(n.split("!")[1], d) for n, d, _ in sources] == [("logs/r0.log", b"hello\n"),
                                                            ("r1.log", b"x")]
    assert list(tmp_path.iterdir()) == [archive]


@pytest.mark.parametrize("member, message", [
    ("../escape.log", "contains '..'"),
    ("/etc/cron.d/x", "absolute path"),
])
def test_traversal_in_archive_is_refused(tmp_path, member, message):
    archive = make_tar(tmp_path / "bad.tar", {member: b"x"}, mode="w")
    with pytest.raises(InputError, match=message) as error:
        list(iter_sources([archive]))
    assert "bad.tar!" in str(error.value)


def test_link_in_archive_is_refused(tmp_path):
    archive = make_tar(tmp_path / "bad.tgz", {"ok.log": b"x"}, link="passwd")
    with pytest.raises(InputError, match="is a link"):
        list(iter_sources([archive]))


def test_decompressed_size_is_capped(tmp_path):
    archive = make_tar(tmp_path / "bomb.tar.gz", {"a": b"0" * 4000, "b": b"0" * 4000})
    with pytest.raises(InputError, match=r"bomb.tar.gz!b: the archive's decompressed size "
                       r"exceeds the limit of 5,000 bytes; .* --option max_archive_bytes=N"):
        list(iter_sources([archive], Limits(max_archive_bytes=5000)))


def test_compression_ratio_is_capped_before_spooling(tmp_path):
    """A 10 GiB-of-zeros bomb in miniature: 80 MiB of zeros packs into ~80 KB, a ratio of
    ~1000x; it is refused from the tar header, before one byte of it is decompressed."""
    archive = tmp_path / "bomb.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("zeros.log")
        info.size = 80 * 1024**2
        tar.addfile(info, io.BytesIO(bytes(info.size)))
    with pytest.raises(InputError, match=r"bomb.tar.gz!zeros.log: the archive expands \d[\d,]*x "
                       r"its size \(limit 200x"):
        next(iter_sources([archive]))


def test_corrupt_archive_is_a_clear_error(tmp_path):
    (tmp_path / "broken.tar.gz").write_bytes(b"\x1f\x8b not really gzip")
    with pytest.raises(InputError, match="broken.tar.gz: not a readable tar archive"):
        list(iter_sources([tmp_path / "broken.tar.gz"]))


def _random_bytes(n: int) -> bytes:
    """Bytes that do not compress, so cutting the archive lands inside this member."""
    import random

    return random.Random(3).randbytes(n)


@pytest.mark.parametrize("suffix, mode", [(".tar.gz", "w:gz"), (".tar.xz", "w:xz"),
                                          (".tar", "w")])
def test_truncated_archive_yields_its_complete_members_then_names_the_cut_one(
        tmp_path, suffix, mode):
    whole = make_tar(tmp_path / f"whole{suffix}", {"a.log": b"first\n", "b.log": b"second\n",
                                                   "big.bin": _random_bytes(200_000),
                                                   "z.log": b"last\n"}, mode=mode)
    cut = tmp_path / f"cut{suffix}"
    cut.write_bytes(whole.read_bytes()[:100_000])
    read = []
    with pytest.raises(InputError) as raised:
        for source in iter_sources([cut]):
            with source.open() as stream:
                read.append((source.name.rsplit("!", 1)[1], stream.read()))
    assert read == [("a.log", b"first\n"), ("b.log", b"second\n")]
    assert raised.value.path == f"{cut}!big.bin"
    assert str(raised.value).startswith(f"{cut}!big.bin: truncated or corrupt archive (")
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("cut_at", [1024, 1024 + 100], ids=["at-a-header", "inside-a-header"])
def test_archive_cut_between_members_names_the_last_one_read(tmp_path, cut_at):
    """tarfile ends quietly at a cut header, as if the archive were complete."""
    whole = make_tar(tmp_path / "whole.tar", {"a.log": b"first\n", "b.log": b"second\n"},
                     mode="w")
    (tmp_path / "cut.tar").write_bytes(whole.read_bytes()[:cut_at])
    names = []
    with pytest.raises(InputError, match=r"cut.tar: truncated or corrupt archive after member "
                       r"a.log \(it ends inside a header"):
        names.extend(source.name for source in iter_sources([tmp_path / "cut.tar"]))
    assert names == [f"{tmp_path / 'cut.tar'}!a.log"]


def _damaged_gzip(tmp_path, seed: int) -> tuple:
    """A gzip archive of two members with 100 random bytes written over the second's data."""
    import random

    rng = random.Random(5)
    text = b"".join(b"%d %s\n" % (i, bytes(rng.choice(b"abcdefghij") for _ in range(20)))
                    for i in range(5000))
    whole = make_tar(tmp_path / "whole.tar.gz", {"a.log": b"first\n" * 1000, "b.log": text})
    data = bytearray(whole.read_bytes())
    data[len(data) // 2:len(data) // 2 + 100] = random.Random(seed).randbytes(100)
    (tmp_path / "bad.tar.gz").write_bytes(bytes(data))
    return tmp_path / "bad.tar.gz"


def test_corrupt_bytes_inside_a_gzip_member(tmp_path):
    bad = _damaged_gzip(tmp_path, seed=2)  # an invalid deflate block: fails in the member
    names = []
    with pytest.raises(InputError, match=r"bad.tar.gz!b.log: truncated or corrupt archive "
                       r"\(Error -3 while decompressing data"):
        names.extend(source.name for source in iter_sources([bad]))
    assert names == [f"{bad}!a.log"]


def test_corrupt_bytes_that_decompress_fail_the_checksum_at_the_end(tmp_path):
    """Damage that still decodes is only found by the gzip CRC, after the members."""
    bad = _damaged_gzip(tmp_path, seed=0)
    with pytest.raises(InputError, match=r"bad.tar.gz: truncated or corrupt archive after member "
                       r"b.log \(CRC check failed .*\); the members were read, but one of them "
                       "holds damaged bytes"):
        list(iter_sources([bad]))


def test_gzip_files_are_read_gunzipped_under_their_own_names(tmp_path):
    """Log rotation's ``*.prom.gz`` and ``*.txt.gz``: every one was refused, and a job's
    monitoring was lost (its thermal GPU judged without DCGM samples)."""
    host = "a100-rack3-n07.cluster.example.com"
    folder = tmp_path / "dump" / host
    folder.mkdir(parents=True)
    (folder / f"dcgm.{host}.1782736574.prom.gz").write_bytes(gzip.compress(
        f'DCGM_FI_DEV_SM_CLOCK{{gpu="0",UUID="GPU-1",Hostname="{host}"}} 1410\n'.encode()))
    for ts, cnp in ((1782736574, 10), (1782736589, 40)):
        (folder / f"hwc.{host}.{ts}.txt.gz").write_bytes(gzip.compress(
            f"/sys/class/infiniband/mlx5_0/ports/1/hw_counters/np_cnp_sent:{cnp}\n".encode()))
    (folder / "hwc.cut.1782736604.txt.gz").write_bytes(gzip.compress(b"x" * 100)[:-12])
    summary = ingest([tmp_path / "dump"], tmp_path / "ds")
    dataset = open_dataset(tmp_path / "ds")
    gpu = dataset["gpu_metrics"].collect()
    assert gpu.select("host", "metric", "value", "ts_ns").row(0) == (
        "a100-rack3-n07", "sm_clock_mhz", 1410.0, 1782736574 * 10**9)
    nic = dataset["nic_counters"].sort("ts_ns").collect()
    assert nic.select("host", "value").rows() == [("a100-rack3-n07", 10),
                                                  ("a100-rack3-n07", 40)]
    [cut] = [s for s in summary.sources if s.status == "failed"]
    assert cut.error.startswith(f"{folder}/hwc.cut.1782736604.txt.gz: gzip data is truncated "
                                "or damaged (")
    assert sorted(s.status for s in summary.sources) == ["failed"] + ["ingested"] * 3

"""Walking inputs: folders in order, archives member by member, hostile archives refused."""

from __future__ import annotations

import io
import tarfile

import pytest

from tracekit.core.errors import InputError
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
    with pytest.raises(InputError, match="expands beyond 5000 bytes"):
        list(iter_sources([archive], max_archive_bytes=5000))


def test_corrupt_archive_is_a_clear_error(tmp_path):
    (tmp_path / "broken.tar.gz").write_bytes(b"\x1f\x8b not really gzip")
    with pytest.raises(InputError, match="broken.tar.gz: not a readable tar archive"):
        list(iter_sources([tmp_path / "broken.tar.gz"]))

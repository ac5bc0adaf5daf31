"""Turn the paths a user names into :class:`Source` objects: files, folders and tar archives.

Archives are read member by member without extracting anything to disk. Members with absolute
names, ``..`` components or links are refused (a dump is untrusted input), and the decompressed
size is capped, in total and per compressed byte (:class:`~tracekit.ingest.limits.Limits`), so
a compression bomb cannot fill the disk or memory.
"""

from __future__ import annotations

import gzip
import lzma
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath

from tracekit.core.errors import InputError
from tracekit.ingest.base import Source
from tracekit.ingest.limits import EXPANSION_GRACE_BYTES, Limits, too_large

ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")
SPOOL_IN_MEMORY_BYTES = 64 * 1024**2
"""Archive members up to this size are held in memory, larger ones spill to a temporary file."""
IGNORED_NAMES = {"manifest.json", ".DS_Store"}
ARCHIVE_DAMAGE = (tarfile.TarError, EOFError, OSError, zlib.error, lzma.LZMAError)
"""What reading a truncated or corrupt archive raises: tarfile's errors, ``EOFError`` from
gzip / bz2 / xz streams cut short, ``OSError`` (a bad gzip header), zlib and lzma errors on
damaged bytes."""


def is_archive(path: Path | str) -> bool:
    return str(path).lower().endswith(ARCHIVE_SUFFIXES)


def input_files(paths: list[Path]) -> list[Path]:
    """Every input file under ``paths`` in a stable order (folders walked sorted, recursively,
    hidden entries and tracekit's own files skipped).

    Missing paths are an error before anything is read, so a typo never half-ingests a dump.
    """
    for path in paths:
        if not path.exists():
            raise InputError("no such file or folder", str(path))
    files = []
    for path in paths:
        found = (sorted(p for p in path.rglob("*") if p.is_file() and not _hidden(p, path))
                 if path.is_dir() else [path])
        files.extend(f for f in found if f.name not in IGNORED_NAMES)
    return files


Refusal = Callable[[InputError], None]
"""Told of an archive member refused for its name or type, so the members after it are still
read (without one, the refusal is raised)."""


def iter_sources(paths: list[Path], limits: Limits | None = None,
                 on_refused: Refusal | None = None) -> Iterator[Source]:
    """Every input under ``paths`` as sources: files as they are, archives member by member."""
    for file in input_files(paths):
        if is_archive(file):
            yield from iter_archive(file, limits or Limits(), on_refused)
        else:
            yield _file_source(file)


def _hidden(path: Path, root: Path) -> bool:
    return any(part.startswith(".") for part in path.relative_to(root).parts)


def _file_source(path: Path) -> Source:
    try:
        size = path.stat().st_size
        with path.open("rb"):
            pass
    except OSError as error:
        raise InputError(f"cannot read: {error.strerror}", str(path)) from None
    return Source(str(path), size, lambda: path.open("rb"))  # noqa: SIM115 (caller closes)


def iter_archive(path: Path, limits: Limits | None = None,
                 on_refused: Refusal | None = None) -> Iterator[Source]:
    """The regular-file members of a tar archive as sources, after safety checks. Members'
    sizes are checked against the limits before each is spooled (the tar header gives them).
    A truncated or corrupt archive yields its complete members, then raises one error naming
    the member it could not read (:func:`_damaged`); a member is yielded only once it is whole."""
    limits = limits or Limits()
    packed = path.stat().st_size
    try:
        archive = tarfile.open(path, mode="r:*")  # noqa: SIM115 (closed by the with below)
    except (tarfile.TarError, OSError) as error:
        raise InputError(f"not a readable tar archive: {error}", str(path)) from None
    total, last = 0, None
    members = iter(archive)
    with archive:
        while True:
            try:
                member = next(members, None)
            except ARCHIVE_DAMAGE as error:
                raise _damaged(path, error, after=last) from None
            if member is None:
                _check_end(archive, path, last)
                break
            archive.members.clear()  # read once: tarfile would keep every header (450 B each)
            name = f"{path}!{member.name}"
            try:
                _check_member(member, name)
            except InputError as refusal:
                if on_refused is None:
                    raise
                on_refused(refusal)
                continue
            if not member.isfile():
                continue
            total += member.size
            _check_expansion(total, packed, limits, name)
            stream = archive.extractfile(member)
            if stream is None:
                continue
            spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY_BYTES)  # noqa: SIM115
            try:
                while block := stream.read(1 << 22):
                    spool.write(block)
                if spool.tell() < member.size:  # an uncompressed .tar cut inside a member
                    raise tarfile.ReadError("unexpected end of data")
            except ARCHIVE_DAMAGE as error:
                spool.close()
                raise _damaged(path, error, member=member.name) from None
            last = member.name
            yield _spooled_source(name, member.size, spool)
            spool.close()


def is_gzip(source: Source) -> bool:
    """A single gzip-compressed file (a tar archive is read as one before it is a source)."""
    return source.head.startswith(b"\x1f\x8b")


def gunzipped(source: Source) -> Source:
    """A gzip file that no reader reads itself (log rotation's ``dcgm.gpu01.<unix>.prom.gz``,
    ``nccl.log.gz``) as its decompressed bytes, under its own name: spooled as an archive
    member is, and refused past the same limits (an archive of one member)."""
    spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY_BYTES)  # noqa: SIM115
    total = 0
    try:
        with source.open() as raw, gzip.GzipFile(fileobj=raw) as stream:
            while block := stream.read(1 << 22):
                total += len(block)
                # against the compressed bytes read so far: a bomb stops before it spills
                _check_expansion(total, raw.tell(), source.limits, source.name, "file")
                spool.write(block)
    except (OSError, EOFError, zlib.error) as error:
        spool.close()
        raise InputError(f"gzip data is truncated or damaged ({error}); copy the file again",
                         source.name) from None
    except InputError:
        spool.close()
        raise
    gunzipped = _spooled_source(source.name, total, spool)
    gunzipped.limits = source.limits
    return gunzipped


def _check_end(archive: tarfile.TarFile, path: Path, last: str | None) -> None:
    """Refuse an archive that ends inside a header or without its end-of-archive block, or
    whose compressed stream fails its checksum: tarfile stops at the end-of-archive block
    silently, as if the archive were complete, before the gzip / xz trailer that holds the
    checksum. Its last read is the 512 bytes of the block after the last member: fewer mean
    the archive was cut; reading the padding after it checks the stream."""
    if archive.fileobj.tell() - archive.offset < tarfile.BLOCKSIZE:
        raise _damaged(path, tarfile.ReadError("it ends inside a header, without the "
                                               "end-of-archive block"), after=last)
    try:
        while archive.fileobj.read(1 << 16):
            pass
    except ARCHIVE_DAMAGE as error:
        raise _damaged(path, error, after=last, checksum=True) from None


def _damaged(path: Path, error: Exception, member: str | None = None, after: str | None = None,
             checksum: bool = False) -> InputError:
    """One line for an archive that ends early or holds damaged bytes: the member that could
    not be read, or the last one read before the damage, and what was kept."""
    reason = str(error) or type(error).__name__
    if member:
        return InputError(f"truncated or corrupt archive ({reason}); this member and any after "
                          "it were not read, the complete ones before it were: copy the "
                          "archive again", f"{path}!{member}")
    if checksum:
        kept = "the members were read, but one of them holds damaged bytes"
    elif after:
        kept = "the members up to it were read"
    else:
        kept = "no member could be read"
    place = f" after member {after}" if after else ""
    return InputError(f"truncated or corrupt archive{place} ({reason}); {kept}: copy the "
                      "archive again", str(path))


def _check_expansion(total: int, packed: int, limits: Limits, name: str,
                     what: str = "archive") -> None:
    """Refuse an archive whose members up to ``name`` (or a gzip file) decompress beyond the
    limits."""
    if total > limits.max_archive_bytes:
        raise InputError(too_large(f"the {what}'s decompressed size",
                                   limits.max_archive_bytes, "max_archive_bytes"), name)
    if total > EXPANSION_GRACE_BYTES and total > limits.max_expansion * packed:
        raise InputError(f"the {what} expands {total // max(packed, 1):,}x its size (limit "
                         f"{limits.max_expansion}x: a compression bomb?); if it is trusted, "
                         "raise it with --option max_expansion=N", name)


def _check_member(member: tarfile.TarInfo, name: str) -> None:
    parts = PurePosixPath(member.name).parts
    if member.name.startswith(("/", "\\")) or (parts and ":" in parts[0]):
        raise InputError("archive member has an absolute path; refusing to read it", name)
    if ".." in parts:
        raise InputError("archive member path contains '..'; refusing to read it", name)
    if member.issym() or member.islnk():
        raise InputError("archive member is a link; refusing to read it", name)


class _Unclosable:
    """A view of a spooled file that rewinds on open and survives readers' ``with`` blocks."""

    def __init__(self, spool):
        self._spool = spool

    def __enter__(self):
        return self._spool

    def __exit__(self, *exc):
        return False

    def __getattr__(self, name):
        return getattr(self._spool, name)

    def close(self) -> None:
        """Readers close what they open; the spool lives until the next archive member."""


def _spooled_source(name: str, size: int, spool) -> Source:
    def opener():
        spool.seek(0)
        return _Unclosable(spool)

    return Source(name, size, opener)

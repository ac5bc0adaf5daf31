"""The reader interface every input format implements, and the pieces readers share.

A reader knows one format family: it recognises a file from its first bytes (``sniff``) and
turns it into canonical tables (``read``), chunk by chunk so a file larger than memory streams.
Readers never print and never write; the ingest pipeline does both.
"""

from __future__ import annotations

import hashlib
import io
import queue
import re
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import BinaryIO, ClassVar, TypeVar

import polars as pl

from tracekit.core import schema
from tracekit.core.errors import InputError
from tracekit.ingest.limits import POLARS_DECOMPRESSES, Limits, too_large

SNIFF_BYTES = 64 * 1024
"""How much of a file readers see when sniffing its format."""

LINE_BATCH_BYTES = 16 * 1024 * 1024
"""Text readers parse this many bytes of whole lines at a time. It bounds memory per reader (a
batch's parsed columns take several times its bytes; with read-ahead three batches are alive).
Smaller is not slower: the hook CSV and NCCL readers spent the same CPU time per byte at 4 and
16 MiB and 20-40% more at 64 MiB (cache misses), benchmarks/bench_ingest.py data."""

LONE_CR = re.compile(rb"\r(?!\n)")
"""A carriage return that does not start a CRLF: a line end of its own."""

BYTE_ORDER_MARK = b"\xef\xbb\xbf"
"""UTF-8's byte-order mark, which some exporters write first."""

PYTHON_SPLIT_BYTES = 256 * 1024
"""Blocks shorter than this are split into lines by Python (``bytes.decode`` and
``str.split``), longer ones by polars' CSV reader: its call costs about 1 ms whatever the
block (0.8-1.7 ms CPU from 4 to 256 KiB), which Python's split, at about 0.7 GB/s, reaches
near 1 MiB; a quarter of that keeps Python well under it. The lines a compiled scan leaves
(Init and other-subsystem lines, ~130 KB a 16 MiB NCCL block) and small files are split
this way."""

LINE_SPLIT_SEPARATORS = (b"\x1f", b"\x1e", b"\x1d", b"\x1c", b"\x00")
"""Bytes that :func:`iter_line_batches` may hand the CSV reader as its field separator: the
ASCII unit / record / group / file separators, which text logs essentially never contain. A
batch holding all of them is split the slower way."""


@dataclass
class Source:
    """One input file: a path on disk or a member of an archive.

    ``name`` is what users see in messages and in the quarantine (``a.tar.gz!rank0.log`` for an
    archive member). ``opener`` returns a fresh binary stream positioned at the start.
    """

    name: str
    size: int
    opener: Callable[[], BinaryIO]
    limits: Limits = field(default_factory=Limits)
    """What reading it may cost; set by the ingest pipeline from the ``--option`` overrides."""
    hash_while_reading: bool = False
    """Set by the ingest pipeline: :func:`iter_line_blocks` then computes :attr:`sha256` from
    the bytes it reads anyway, so a new file is read once, not once to hash and once to parse."""
    names: pl.DataType = field(default_factory=pl.String)
    """The dtype of the name columns (host, comm, op, dtype) a reader gives where it holds their
    few distinct texts as ids anyway (a compiled scan's): set by the ingest pipeline to
    Categorical with the source's own categories, which its part writer codes every frame's
    names with (``pipeline.CODED_COLUMNS``), so those rows are not hashed again; String
    elsewhere, as any reader may give them."""
    overlong: deque[tuple[int, bytes, int]] = field(default_factory=deque)
    """Lines set aside for their length by :func:`iter_line_blocks` (line number, first bytes,
    length), which :func:`quarantine_overlong` quarantines: the reader saw an empty line in
    their place. A deque: the splitter may run in a read-ahead thread."""
    _sha256: str | None = None
    _head: bytes | None = None

    def open(self) -> BinaryIO:
        return self.opener()

    @property
    def head(self) -> bytes:
        """The first :data:`SNIFF_BYTES` bytes."""
        if self._head is None:
            with self.open() as stream:
                self._head = stream.read(SNIFF_BYTES)
        return self._head

    @property
    def head_text(self) -> str:
        """:attr:`head` decoded as UTF-8, undecodable bytes replaced."""
        return self.head.decode("utf-8", errors="replace")

    @property
    def file_name(self) -> str:
        """The last path component (of the member, for an archive member)."""
        return self.name.rsplit("!", 1)[-1].replace("\\", "/").rsplit("/", 1)[-1]

    @property
    def sha256(self) -> str:
        """The content hash; read from the file unless a full read already computed it."""
        if self._sha256 is None:
            digest = hashlib.sha256()
            with self.open() as stream:
                while block := stream.read(1 << 22):
                    digest.update(block)
            self._sha256 = digest.hexdigest()
        return self._sha256

    @classmethod
    def from_bytes(cls, name: str, data: bytes) -> Source:
        """A source held in memory (tests, small archive members)."""
        return cls(name, len(data), lambda: io.BytesIO(data))


@dataclass
class Chunk:
    """What a reader produced from one stretch of a source.

    ``lines`` counts input lines (or records) consumed, ``skipped`` those that belong to no
    table of this format (other subsystems, comments), and the quarantine frame holds those
    that belong to the format but could not be parsed. For line formats
    ``rows - derived + skipped + quarantined == lines``.
    """

    tables: dict[str, pl.DataFrame] = field(default_factory=dict)
    quarantine: pl.DataFrame | None = None
    lines: int = 0
    skipped: int = 0
    derived: int = 0
    """Rows not read from a line of their own (a clock-event flag row per flag of a bitmask
    sample), minus lines folded into another line's row (CPU modes summed into one share)."""
    bytes_read: int = 0
    notes: list[str] = field(default_factory=list)
    step_axis: str | None = None
    """What its iterations' numbers count where not iterations
    (:data:`~tracekit.core.dataset.SAMPLE_SECONDS`), recorded with the source."""
    host_aliases: dict[str, str] = field(default_factory=dict)
    """Addresses the source pairs with a host name (a scrape ``instance`` beside DCGM's
    ``Hostname``): how the job's sources that name only the address get the host
    (:mod:`tracekit.ingest.hosts`)."""


def read_parquet(source: Source) -> pl.DataFrame:
    """A Parquet source as one frame; a file that is not Parquet is one error naming it."""
    try:
        with source.open() as stream:
            return pl.read_parquet(stream)
    except (OSError, ValueError, pl.exceptions.PolarsError) as error:
        raise InputError(f"not a readable Parquet file: {error}", source.name) from None


class Reader:
    """Base of all format readers. Subclasses set the class attributes and implement
    :meth:`sniff` and :meth:`read`."""

    format: ClassVar[str]
    """Short format name users pass to ``--format`` (``nccl-debug``, ``hook-csv``, ...)."""
    version: ClassVar[str] = "1"
    """Parser version, recorded in the manifest; bump it when output for the same input changes."""
    tables: ClassVar[tuple[str, ...]]
    """Canonical tables this reader can produce."""
    priority: ClassVar[int] = 100
    """Lower sniffs first; give specific formats a lower number than catch-all ones."""
    description: ClassVar[str] = ""
    options: ClassVar[tuple[str, ...]] = ()
    """The ``--option`` keys the reader uses: any other key is refused before ingest starts."""
    decompresses: ClassVar[bool] = False
    """The reader reads a gzip file itself, bounding its expansion (Kineto writes
    ``.json.gz``); other compressed single files are refused before any reader sees them."""
    rows_depend_on_name: ClassVar[bool] = False
    """The file's name supplies its rows' time or host (snapshot dumps): the same bytes under
    two names are two sources, e.g. two scrapes 15 s apart that served the same values."""

    def source_key(self, source: Source) -> str:
        """What identifies a source's rows: its content hash, and its name where the name is
        part of the data (:attr:`rows_depend_on_name`)."""
        if not self.rows_depend_on_name:
            return source.sha256
        return hashlib.sha256(f"{source.sha256}\0{source.file_name}".encode()).hexdigest()

    def sniff(self, source: Source) -> bool:
        """True when ``source`` is in this format; look at ``source.head`` and the file name."""
        raise NotImplementedError

    def read(self, source: Source, options: dict[str, str]) -> Iterator[Chunk]:
        """Parse ``source`` into chunks of canonical tables."""
        raise NotImplementedError


@dataclass
class LineBatch:
    """A run of whole lines of a text source: ``lines`` (without line ends) and the 1-based
    number of the first one."""

    lines: pl.Series
    first_line_no: int
    bytes_read: int

    @classmethod
    def from_block(cls, data: bytes, first_line_no: int) -> LineBatch:
        """The lines of ``data`` (whole lines; the last one may lack its line end).

        Polars' multi-threaded CSV reader, told there is one column, no quoting and a separator
        the block does not contain, splits lines several times faster than decoding and
        splitting one string; it drops the ``\\r`` of ``\\r\\n``, replaces undecodable bytes
        and a leading byte-order mark, and reads an empty line as null. A block of fewer than
        :data:`PYTHON_SPLIT_BYTES` is split by Python, the same way.
        """
        separator = next((s for s in LINE_SPLIT_SEPARATORS if s not in data), None)
        if (len(data) < PYTHON_SPLIT_BYTES or separator is None
                or data.startswith(POLARS_DECOMPRESSES)):  # polars would decompress it
            text = data.decode("utf-8", errors="replace").removeprefix("\ufeff")
            lines = pl.Series("line", [line.removesuffix("\r")
                                       for line in text.removesuffix("\n").split("\n")],
                              dtype=pl.String)
        else:
            lines = pl.read_csv(
                polars_bytes(data), has_header=False, separator=separator.decode(),
                quote_char=None, new_columns=["line"], schema_overrides={"line": pl.String},
                encoding="utf8-lossy",
            ).to_series().fill_null("")
        return cls(lines, first_line_no, len(data))

    def frame(self) -> pl.DataFrame:
        """The lines as a frame with ``line_no`` and ``line`` columns."""
        return pl.DataFrame({"line": self.lines}).with_row_index(
            "line_no", offset=self.first_line_no
        ).with_columns(pl.col("line_no").cast(pl.Int64))


def polars_bytes(data: bytes | bytearray) -> bytes:
    """``data`` as polars' readers take it: a block read into a reused buffer
    (:class:`_ReusedBuffers`) is copied, which only the paths that hand a block to polars pay."""
    return bytes(data) if isinstance(data, bytearray) else data


def iter_line_blocks(source: Source, batch_bytes: int = LINE_BATCH_BYTES,
                     reuse: bool = False) -> Iterator[bytes | bytearray]:
    """The bytes of a text source in blocks of whole lines (about ``batch_bytes`` each; a line
    longer than that makes its block longer). The last block may end without a line end.

    With ``reuse`` (a source of several blocks) a file's blocks are ``bytearray`` buffers read
    into again once nothing refers to them (:class:`_ReusedBuffers`); a caller that keeps a
    block keeps its buffer out of reuse.

    Line ends may be ``\n``, ``\r\n`` or, where the first :data:`SNIFF_BYTES` show them,
    ``\r`` alone (old exporters, a damaged copy; :class:`_LoneCrAsLineEnd`): looking at the
    head only costs a ``\n`` file nothing.

    A line longer than ``source.limits.max_line_bytes`` is set aside (:attr:`Source.overlong`,
    to be quarantined with its number) and an empty line stands in for it, so the numbers of
    the lines after it hold and one long line never costs the file. Its bytes are skipped, not
    held: memory stays bounded by the limit.

    With ``source.hash_while_reading`` the blocks also feed the source's sha256 (hashlib
    releases the GIL, so this overlaps with the caller's work), set once the whole file is read
    (unless a line was skipped unread: then it is hashed again when asked).
    """
    digest = hashlib.sha256() if source.hash_while_reading and source._sha256 is None else None
    max_line, line_no = source.limits.max_line_bytes, 1
    with source.open() as stream:
        head = source._head if source._head is not None else _peek(stream)
        if b"\r" in head and LONE_CR.search(head):
            stream, digest = _LoneCrAsLineEnd(stream), None
        numbers = _LineNumbers(stream) if stream.seekable() else None
        if numbers is None:
            blocks = _cut_line_blocks(stream, batch_bytes, max_line)
        else:
            # enough for the blocks in flight (on the parse threads, read ahead, the caller's)
            buffers = (_ReusedBuffers(batch_bytes + LINE_END_PEEK_BYTES, 2 * PARSE_WORKERS + 2)
                       if reuse and hasattr(stream, "readinto") else None)
            blocks = _seek_line_blocks(stream, batch_bytes, max_line, buffers)
        while True:
            # the number of this block's first line, asked only where a long line is found
            block_line_no = partial(int, line_no) if numbers is None else partial(
                numbers.at, stream.tell())
            block = next(blocks, None)
            if block is None:
                break
            if isinstance(block, _Overlong):
                source.overlong.append((block_line_no(), block.head, block.length))
                block, digest = b"\n", None
            else:
                if digest is not None:
                    digest.update(block)
                if len(block) > max_line:  # only then can a line inside it be too long
                    block = _set_aside_long_lines(block, block_line_no, source)
            if numbers is None:  # a pipe cannot be read again: count its lines as they pass
                line_no += block.count(b"\n")
            yield block
    if digest is not None:
        source._sha256 = digest.hexdigest()


class _LineNumbers:
    """Line numbers of byte offsets of a seekable stream whose blocks are read in order, found
    by reading it again from the last offset numbered: only a long line needs its number, so
    good blocks are not counted (5 ms per 16 MiB block), and a file of many long lines is read
    again once in all, not once up to each of them."""

    def __init__(self, stream: BinaryIO):
        self.stream, self.offset, self.line_no = stream, 0, 1

    def at(self, start: int) -> int:
        """The number of the line at byte ``start`` (at or after the last offset asked)."""
        resume = self.stream.tell()
        self.stream.seek(self.offset)
        size = start - self.offset
        while size > 0 and (piece := self.stream.read(min(size, LINE_END_PEEK_BYTES))):
            self.line_no += piece.count(b"\n")
            size -= len(piece)
        self.offset = start
        self.stream.seek(resume)
        return self.line_no


def _peek(stream: BinaryIO) -> bytes:
    """The first :data:`SNIFF_BYTES` of a seekable stream, left at its start (nothing of one
    that cannot seek: its head is known from the sniff)."""
    if not stream.seekable():
        return b""
    head = stream.read(SNIFF_BYTES)
    stream.seek(0)
    return head


class _LoneCrAsLineEnd:
    """A binary stream whose ``\r`` not followed by ``\n`` reads as ``\n``: the same length,
    so positions (seek, tell) are the stream's own. A ``\r\n`` cut between two reads reads as
    two line ends (one empty line, counted as skipped)."""

    def __init__(self, stream: BinaryIO):
        self.stream = stream

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(size)
        return LONE_CR.sub(b"\n", data) if b"\r" in data else data

    def seekable(self) -> bool:
        return self.stream.seekable()

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self.stream.seek(offset, whence)

    def tell(self) -> int:
        return self.stream.tell()


LINE_END_PEEK_BYTES = 64 * 1024
"""How far :func:`_seek_line_blocks` reads at a time while looking for a block's last line end."""


@dataclass
class _Overlong:
    """A line a splitter skipped for its length: its first bytes and its length."""

    head: bytes
    length: int


def _set_aside_long_lines(block: bytes, block_line_no: Callable[[], int],
                          source: Source) -> bytes:
    """``block`` with each line longer than the limit replaced by an empty line (recorded in
    :attr:`Source.overlong`). A line that long leaves a span of half the limit without a line
    end, and only such spans are looked at: a few ``bytes.find`` per block, not a scan of its
    lines. ``block_line_no`` (the number of the block's first line, found by reading the file
    again) is called only when a long line is found: with the default limit, one block, almost
    every block of a file is a line longer than the limit and is looked at, and numbering each
    read the file again up to it (quadratic: 0.39 of 1.07 CPU-s on 136 MB)."""
    limit, step = source.limits.max_line_bytes, max(source.limits.max_line_bytes // 2, 1)
    pieces, kept, at, first_line_no = [], 0, 0, None
    while at < len(block):
        if block.find(b"\n", at, at + step) >= 0 or at + step > len(block):
            at += step
            continue
        start = block.rfind(b"\n", 0, at) + 1
        end = block.find(b"\n", at)
        end = len(block) if end < 0 else end
        if end - start > limit:
            first_line_no = block_line_no() if first_line_no is None else first_line_no
            source.overlong.append((first_line_no + block.count(b"\n", 0, start),
                                    block[start:start + schema.RAW_LINE_LIMIT], end - start))
            # the line end stays (or is added, ending the last line): an empty line stands in
            pieces += [block[kept:start], b"" if end < len(block) else b"\n"]
            kept = end
        at = end + 1
    return b"".join([*pieces, block[kept:]]) if pieces else block


def _seek_line_blocks(stream: BinaryIO, batch_bytes: int, max_line: int,
                      buffers: _ReusedBuffers | None = None,
                      ) -> Iterator[bytes | bytearray | _Overlong]:
    """Blocks of a seekable stream, each read in one piece: where its last line end is found
    first, by peeking past ``batch_bytes``. Cutting a block read blind instead copies it twice
    (slice and join), and the fresh memory costs more than the copying (page faults). A line
    running more than ``max_line`` past the batch ends the block before it, and is skipped.
    With ``buffers``, blocks that fit are read into them."""
    while True:
        start = stream.tell()
        stream.seek(start + batch_bytes)
        try:
            length = batch_bytes + _bytes_to_line_end(stream, max_line)
        except _LineTooLong:
            stream.seek(start)
            whole = stream.read(batch_bytes).rfind(b"\n") + 1
            stream.seek(start)
            if whole:
                yield stream.read(whole)
            yield _skip_line(stream)
            continue
        stream.seek(start)
        block = stream.read(length) if buffers is None else buffers.read(stream, length)
        if not block:
            return
        yield block


class _ReusedBuffers:
    """Buffers a source's blocks are read into, each read into again once nothing but this
    pool refers to it (its reference count says so): a caller, a parse thread or a numpy view
    that still holds a block keeps its buffer out of reuse, so no block is overwritten while
    it is used. A fresh block each time was fresh memory, which the kernel faulted in page by
    page as it copied the file into it (2.8 % of a NCCL log's ingest CPU)."""

    def __init__(self, capacity: int, most: int):
        self.capacity = capacity
        """The longest block a buffer takes (longer ones are read into fresh memory): its
        allocation, so that blocks of slightly different lengths never reallocate it."""
        self.most = most
        """Buffers kept; a block read while all are in use gets fresh memory."""
        self.buffers: list[bytearray] = []

    def read(self, stream: BinaryIO, length: int) -> bytes | bytearray:
        """The next ``length`` bytes of ``stream`` (fewer at its end)."""
        if length > self.capacity:
            return stream.read(length)
        buffer = self._free()
        if buffer is None:
            buffer = bytearray(self.capacity)
            if len(self.buffers) < self.most:
                self.buffers.append(buffer)
        # resized within its allocation: CPython keeps a bytearray's memory down to half of it
        if length < len(buffer):
            del buffer[length:]
        else:
            buffer.extend(bytes(length - len(buffer)))
        view, done = memoryview(buffer), 0
        while done < length and (got := stream.readinto(view[done:])):
            done += got
        view.release()
        del buffer[done:]
        return buffer

    def _free(self) -> bytearray | None:
        for index in range(len(self.buffers)):
            if sys.getrefcount(self.buffers[index]) == 2:  # the list's and the argument's
                return self.buffers[index]
        return None


class _LineTooLong(Exception):
    """A line ran past the limit."""


def _bytes_to_line_end(stream: BinaryIO, max_line: int) -> int:
    """Bytes from the stream's position to just after the next line end (or to the end);
    :class:`_LineTooLong` past ``max_line`` bytes (the line started before the position, so
    this undercounts it by at most a batch: the limit still bounds memory)."""
    length = 0
    while peek := stream.read(LINE_END_PEEK_BYTES):
        end = peek.find(b"\n")
        length += len(peek) if end < 0 else end + 1
        if length > max_line:
            raise _LineTooLong
        if end >= 0:
            break
    return length


def _skip_line(stream: BinaryIO) -> _Overlong:
    """Skip the line at the stream's position, leaving it after its line end."""
    head = peek = stream.read(schema.RAW_LINE_LIMIT)
    length = 0
    while peek:
        end = peek.find(b"\n")
        if end >= 0:
            stream.seek(end + 1 - len(peek), io.SEEK_CUR)
            return _Overlong(head.partition(b"\n")[0], length + end)
        length += len(peek)
        peek = stream.read(LINE_END_PEEK_BYTES)
    return _Overlong(head, length)


def _cut_line_blocks(stream: BinaryIO, batch_bytes: int,
                     max_line: int) -> Iterator[bytes | _Overlong]:
    """Blocks of a stream that cannot seek: read ``batch_bytes`` and keep what follows the
    last line end for the next block; once that exceeds ``max_line``, the line is skipped up to
    its end (its first bytes kept for the quarantine)."""
    pending: list[bytes] = []  # bytes after the last line end (a line may span blocks)
    skipping: _Overlong | None = None
    while block := stream.read(batch_bytes):
        if skipping is not None:
            end = block.find(b"\n")
            skipping.length += len(block) if end < 0 else end
            if end < 0:
                continue
            yield skipping
            skipping, block = None, block[end + 1:]
        cut = block.rfind(b"\n") + 1
        if cut == 0:
            pending.append(block)
            if sum(map(len, pending)) > max_line:
                line = b"".join(pending)
                skipping, pending = _Overlong(line[:schema.RAW_LINE_LIMIT], len(line)), []
            continue
        yield b"".join([*pending, block[:cut]])
        pending = [block[cut:]] if cut < len(block) else []
    if skipping is not None:
        yield skipping
    elif pending:
        yield b"".join(pending)


def quarantine_overlong(chunks: Iterable[Chunk], source: Source) -> Iterator[Chunk]:
    """``chunks`` with the lines :func:`iter_line_blocks` set aside for their length
    quarantined, each with its number: the reader counted the empty line that stood in for it
    as skipped, so it moves from skipped to quarantined and every line stays accounted for."""
    reason = too_large("line", source.limits.max_line_bytes, "max_line_bytes")

    def drained(chunk: Chunk) -> Chunk:
        lines = [source.overlong.popleft() for _ in range(len(source.overlong))]
        if not lines:
            return chunk
        bad = pl.DataFrame({
            "line_no": [line_no for line_no, _, _ in lines],
            "line": [head.decode("utf-8", errors="replace") for _, head, _ in lines],
            "reason": [f"{reason} ({length:,} bytes)" for _, _, length in lines]},
            schema={"line_no": pl.Int64, "line": pl.String, "reason": pl.String})
        rows = quarantine_frame(source, bad)
        chunk.quarantine = rows if chunk.quarantine is None else pl.concat([chunk.quarantine,
                                                                            rows])
        chunk.skipped -= len(lines)
        return chunk

    for chunk in chunks:
        yield drained(chunk)
    if source.overlong:
        yield drained(Chunk())


def iter_line_batches(source: Source, batch_bytes: int = LINE_BATCH_BYTES) -> Iterator[LineBatch]:
    """Split a text source into batches of whole lines without a Python loop per line.

    Line ends may be ``\\n``, ``\\r\\n`` or ``\\r`` (:func:`iter_line_blocks`); undecodable bytes
    are replaced rather than fatal (a torn multi-byte character must not lose the rest of the
    line). A last line without a line end is still returned, so readers can quarantine it as
    truncated. The next batch is read and split while the caller parses this one.
    """

    def batches() -> Iterator[LineBatch]:
        line_no = 1
        for block in iter_line_blocks(source, batch_bytes):
            batch = LineBatch.from_block(block, line_no)
            line_no += len(batch.lines)
            yield batch

    return read_ahead(batches())


T = TypeVar("T")
R = TypeVar("R")

PARSE_WORKERS = 2
"""Threads :func:`map_in_order` works on: one per core of the 2-core machine ingest targets.
Parsing a block (polars, numpy, the compiled scan) runs without the GIL, so two blocks are
parsed at once while other threads read, hash, split by rank and write Parquet."""


def cores() -> int:
    """Cores this thread's work may use: polars' thread pool size, which follows
    POLARS_MAX_THREADS, or this thread's share of it (:func:`cores_shared`). A Dask worker of
    ``local:N`` is one core (it sets POLARS_MAX_THREADS=1,
    :data:`tracekit.core.parallel.ONE_CORE_ENVIRONMENT`): there the parse, read-ahead and writer
    threads would only take turns on that core, and made a one-worker cluster use 1.15 cores,
    so the readers and the writer run in the calling thread instead."""
    return getattr(_share, "cores", None) or pl.thread_pool_size()


_share = threading.local()


@contextmanager
def cores_shared(ways: int) -> Iterator[None]:
    """Within this block the calling thread's work is one of ``ways`` running at once, so
    :func:`cores` gives it its share of the cores (at least one): files ingested side by side
    each read, parse and write in their own thread, as one-core workers do."""
    _share.cores = max(1, pl.thread_pool_size() // ways)
    try:
        yield
    finally:
        _share.cores = None


def map_in_order(function: Callable[[T], R], items: Iterable[T],
                 workers: int = PARSE_WORKERS) -> Iterator[R]:
    """``map(function, items)`` with ``workers`` items processed at once in background threads
    (no more than :func:`cores`; in this thread on one core), results yielded in input order:
    for per-block work that needs nothing from earlier blocks (stateful steps stay with the
    caller, in order). At most ``workers + 1`` items are submitted, so memory stays bounded.
    An exception raised by ``function`` is raised here; closing this generator cancels what
    has not started and waits for the rest."""
    workers = min(workers, cores())
    if workers <= 1:
        yield from map(function, items)
        return
    pool = ThreadPoolExecutor(workers, thread_name_prefix="tracekit-parse")
    pending: deque[Future[R]] = deque()
    try:
        for item in items:
            pending.append(pool.submit(function, item))
            if len(pending) > workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def one_block(source: Source) -> bool:
    """The source fits in one block of :func:`map_line_blocks`: nothing to overlap, so the
    readers start no threads for it (starting them cost 15 % of ingesting a 1,000-row file)."""
    return source.size <= LINE_BATCH_BYTES


def map_line_blocks(function: Callable[[bytes | bytearray], R], source: Source) -> Iterator[R]:
    """``function`` over the source's blocks of whole lines (:data:`LINE_BATCH_BYTES` each),
    results in order: on the parse threads (:func:`map_in_order`) when the source has more than
    one block, in this thread otherwise. For per-block work that needs nothing from the blocks
    before; stateful steps stay with the caller. A source of several blocks is read into
    reused buffers (``iter_line_blocks(reuse=True)``): a result that keeps its block keeps the
    buffer from being read into again, so drop it when it is not needed."""
    if one_block(source):
        return map(function, iter_line_blocks(source, LINE_BATCH_BYTES))
    return map_in_order(function, iter_line_blocks(source, LINE_BATCH_BYTES, reuse=True))


def read_ahead(items: Iterator[T], depth: int = 1) -> Iterator[T]:
    """Yield ``items`` while a background thread already makes the next ``depth`` of them, so
    making them (reading and splitting, parsing) overlaps with what the caller does with each
    (parsing, writing Parquet). Polars releases the GIL in its kernels, so on two cores both
    run at once; on one (:func:`cores`) there is nothing to overlap and ``items`` are made in
    the caller's thread. Holds at most ``depth + 2`` items in memory. An exception raised
    while making an item is raised here; closing this generator stops the thread."""
    if cores() <= 1:
        yield from items
        return
    slots: queue.Queue[tuple[bool, T | BaseException | None]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(message: tuple[bool, T | BaseException | None]) -> bool:
        while not stop.is_set():
            try:
                slots.put(message, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put((True, item)):
                    return
            put((False, None))
        except BaseException as error:  # handed to the consumer and raised there
            put((False, error))
        finally:
            if stop.is_set() and hasattr(items, "close"):
                items.close()

    worker = threading.Thread(target=produce, name="tracekit-read-ahead", daemon=True)
    worker.start()
    try:
        while True:
            more, value = slots.get()
            if not more:
                if value is not None:
                    raise value
                return
            yield value
    finally:
        stop.set()
        worker.join()


def read_csv_cells(source: Source) -> pl.DataFrame:
    """A whole headed CSV file as text cells plus its ``line_no`` (the header is line 1).

    Nothing is inferred, so one bad cell is quarantined by the reader instead of failing the file;
    undecodable bytes are replaced, not fatal (one invalid byte rejected the whole file), and a
    stray quote that leaves a field open to the end of the file makes quotes plain text.
    The bytes are read here, not by polars, which would decompress a file that starts like
    zlib or gzip data without bound.
    """
    with source.open() as stream:
        data = stream.read().removeprefix(BYTE_ORDER_MARK)
    if b"\r" in data:  # CR-only line ends (old exporters, a damaged copy): one row per line
        data = LONE_CR.sub(b"\n", data)
    if data.startswith(POLARS_DECOMPRESSES) or not data.strip():
        raise InputError("no CSV header (the file is empty or starts like compressed data)",
                         source.name, 1)
    try:
        cells = pl.read_csv(data, infer_schema=False, truncate_ragged_lines=True,
                            encoding="utf8-lossy")
    except pl.exceptions.ComputeError:  # a stray quote: read it as text, line by line
        cells = pl.read_csv(data, infer_schema=False, truncate_ragged_lines=True,
                            encoding="utf8-lossy", quote_char=None)
    except pl.exceptions.DuplicateError as error:
        raise InputError(f"the CSV header repeats a column ({error})", source.name, 1) from None
    cells = cells.rename(lambda column: column.strip().removeprefix("\ufeff").strip())
    return cells.with_row_index("line_no", offset=2)


def require_columns(cells: pl.DataFrame, columns: tuple[str, ...], source: Source) -> None:
    """A one-line error naming the header's missing ``columns``, before any is selected."""
    missing = [c for c in columns if c not in cells.columns]
    if missing:
        raise InputError(f"the CSV header lacks {', '.join(missing)}", source.name, 1)


def csv_row_text(cells: pl.DataFrame) -> pl.Expr:
    """The ``line`` a quarantine row shows for a row of :func:`read_csv_cells`: its non-empty
    cells joined by commas."""
    return pl.concat_str([c for c in cells.columns if c != "line_no"], separator=",",
                         ignore_nulls=True).alias("line")


def split_on_reason(frame: pl.DataFrame, reason: pl.Expr) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``frame`` as (good, bad) rows: ``reason`` is null on a good row and says what is wrong
    with a bad one, in the ``reason`` column :func:`quarantine_frame` reads."""
    checked = frame.with_columns(reason.alias("reason"))
    is_good = pl.col("reason").is_null()
    return checked.filter(is_good), checked.filter(~is_good)


def quarantine_frame(source: Source, bad: pl.DataFrame) -> pl.DataFrame:
    """Build quarantine rows from a frame with ``line_no``, ``line`` and ``reason`` columns."""
    return bad.select(
        pl.lit(source.name).alias("source"),
        pl.col("line_no").cast(pl.Int64),
        pl.col("reason").cast(pl.String),
        pl.col("line").str.slice(0, schema.RAW_LINE_LIMIT).alias("raw"),
    )

"""A Kineto Chrome trace read as a stream: its top-level values whole, ``traceEvents`` one
event at a time, so a trace of hundreds of MB never becomes one Python object.

``json.load`` of a 300 MB trace holds every event as a dict at once (~10x the file). Here the
text is read in blocks and each event is decoded by the C scanner (``raw_decode``) where it
stands, then dropped by the caller once its few fields are taken: memory is one block plus
what the caller keeps. An event that does not decode is handed back as text with its line, and
decoding resumes at the next event; a file cut short (a profiler killed while writing) ends
with its torn last event handed back the same way.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from tracekit.core.errors import InputError
from tracekit.ingest.base import BYTE_ORDER_MARK, SNIFF_BYTES, Source
from tracekit.ingest.limits import EXPANSION_GRACE_BYTES, too_large

BLOCK_CHARS = 4 * 1024 * 1024
"""Characters read at a time: large enough that the per-block work (compacting the buffer,
counting line ends) is small against decoding, small enough to keep memory flat."""

GZIP_MAGIC = b"\x1f\x8b"

_SPACE = re.compile(r"[\s,]*")
_RESUME = re.compile(r",\s*(?=[\[{\"\d-])|\}\s*(?=\])")
"""Candidates for where the next item may start after one that did not decode: after a comma
before a value, or at the array's end. :meth:`_Scanner._resume_point` checks each."""
_NEXT_OBJECT = re.compile(r"\s*,\s*\{")
_DECODER = json.JSONDecoder()


@dataclass
class Bad:
    """An event that did not decode: its first line and text (cut) and why."""

    line_no: int
    text: str
    reason: str


@dataclass
class TraceStream:
    """The pieces of one trace: ``events()`` yields ``(line_no, event)`` or :class:`Bad`, and
    :attr:`metadata` holds every other top-level value once ``events()`` is exhausted (Kineto
    writes ``baseTimeNanoseconds`` after the events, older versions put all of it before)."""

    source: Source
    metadata: dict = field(default_factory=dict)
    truncated: bool = False
    bytes_read: int = 0

    def events(self) -> Iterator[tuple[int, object] | Bad]:
        with _open_text(self.source) as text:
            scanner = _Scanner(text, self.source.limits.max_line_bytes)
            yield from self._document(scanner)
            self.bytes_read = scanner.consumed

    def _document(self, scan: _Scanner) -> Iterator[tuple[int, object] | Bad]:
        scan.skip_space()
        if scan.peek() != "{":
            raise InputError("not a Kineto trace: the file does not start with a JSON object",
                             self.source.name, scan.line_no)
        scan.advance(1)
        while True:
            scan.skip_space()
            char = scan.peek()
            if char == "}" or char == "":
                self.truncated = char == ""
                return
            key = scan.value()
            scan.skip_space()
            if not isinstance(key, str) or scan.peek() != ":":
                raise InputError("not a Kineto trace: a top-level key is not followed by ':'",
                                 self.source.name, scan.line_no)
            scan.advance(1)
            scan.skip_space()
            if key == "traceEvents" and scan.peek() == "[":
                scan.advance(1)
                yield from scan.array_items()
                if scan.at_end:
                    self.truncated = True
                    return
            else:
                line_no = scan.line_no
                value = scan.value()
                if isinstance(value, Bad):
                    raise InputError(f"top-level value {key!r} is not valid JSON",
                                     self.source.name, line_no)
                self.metadata[key] = value


class _Scanner:
    """A text stream with a position, a line count and the JSON pieces a trace is made of."""

    def __init__(self, text: io.TextIOBase, max_item_chars: int):
        self.text, self.max_item = text, max_item_chars
        self.buffer, self.pos, self.line_no, self.consumed = "", 0, 1, 0
        self.eof = False
        self._fill()
        self.buffer = self.buffer.removeprefix("\ufeff")

    @property
    def at_end(self) -> bool:
        return self.eof and self.pos >= len(self.buffer)

    def _fill(self) -> bool:
        """Read one more block; False at the end of the stream."""
        if self.eof:
            return False
        block = self.text.read(BLOCK_CHARS)
        if not block:
            self.eof = True
            return False
        self.buffer = self.buffer[self.pos:] + block
        self.pos = 0
        return True

    def advance(self, chars: int) -> None:
        end = self.pos + chars
        self.line_no += self.buffer.count("\n", self.pos, end)
        self.consumed += chars
        self.pos = end

    def peek(self) -> str:
        while self.pos >= len(self.buffer):
            if not self._fill():
                return ""
        return self.buffer[self.pos]

    def skip_space(self) -> None:
        while True:
            end = _SPACE.match(self.buffer, self.pos).end()
            self.advance(end - self.pos)
            if self.pos < len(self.buffer) or not self._fill():
                return

    def value(self) -> object:
        """The JSON value at the position (a :class:`Bad` where none decodes)."""
        while True:
            try:
                value, end = _DECODER.raw_decode(self.buffer, self.pos)
            except json.JSONDecodeError:
                if len(self.buffer) - self.pos <= self.max_item and self._fill():
                    continue
                bad = Bad(self.line_no, self.buffer[self.pos:self.pos + 500], "not valid JSON")
                self.advance(len(self.buffer) - self.pos)
                return bad
            except RecursionError:
                raise InputError("nested too deeply to decode") from None
            self.advance(end - self.pos)
            return value

    def array_items(self) -> Iterator[tuple[int, object] | Bad]:
        """The items of the array the position is inside, up to and past its ``]``."""
        while True:
            self.skip_space()
            char = self.peek()
            if char == "]":
                self.advance(1)
                return
            if char == "":
                return
            line_no = self.line_no
            try:
                item, end = _DECODER.raw_decode(self.buffer, self.pos)
            except json.JSONDecodeError as error:
                bad = self._skip_bad(line_no, error)
                if bad is None:
                    continue  # more text was read: decode again
                yield bad
                continue
            except RecursionError:
                yield self._skip_bad(line_no, None, "nested too deeply to decode", force=True)
                continue
            # the separators after the item go with it: one line count per item, not two
            after = _SPACE.match(self.buffer, end).end()
            self.advance(after - self.pos)
            yield line_no, item

    def _resume_point(self) -> int | None:
        """Where the next item starts after a bad one: the first candidate that decodes as an
        object followed by ``,`` or ``]``, or as another value followed by an object, so that a
        comma inside the bad event (``[[10], [4]]``, ``, "name":``) is not taken for one."""
        for candidate in _RESUME.finditer(self.buffer, self.pos + 1):
            start = candidate.end()
            if self.buffer.startswith("]", start):
                return start
            try:
                value, end = _DECODER.raw_decode(self.buffer, start)
            except (json.JSONDecodeError, RecursionError):
                continue
            after = _SPACE.match(self.buffer, end)
            if isinstance(value, dict):
                if after.end() > end or self.buffer.startswith("]", after.end()):
                    return start
            elif _NEXT_OBJECT.match(self.buffer, end):
                return start
        return None

    def _skip_bad(self, line_no: int, error: json.JSONDecodeError | None,
                  reason: str = "", force: bool = False) -> Bad | None:
        """After a failed decode: None when the event may just be cut by the buffer's end (more
        was read), else the bad event, with the position moved to the next event."""
        resume = self._resume_point()
        inside = error is not None and resume is not None and error.pos > resume
        if inside and not self.eof and self._fill():
            return None  # the resume point was inside a valid start cut by the buffer's end
        if resume is None and not force:
            if len(self.buffer) - self.pos <= self.max_item and self._fill():
                return None
            end = len(self.buffer)
            why = ("truncated: the file ends inside this event" if self.eof
                   else too_large("an event", self.max_item, "max_line_bytes"))
        else:
            end = resume if resume is not None else len(self.buffer)
            why = reason or f"not valid JSON ({error.msg})"
        bad = Bad(line_no, self.buffer[self.pos:min(end, self.pos + 500)], why)
        self.advance(end - self.pos)
        return bad


class _BoundedGzip(io.RawIOBase):
    """A gzip member's decompressed bytes, refused past the limits an archive has: Kineto
    writes ``.json.gz`` itself, so tracekit reads it, but a small bomb must not become an
    unbounded stream."""

    def __init__(self, compressed: BinaryIO, source: Source):
        self.inner = gzip.GzipFile(fileobj=compressed)
        limits = source.limits
        self.limit = min(limits.max_archive_bytes,
                         EXPANSION_GRACE_BYTES + limits.max_expansion * max(source.size, 1))
        self.source, self.total = source, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        try:
            data = self.inner.read(len(buffer))
        except (OSError, EOFError, ValueError) as error:
            raise InputError(f"gzip data is damaged ({error})", self.source.name) from None
        self.total += len(data)
        if self.total > self.limit:
            raise InputError(too_large("the decompressed trace", self.limit,
                                       "max_expansion"), self.source.name)
        buffer[:len(data)] = data
        return len(data)

    def close(self) -> None:
        self.inner.close()
        super().close()


def _open_text(source: Source) -> io.TextIOBase:
    """The source as text, gunzipped when it is gzip; undecodable bytes replaced."""
    raw = source.open()
    stream: BinaryIO = raw
    if source.head.startswith(GZIP_MAGIC):
        stream = io.BufferedReader(_BoundedGzip(raw, source), 1 << 20)
    return io.TextIOWrapper(stream, encoding="utf-8", errors="replace", newline="")


def head_text(source: Source, chars: int = SNIFF_BYTES) -> str:
    """The first characters of the (decompressed) source, for sniffing; empty when the gzip
    data does not decompress."""
    head = source.head
    if head.startswith(GZIP_MAGIC):
        try:
            head = gzip.GzipFile(fileobj=io.BytesIO(head)).read(chars)
        except (OSError, EOFError):
            try:  # the head is cut mid-stream: decompress what it holds
                head = zlib.decompressobj(wbits=31).decompress(head, chars)
            except zlib.error:
                return ""
    return head.removeprefix(BYTE_ORDER_MARK)[:chars].decode("utf-8", errors="replace")

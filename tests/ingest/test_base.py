"""Line batching shared by the text readers: exact lines and line numbers whatever the line ends,
encoding damage or block boundaries, and the read-ahead thread's error and early-exit handling."""

from __future__ import annotations

import hashlib
import io
import threading
import time

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.core.errors import InputError
from tracekit.ingest import base
from tracekit.ingest.base import (
    LINE_SPLIT_SEPARATORS,
    LONE_CR,
    LineBatch,
    Source,
    _ReusedBuffers,
    iter_line_batches,
    iter_line_blocks,
    map_in_order,
    read_ahead,
)


def batches(data: bytes, batch_bytes: int = 1 << 20) -> list[LineBatch]:
    return list(iter_line_batches(Source.from_bytes("t.log", data), batch_bytes=batch_bytes))


def all_lines(data: bytes, batch_bytes: int = 1 << 20) -> list[str]:
    return [line for batch in batches(data, batch_bytes) for line in batch.lines.to_list()]


def reference_lines(data: bytes) -> list[str]:
    """What a plain Python reader makes of the bytes (a ``\r`` alone in the first
    ``SNIFF_BYTES``, all of these, ends a line)."""
    if not data:
        return []
    text = LONE_CR.sub(b"\n", data).decode("utf-8", errors="replace").removeprefix("\ufeff")
    return [line.removesuffix("\r") for line in text.removesuffix("\n").split("\n")]


def test_line_ends_blank_lines_and_unterminated_last_line():
    data = b"a\r\n\r\nb\n \n\nc \r\nlast"
    assert all_lines(data) == ["a", "", "b", " ", "", "c ", "last"]


@pytest.mark.parametrize("batch_bytes", [1 << 20, 5])
def test_cr_only_line_ends_are_line_ends(batch_bytes):
    """A file whose head has a ``\r`` alone reads it as a line end, across blocks and with
    CRLF lines among them; its lines are numbered as a ``\n`` file's."""
    data = b"a\rbb\r\rc\r\nd\re"
    assert all_lines(data, batch_bytes) == ["a", "bb", "", "c", "d", "e"]
    numbers = [n for b in batches(data, batch_bytes) for n in b.frame()["line_no"].to_list()]
    assert numbers == [1, 2, 3, 4, 5, 6]


def test_a_cr_only_file_is_hashed_as_its_bytes():
    source = Source.from_bytes("t.log", b"a\rb\r")
    source.hash_while_reading = True
    assert b"".join(iter_line_blocks(source)) == b"a\nb\n"
    assert source.sha256 == hashlib.sha256(b"a\rb\r").hexdigest()


def test_byte_order_mark_and_undecodable_bytes():
    data = b"\xef\xbb\xbfNCCL INFO x\ntorn \xe2\x82 char\nbad \xff\xfe end\n"
    assert all_lines(data) == ["NCCL INFO x", "torn \ufffd char", "bad \ufffd\ufffd end"]


def test_numbers_and_bytes_across_blocks_and_a_line_longer_than_a_block():
    long_line = "x" * 250
    data = f"one\ntwo\n{long_line}\nthree\nfour\n".encode()
    got = batches(data, batch_bytes=8)
    assert [line for b in got for line in b.lines.to_list()] == [
        "one", "two", long_line, "three", "four"]
    numbers = [n for b in got for n in b.frame()["line_no"].to_list()]
    assert numbers == [1, 2, 3, 4, 5]
    assert sum(b.bytes_read for b in got) == len(data)


@pytest.mark.parametrize("present", [LINE_SPLIT_SEPARATORS, LINE_SPLIT_SEPARATORS[:-1]])
def test_blocks_holding_the_separators(present, monkeypatch):
    """All five present: split by Python; the last one free: it is the separator."""
    monkeypatch.setattr(base, "PYTHON_SPLIT_BYTES", 0)
    data = b"".join(present) + b" x\r\ny\n"
    assert all_lines(data) == [b"".join(present).decode() + " x", "y"]


def test_empty_source_has_no_batches():
    assert batches(b"") == []


line_bytes = st.binary(max_size=40).map(
    lambda b: b.replace(b"\n", b" ").replace(b"\xef\xbb\xbf", b" "))


@settings(max_examples=80, deadline=None)
@given(st.lists(line_bytes, min_size=1, max_size=20), st.booleans(), st.integers(4, 200),
       st.sampled_from([0, base.PYTHON_SPLIT_BYTES]))
def test_lines_match_a_plain_python_reader(lines, terminated, batch_bytes, python_split_bytes):
    """Split by polars' CSV reader or by Python (small blocks), the same lines."""
    data = b"\n".join(lines) + (b"\n" if terminated else b"")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(base, "PYTHON_SPLIT_BYTES", python_split_bytes)
        got = batches(data, batch_bytes)
    assert [line for b in got for line in b.lines.to_list()] == reference_lines(data)
    assert [n for b in got for n in b.frame()["line_no"].to_list()] == list(
        range(1, len(reference_lines(data)) + 1))


class _Unseekable(io.BytesIO):
    """A pipe-like stream: blocks are cut after reading instead of found by seeking."""

    def seekable(self) -> bool:
        return False


@settings(max_examples=80, deadline=None)
@given(st.lists(line_bytes, max_size=20), st.booleans(), st.integers(4, 200), st.booleans(),
       st.booleans())
def test_blocks_are_whole_lines_and_hash_the_file_once(lines, terminated, batch_bytes, seekable,
                                                       reuse):
    """Reused buffers or not: the blocks, all held at once here, are the file's bytes."""
    data = b"\n".join(lines) + (b"\n" if terminated and lines else b"")
    opened = []

    def opener():
        opened.append(1)
        return io.BytesIO(data) if seekable else _Unseekable(data)

    source = Source("t.log", len(data), opener, hash_while_reading=True)
    blocks = list(iter_line_blocks(source, batch_bytes, reuse=reuse))
    lone_cr = LONE_CR.search(data) is not None and seekable  # a pipe's head comes from the sniff
    assert b"".join(blocks) == (LONE_CR.sub(b"\n", data) if lone_cr else data)
    assert all(block.endswith(b"\n") for block in blocks[:-1])
    assert source.sha256 == hashlib.sha256(data).hexdigest()
    assert len(opened) == 1 + lone_cr  # the bytes read were not the file's: hashed again


def test_blocks_dropped_as_they_come_are_the_files_bytes_in_a_few_buffers(monkeypatch):
    data = b"".join(f"line {n}\n".encode() for n in range(2000))
    source = Source("t.log", len(data), lambda: io.BytesIO(data), hash_while_reading=True)
    copies, kept = [], []
    original = _ReusedBuffers.__init__

    def recorded(self, *args):
        original(self, *args)
        kept.append(self)

    monkeypatch.setattr(_ReusedBuffers, "__init__", recorded)
    for block in iter_line_blocks(source, 256, reuse=True):
        assert isinstance(block, bytearray)
        copies.append(bytes(block))
    assert b"".join(copies) == data and len(copies) > 50
    assert [len(pool.buffers) for pool in kept] == [2]  # the block read and the one before
    assert source.sha256 == hashlib.sha256(data).hexdigest()


def test_a_buffer_is_read_into_again_only_once_nothing_holds_it():
    pool = _ReusedBuffers(8, 2)
    stream = io.BytesIO(b"aaaa" b"bbbbbb" b"cccc" b"ddd" b"eeeeeeeee" b"ffff" b"gg")
    first = pool.read(stream, 4)
    second = pool.read(stream, 6)  # the first is held: a second buffer
    buffers = [id(buffer) for buffer in pool.buffers]
    assert (first, second) == (b"aaaa", b"bbbbbb") and len(buffers) == 2
    view = np.frombuffer(second, np.uint8)  # a numpy view holds its buffer too
    del first, second
    third = pool.read(stream, 4)
    assert third == b"cccc" and id(third) == buffers[0]
    fourth = pool.read(stream, 3)  # both held (one by the view): fresh memory, not kept
    assert fourth == b"ddd" and id(fourth) not in buffers and len(pool.buffers) == 2
    assert view.tobytes() == b"bbbbbb"
    longer = pool.read(stream, 9)  # longer than a buffer takes
    assert longer == b"eeeeeeeee" and type(longer) is bytes
    del third, view
    assert pool.read(stream, 4) == b"ffff"
    assert pool.read(stream, 4) == b"gg"  # the end: fewer bytes


def test_hash_is_not_computed_while_reading_unless_asked():
    source = Source.from_bytes("t.log", b"a\nb\n")
    list(iter_line_blocks(source, 1))
    assert source._sha256 is None
    assert source.sha256 == hashlib.sha256(b"a\nb\n").hexdigest()


def test_read_ahead_yields_in_order_and_raises_the_producers_error():
    def items():
        yield from range(5)
        raise InputError("broken", "f.log", 6)

    got = []
    with pytest.raises(InputError, match="broken"):
        for item in read_ahead(items()):
            got.append(item)
    assert got == [0, 1, 2, 3, 4]


def test_read_ahead_stops_its_thread_when_the_caller_stops_early():
    closed = threading.Event()

    def items():
        try:
            yield from range(1000)
        finally:
            closed.set()

    ahead = read_ahead(items())
    assert next(ahead) == 0
    ahead.close()
    assert closed.is_set()
    assert not any(t.name == "tracekit-read-ahead" for t in threading.enumerate())


def test_map_in_order_keeps_order_bounds_work_in_flight_and_raises():
    started, running, most = [], [0], [0]
    lock = threading.Lock()

    def slow_square(n):
        with lock:
            started.append(n)
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.02 if n % 2 else 0.001)  # odd items finish after the next even one
        with lock:
            running[0] -= 1
        if n == 7:
            raise InputError("bad block", "f.log", 7)
        return n * n

    got = []
    with pytest.raises(InputError, match="bad block"):
        for value in map_in_order(slow_square, range(20), workers=2):
            got.append(value)
            assert len(started) <= len(got) + 3  # never more than workers + 1 ahead
    assert got == [n * n for n in range(7)]
    assert most[0] == 2
    assert not any(t.name.startswith("tracekit-parse") for t in threading.enumerate())


def test_frame_has_typed_line_numbers():
    frame = LineBatch(pl.Series("line", ["a", "b"]), 7, 4).frame()
    assert frame.schema == {"line_no": pl.Int64, "line": pl.String}
    assert frame["line_no"].to_list() == [7, 8]

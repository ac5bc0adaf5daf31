"""How much of an untrusted dump tracekit will hold, and the checks that keep it to that.

A dump comes from thousands of machines and sometimes from people who should not be trusted,
so what one input may cost is bounded by these limits, not by what the input claims: each is a
named default, exceeding it is a one-line :class:`~tracekit.core.errors.InputError` naming the
file (and line; a line over ``max_line_bytes`` is one quarantined line instead), and each can be
raised for one ingest with ``--option NAME=VALUE`` (``--option max_line_bytes=67108864``). No
check recurses on the input's structure.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields, replace
from typing import BinaryIO

import numpy as np

from tracekit.core.errors import InputError

COMPRESSED_MAGIC = {
    b"\x1f\x8b": "gzip", b"\xfd7zXZ\x00": "xz", b"BZh": "bzip2", b"\x28\xb5\x2f\xfd": "zstd",
}
"""How single compressed files start. Polars decompresses gzip and zstd (and zlib) input by
itself, without any bound, so a compressed file that is not a tar archive is refused before a
reader sees it: a 2 MB gzip of zeros would otherwise become 2 GB in memory."""

POLARS_DECOMPRESSES = (b"\x1f\x8b", b"\x78\x01", b"\x78\x5e", b"\x78\x9c", b"\x78\xda",
                       b"\x28\xb5\x2f\xfd")
"""Starts of a buffer that polars' CSV reader takes for gzip, zlib or zstd and decompresses.
A block of text lines may start so (``x^`` is zlib's magic): such a block is never handed to
polars' CSV reader."""


@dataclass(frozen=True)
class Limits:
    """The budget of one ingest. Each field is an ``--option`` name."""

    max_archive_bytes: int = 64 * 1024**3
    """Decompressed bytes of one archive (all members): archives are spooled member by member,
    so this bounds the disk a bomb can fill and the time it costs, not memory."""
    max_expansion: int = 200
    """Decompressed bytes per byte of an archive file, beyond its first
    :data:`EXPANSION_GRACE_BYTES`. Text dumps compress 5-40x (the labeled dumps: 36-39x under
    xz); runs of one byte compress ~1000x (DEFLATE's ceiling is 1032x): 200 leaves real dumps
    5x room and stops a 10 MB bomb after 2 GB instead of 10 GiB."""
    max_line_bytes: int = 16 * 1024**2
    """One text line: a longer one is quarantined and skipped to its end
    (:func:`~tracekit.ingest.base.iter_line_blocks`). One batch
    (:data:`~tracekit.ingest.base.LINE_BATCH_BYTES`), so no block a reader parses is more than
    twice a batch. Real lines are under 4 KiB; a file of zeros without a line end is one
    line, and stops here."""
    max_nesting: int = 64
    """Depth of containers in a JSON or pickle dump. The formats read nest at most 6 deep; a
    deeper document is hostile, and walking or converting it costs time and memory per level."""
    max_whole_file_bytes: int = 512 * 1024**2
    """A file that is parsed whole (JSON documents, pickles): a Flight Recorder dump or a
    Prometheus export is a few MB, and the parsed objects take ~10x the file's size."""

    @classmethod
    def from_options(cls, options: dict[str, str]) -> Limits:
        """The limits with any ``--option`` override; the override keys are removed from
        ``options`` (readers do not see them)."""
        overrides = {}
        for field in fields(cls):
            if field.name in options:
                value = options.pop(field.name)
                try:
                    overrides[field.name] = int(value)
                except ValueError:
                    raise InputError(f"--option {field.name}={value!r} is not a whole "
                                     "number") from None
        return replace(cls(), **overrides)


EXPANSION_GRACE_BYTES = 64 * 1024**2
"""Decompressed bytes an archive may produce before :attr:`Limits.max_expansion` applies: a
small archive of one repetitive log may compress better than any real dump of size does."""


def too_large(what: str, limit: int, option: str) -> str:
    """The message of every limit: what exceeded which limit, and the option that raises it."""
    return (f"{what} exceeds the limit of {limit:,} bytes; if the input is trusted, raise it "
            f"with --option {option}=N")


def too_deep(limit: int) -> str:
    """The message of the nesting limit, worded as :func:`too_large`'s."""
    return (f"nested deeper than the limit of {limit} levels; if the input is trusted, raise "
            "it with --option max_nesting=N")


def refuse_compressed(head: bytes, path: str) -> None:
    """Refuse a compressed single file (:data:`COMPRESSED_MAGIC`): tracekit reads compressed
    dumps only as tar archives, whose expansion it bounds."""
    for magic, name in COMPRESSED_MAGIC.items():
        if head.startswith(magic):
            raise InputError(f"{name}-compressed file: decompress it first, or pack it in a "
                             ".tar.gz / .tar.xz archive (whose expansion tracekit bounds)", path)


def check_nesting(value: object, size: int, limits: Limits, path: str) -> None:
    """Refuse a parsed document of ``size`` bytes nested deeper than :attr:`Limits.max_nesting`,
    or whose shared references expand it past its own size: a 307-byte pickle of 40
    ``x = [x, x]`` is 2^40 nodes to any walk over it. Written out without sharing, a pickle
    takes at least a byte per node, so a walk may visit (counting each reference) at most
    ``size`` nodes. Iterative: the input's depth never becomes Python's stack depth."""
    stack: list[tuple[object, int]] = [(value, 1)]
    visits = 0
    while stack:
        node, depth = stack.pop()
        visits += 1
        if visits > size:
            raise InputError(f"shared references expand the {size:,}-byte document beyond "
                             "one node per byte; refusing to read it", path)
        if isinstance(node, dict):
            children = [*node.keys(), *node.values()]
        elif isinstance(node, list | tuple | set | frozenset):
            children = list(node)
        else:
            continue
        if depth > limits.max_nesting:
            raise InputError(too_deep(limits.max_nesting), path)
        stack.extend((child, depth + 1) for child in children)


JSON_SCAN_BYTES = 16 * 1024**2
"""Bytes of JSON text :func:`json_nesting` looks at in one numpy pass (its arrays take ~20x)."""


def json_nesting(stream: BinaryIO) -> int:
    """The deepest nesting of brackets in JSON text, outside strings, found in numpy passes
    over blocks without parsing: for a document a parser would take apart recursively or
    convert level by level (polars' JSON decoder took 13.8 GB for a 1,000-deep 2.2 KB label)."""
    return max((int(levels.max(initial=0)) for _, levels, _ in _json_levels(stream)), default=0)


def json_array_lines(stream: BinaryIO, depth: int) -> np.ndarray:
    """The line (1-based) of every ``[`` outside strings that opens nesting level ``depth``, in
    document order: where each element of a list of lists at that depth starts, for numbering
    what a reader quarantines by the line a user finds it on (same numpy passes as
    :func:`json_nesting`; JSON strings hold no raw line end)."""
    found, lines_before = [], 1
    for data, levels, inside in _json_levels(stream):
        newline = data == ord("\n")
        opens = np.flatnonzero((data == ord("[")) & ~inside & (levels == depth))
        found.append(lines_before + np.cumsum(newline)[opens])
        lines_before += int(newline.sum())
    return np.concatenate(found) if found else np.empty(0, np.int64)


def _json_levels(stream: BinaryIO) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per block of JSON text: its bytes, the nesting level after each byte and whether each
    byte is inside a string (escaped quotes and backslash runs across blocks told apart)."""
    depth = 0
    in_string = False
    escaped = False  # the previous block ended in an odd run of backslashes
    for block in _blocks(stream):
        data = np.frombuffer(block, np.uint8)
        is_escape = data == ord("\\")
        index = np.arange(len(data))
        last_plain = np.maximum.accumulate(np.where(is_escape, -1, index))
        run_before = np.empty(len(data), np.int64)  # backslashes right before each byte
        run_before[0] = 1 if escaped else 0
        run_before[1:] = index[:-1] - last_plain[:-1]
        if escaped:
            run_before[1:][last_plain[:-1] < 0] += 1
        quote = (data == ord('"')) & (run_before % 2 == 0)
        inside = (np.cumsum(quote) % 2 == 1) ^ in_string
        step = np.where(inside, 0, np.where(np.isin(data, (91, 123)), 1,
                                                    np.where(np.isin(data, (93, 125)), -1, 0)))
        levels = depth + np.cumsum(step)
        yield data, levels, inside
        depth = int(levels[-1])
        in_string = bool(inside[-1])
        trailing = len(data) - 1 - int(last_plain[-1])
        escaped = (trailing + (escaped and trailing == len(data))) % 2 == 1


def check_json(source, stream: BinaryIO) -> None:
    """Refuse JSON text of ``source`` larger than :attr:`Limits.max_whole_file_bytes` or nested
    deeper than :attr:`Limits.max_nesting`, before a parser sees it; ``stream`` is left at its
    start."""
    limits = source.limits
    if source.size > limits.max_whole_file_bytes:
        raise InputError(too_large("a JSON document", limits.max_whole_file_bytes,
                                   "max_whole_file_bytes"), source.name)
    depth = json_nesting(stream)
    stream.seek(0)
    if depth > limits.max_nesting:
        raise InputError(too_deep(limits.max_nesting), source.name)


def _blocks(stream: BinaryIO) -> Iterator[bytes]:
    while block := stream.read(JSON_SCAN_BYTES):
        yield block

"""A compiled scan of the common COLL line in a block of ``NCCL_DEBUG=INFO`` text.

Almost every line of a COLL log has one shape: an optional launcher prefix or timestamp, the
``host:pid:tid [dev] NCCL INFO `` envelope, then ``<Op>: opCount <hex> sendbuff <p> recvbuff
<p> count <n> datatype <n> op <n> root <n> comm <p> [nranks=<n>] stream <p>`` (RCCL adds
``task <n> globalrank <n>``). Polars string kernels tokenise such a line in about 1 us; this
C loop (``nccl_coll_scan.c``) reads it byte by byte in a fraction of that and writes its
numbers into arrays.

It accepts a line only when the polars parser in :mod:`tracekit.ingest.nccl_debug` would read
it as a good call with exactly these values, and hands back every other line (Init lines, other
subsystems, torn, spliced, truncated or unusual lines) untouched, so that parser keeps every
corner case. What it accepts is deliberately narrow: printable ASCII only, one ``NCCL`` in the
line, single spaces between fields, numbers that fit their column, and a timestamp before the
host only in the three forms the polars parser reads (``[%F %T(.frac)]``, ISO 8601 with an
optional zone, epoch seconds) where they are the first run of four or more digits.

The scan is built once by the system's C compiler into a cached library
(:mod:`tracekit.core.compiled`). Where there is no compiler :func:`compiled` returns None and
the polars parser reads every line, with the same output.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from tracekit.core import compiled as compiled_kernels

WIDE_FIELDS = ("pid", "op_count", "count", "ts_seconds")
"""Rows of the kernel's int64 output array, one column per accepted line."""
NARROW_FIELDS = ("line_index", "key", "call_index", "cuda_dev", "op_id", "datatype", "root",
                 "nranks", "global_rank", "ts_kind", "ts_offset_s", "ts_frac_ns")
"""Rows of its int32 output array: the numbers the scan takes with at most nine digits (the
Int32 columns, the datatype code), the line's index in the block (a block is far under 2^31
lines), its row in :data:`KEY_FIELDS` (``key``) and its number among the block's calls of its
(host, pid, comm) (``call_index``). ``op_id`` indexes the block's distinct strings; ``ts_*`` are
the parts of the timestamp (see :data:`TS_NONE`...). Fewer bytes than one int64 array for all
(80 a possible line against 128): the arrays are allocated per block, and their fresh pages are
zeroed by the kernel as the scan first writes them. The C scan names the fields in the same
order."""
FIELDS = (*WIDE_FIELDS, *NARROW_FIELDS)

KEY_FIELDS = ("host_id", "pid", "comm_id", "cuda_dev", "calls")
"""Columns of the block's distinct (host, pid, comm, cuda_dev) of the calls, with the number of
calls of each; ``host_id`` and ``comm_id`` index the block's distinct strings. The reader numbers
and ranks the calls from these few dozen rows, without a group-by or join over the calls."""

TIME_FIELDS = ("ts_kind", "ts_seconds", "ts_offset_s", "ts_frac_ns")
"""The fields of the timestamp: written only in a block with a timestamp (else left out of
:attr:`ScannedBlock.calls`, as ``global_rank`` is in a block without RCCL's suffix), so that
their pages are never touched."""

TS_NONE, TS_LOCAL, TS_ZONED, TS_EPOCH = 0, 1, 2, 3
"""Timestamp kinds (also in the C scan): none; a wall-clock time without zone (``ts_seconds``
counts its seconds as if it were UTC); the same with a zone offset; epoch seconds."""

NO_GLOBAL_RANK = -(2**31)
"""``global_rank`` of a line without RCCL's ``globalrank`` suffix (also in the C scan)."""

MIN_LINE_BYTES = 100
"""Fewer bytes than the shortest line the scan accepts (113 with one-character fields), so a
block of n bytes has at most ``n // MIN_LINE_BYTES`` accepted lines."""

MAX_STRINGS = 1 << 15
"""Distinct hosts, op names and comm pointers one block may hold; lines bringing more go to the
polars parser."""

MAX_KEYS = 1 << 14
"""Distinct (host, pid, comm, cuda_dev) of the calls one block may hold (a 1,024-rank job with
a dozen comms a rank); lines bringing more go to the polars parser."""


@dataclass
class ScannedBlock:
    """What the scan made of a block: ``calls`` holds the accepted lines' values (the
    :data:`FIELDS` numbers, Int64 and Int32 as the kernel writes them), ``keys`` their distinct
    (host, pid, comm, cuda_dev) (:data:`KEY_FIELDS`, Int64), whose ``host_id`` and ``comm_id``
    and the calls' ``op_id`` index ``strings``, the block's distinct texts (a few dozen: the
    reader maps them to its own ids once per block instead of hashing a text per call);
    ``rejected`` the other lines' bytes, whose indices in the block are ``rejected_lines``."""

    lines: int
    calls: pl.DataFrame
    keys: pl.DataFrame
    strings: pl.Series
    rejected: bytes
    rejected_lines: np.ndarray


def _kernel(function):
    """The C function wrapped to take the block and return numpy arrays, which it allocates:
    ``wide`` and ``narrow`` are one array a field (:data:`WIDE_FIELDS`, :data:`NARROW_FIELDS`)
    with a row per possible accepted line: arrays under numpy's 4 MiB threshold for huge pages,
    so that the pages of rows no line fills are never touched (one 2-D array of them was
    zeroed whole, 2 MiB page by 2 MiB page, though half its rows stay unused), ``strings``
    rows of (offset, length, hash, first two words), ``keys`` rows of :data:`KEY_FIELDS`, ``runs``
    rows of (first line index, line count)."""
    int64s = np.ctypeslib.ndpointer(np.int64, flags="C_CONTIGUOUS")
    int32s = np.ctypeslib.ndpointer(np.int32, flags="C_CONTIGUOUS")
    pointers = ctypes.POINTER(ctypes.c_void_p)
    function.argtypes = [np.ctypeslib.ndpointer(np.uint8, flags="C_CONTIGUOUS"), ctypes.c_int64,
                         pointers, pointers, ctypes.c_int64, int64s, ctypes.c_int64, int64s, int64s,
                         int64s, ctypes.c_int64, int32s, int64s,
                         np.ctypeslib.ndpointer(np.uint8, flags="C_CONTIGUOUS,WRITEABLE"),
                         int64s]
    function.restype = None

    def kernel(data: np.ndarray) -> tuple:
        capacity = data.size // MIN_LINE_BYTES + 1
        wide = [np.empty(capacity, np.int64) for _ in WIDE_FIELDS]
        narrow = [np.empty(capacity, np.int32) for _ in NARROW_FIELDS]
        strings = np.empty((MAX_STRINGS, 5), np.int64)
        table = np.full(2 * MAX_STRINGS, -1, np.int64)
        keys = np.empty((MAX_KEYS, len(KEY_FIELDS) + 1), np.int64)  # and each key's group
        groups = np.empty((MAX_KEYS, 4), np.int64)
        key_tables = np.full(4 * MAX_KEYS, -1, np.int32)
        runs = np.empty((capacity + 1, 2), np.int64)
        rejected = np.empty(data.size, np.uint8)
        counts = np.zeros(9, np.int64)
        function(data, data.size, _addresses(wide), _addresses(narrow), capacity, strings,
                 MAX_STRINGS, table, keys, groups, MAX_KEYS, key_tables, runs, rejected, counts)
        return counts.tolist(), wide, narrow, strings, keys, runs, rejected

    return kernel


def _addresses(arrays: list[np.ndarray]) -> ctypes.Array:
    """The C array of the arrays' data pointers."""
    return (ctypes.c_void_p * len(arrays))(*(array.ctypes.data for array in arrays))


compiled = compiled_kernels.Lazy(Path(__file__).with_suffix(".c"),
                                 lambda library: _kernel(library.nccl_coll_scan))
"""The scan, ``kernel(block array) -> (counts, wide fields, narrow fields, strings, keys,
rejected runs, rejected bytes)`` (counts: lines, accepted lines, strings, runs, rejected
bytes, keys, groups, whether the times and the global ranks were written), or None where it
cannot be built; built once by the C compiler and cached (:mod:`tracekit.core.compiled`)."""


def scan(block: bytes) -> ScannedBlock | None:
    """Scan ``block`` (whole lines, the last one possibly without its line end); None when the
    compiled scan is not available."""
    kernel = compiled()
    if kernel is None:
        return None
    counts, wide, narrow, strings, keys, runs, rejected = kernel(
        np.frombuffer(block, dtype=np.uint8))
    (lines, accepted, string_count, run_count, rejected_size, key_count, _group_count, timed,
     ranked) = counts
    texts = pl.Series([block[offset:offset + length].decode("ascii")
                       for offset, length in strings[:string_count, :2].tolist()],
                      dtype=pl.String)
    columns = [*zip(WIDE_FIELDS, wide, strict=True), *zip(NARROW_FIELDS, narrow, strict=True)]
    unwritten = {*(() if timed else TIME_FIELDS), *(() if ranked else ("global_rank",))}
    calls = pl.DataFrame({name: column[:accepted] for name, column in columns
                          if name not in unwritten})
    keys = pl.DataFrame(keys[:key_count, :len(KEY_FIELDS)], schema=list(KEY_FIELDS),
                        orient="row")
    first, count = runs[:run_count, 0], runs[:run_count, 1]
    rejected_lines = np.arange(count.sum()) + np.repeat(first - (np.cumsum(count) - count), count)
    return ScannedBlock(lines, calls, keys, texts, rejected[:rejected_size].tobytes(),
                        rejected_lines)

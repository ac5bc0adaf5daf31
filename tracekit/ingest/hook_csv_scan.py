"""A compiled scan of a block of hook CSV rows: the first tier of the hook CSV fast path.

Polars' typed CSV reader parses a block of hook rows into 16 columns that the reader then
checks (separators, nulls, ranges) and names (op and datatype). This C loop
(``hook_csv_scan.c``) reads the same bytes once, checks every row as it goes and writes the
``collectives`` values straight into integer arrays: the end time and the payload bytes
computed, a null peer or end time as -1, the host, comm pointer and op as ids of the block's
distinct strings (a few dozen), so that naming them is a gather from a small table.

It takes a block only whole, and only when the polars path would take it with exactly these
values; on any doubt it refuses the block, which then goes to the polars path unchanged. What
it accepts is deliberately narrow: rows of exactly 16 fields, ``\\n`` or ``\\r\\n`` line ends;
integers as plain digits (a minus sign only in ``duration_ns`` and ``peer``, which may also be
empty) within int64, and within int32 for ``rank``, ``device``, ``nranks`` and ``peer``; a
known datatype; text fields of printable ASCII without space, ``#`` or ``"``; at most
:data:`MAX_STRINGS` distinct texts. Blank lines, comments, a header, a byte-order mark and
anything else are refused.

The scan is built once by the system's C compiler into a cached library
(:mod:`tracekit.core.compiled`). Where there is no compiler :func:`scan` returns None and the
polars path reads every block, with the same output.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from tracekit.core import compiled as compiled_kernels
from tracekit.ingest import nccl_names

WIDE_FIELDS = ("pid", "seq", "count", "bytes", "t_start_ns", "t_end_ns")
NARROW_FIELDS = ("rank", "cuda_dev", "nranks", "peer", "host_id", "comm_id", "op_id", "datatype")
"""The kernel's output columns, one value per row of the block: the ``collectives`` columns
that are 64-bit integers, then those that are 32-bit (Int32 in the table) and the indices
(UInt32, what polars gathers by): ``*_id`` index the block's distinct strings, ``datatype``
is the ``ncclDataType_t`` code; ``peer`` and ``t_end_ns`` are -1 where null. The C scan names
them in the same order."""
INDEX_FIELDS = ("host_id", "comm_id", "op_id", "datatype")

KIND_HOST, KIND_COMM, KIND_OP = 1, 2, 4
"""Bits of a distinct string's kinds (also in the C scan): which fields it was read from."""

MIN_ROW_BYTES = 29
"""The shortest row the table can take, its line end included (nine one-digit integers, a
four-letter op, empty optional fields, 15 commas): a block of n bytes holds at most
``n // MIN_ROW_BYTES + 1`` rows."""

FULL = -2
"""What the kernel returns when the block has more rows than its columns have room for."""

MAX_STRINGS = 1 << 15
"""Distinct hosts, comm pointers and op names one block may hold; a block with more goes to
the polars path."""

DTYPE_BYTES = np.array([nccl_names.DTYPES.get(code, ("", 0))[1]
                        for code in range(max(nccl_names.DTYPES) + 1)], np.int64)
"""Element size per ``ncclDataType_t`` code, 0 for a code NCCL does not define: the scan
refuses those and computes ``bytes`` from the others."""
DTYPE_NAMES = pl.Series([nccl_names.DTYPES.get(code, (None,))[0]
                         for code in range(len(DTYPE_BYTES))], dtype=pl.String)
"""tracekit dtype name per code, gathered by the codes the scan read (every one known)."""


@dataclass
class ScannedRows:
    """What the scan made of a block: ``rows`` holds the :data:`WIDE_FIELDS` and
    :data:`NARROW_FIELDS` of every row, ``strings`` the block's distinct texts that
    ``host_id``, ``comm_id`` and ``op_id`` index, ``op_names`` the tracekit op name of each
    (null for texts that are no op's)."""

    rows: pl.DataFrame
    strings: pl.Series
    op_names: pl.Series


def _kernel(function):
    """The C function wrapped to take the block and room for a number of rows and return numpy
    arrays, which it allocates: the columns, ``strings`` rows of (offset, length, hash,
    kinds)."""
    int64s = np.ctypeslib.ndpointer(np.int64, flags="C_CONTIGUOUS")
    function.argtypes = [np.ctypeslib.ndpointer(np.uint8, flags="C_CONTIGUOUS"), ctypes.c_int64,
                         int64s, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                         ctypes.c_int64, int64s, ctypes.c_int64, int64s, int64s]
    function.restype = ctypes.c_int64

    def kernel(data: np.ndarray, capacity: int) -> tuple[int, dict[str, np.ndarray], np.ndarray]:
        columns = {name: np.empty(capacity, np.int64) for name in WIDE_FIELDS} | {
            name: np.empty(capacity, np.uint32 if name in INDEX_FIELDS else np.int32)
            for name in NARROW_FIELDS}
        wide, narrow = ((ctypes.c_void_p * len(names))(*(columns[n].ctypes.data for n in names))
                        for names in (WIDE_FIELDS, NARROW_FIELDS))
        strings = np.empty((MAX_STRINGS, 4), np.int64)
        table = np.full(2 * MAX_STRINGS, -1, np.int64)
        used = np.zeros(1, np.int64)
        rows = function(data, data.size, DTYPE_BYTES, DTYPE_BYTES.size, wide, narrow, capacity,
                        strings, MAX_STRINGS, table, used)
        return rows, {name: column[:max(rows, 0)] for name, column in columns.items()}, \
            strings[:used[0]]

    return kernel


compiled = compiled_kernels.Lazy(Path(__file__).with_suffix(".c"),
                                 lambda library: _kernel(library.hook_csv_scan))
"""The scan, ``compiled()(block array, room for rows) -> (rows, columns, strings)`` (rows -1
for a refused block, :data:`FULL` for one with more rows), or None where it cannot be built;
built once by the C compiler and cached."""


def scan(data: bytes) -> ScannedRows | None:
    """The rows of ``data`` (whole rows, the last one possibly without its line end, no
    header); None when the scan refuses the block (a row it does not take, an op name NCCL
    does not have) or is not available.

    The columns are sized for rows at least half as long as the first (a block's rows are
    about as long as each other); a block with shorter ones is scanned again with room for the
    shortest possible rows. Room for those every time was a fifth of the scan's CPU: numpy
    backs arrays of 4 MiB and more with huge pages, and each column's first rows then fault in
    (and zero) 2 MiB pages."""
    kernel = compiled()
    if kernel is None:
        return None
    array = np.frombuffer(data, dtype=np.uint8)
    first_row = data.find(b"\n") + 1 or len(data)
    rows, columns, strings = kernel(array, len(data) // max(MIN_ROW_BYTES, first_row // 2) + 1)
    if rows == FULL:
        rows, columns, strings = kernel(array, len(data) // MIN_ROW_BYTES + 1)
    if rows < 0:
        return None
    texts = [data[offset:offset + length].decode("ascii")
             for offset, length in strings[:, :2].tolist()]
    op_names = [nccl_names.OPS.get(text) for text in texts]
    if any(name is None for name, kinds in zip(op_names, strings[:, 3].tolist(), strict=True)
           if kinds & KIND_OP):
        return None
    return ScannedRows(pl.DataFrame(columns), pl.Series(texts, dtype=pl.String),
                       pl.Series(op_names, dtype=pl.String))

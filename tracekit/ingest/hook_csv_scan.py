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

FIELDS = ("rank", "host_id", "pid", "cuda_dev", "comm_id", "nranks", "op_id", "seq", "count",
          "datatype", "bytes", "peer", "t_start_ns", "t_end_ns")
"""Rows of the kernel's output array, one column per row of the block: the ``collectives``
columns, with ``*_id`` indexing the block's distinct strings and ``datatype`` the
``ncclDataType_t`` code; ``peer`` and ``t_end_ns`` are -1 where null. The C scan names the
rows in the same order."""

KIND_HOST, KIND_COMM, KIND_OP = 1, 2, 4
"""Bits of a distinct string's kinds (also in the C scan): which fields it was read from."""

MIN_ROW_BYTES = 29
"""The shortest row the table can take, its line end included (nine one-digit integers, a
four-letter op, empty optional fields, 15 commas): a block of n bytes holds at most
``n // MIN_ROW_BYTES + 1`` rows."""

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
    """What the scan made of a block: ``rows`` holds the :data:`FIELDS` of every row (Int64),
    ``strings`` the block's distinct texts that ``host_id``, ``comm_id`` and ``op_id`` index,
    ``op_names`` the tracekit op name of each (null for texts that are no op's)."""

    rows: pl.DataFrame
    strings: pl.Series
    op_names: pl.Series


def _kernel(function):
    """The C function wrapped to take the block and return numpy arrays, which it allocates:
    ``fields`` has a column per possible row, ``strings`` rows of (offset, length, hash,
    kinds)."""
    int64s = np.ctypeslib.ndpointer(np.int64, flags="C_CONTIGUOUS")
    function.argtypes = [np.ctypeslib.ndpointer(np.uint8, flags="C_CONTIGUOUS"), ctypes.c_int64,
                         int64s, ctypes.c_int64, int64s, ctypes.c_int64, int64s, ctypes.c_int64,
                         int64s, int64s]
    function.restype = ctypes.c_int64

    def kernel(data: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
        capacity = data.size // MIN_ROW_BYTES + 1
        fields = np.empty((len(FIELDS), capacity), np.int64)
        strings = np.empty((MAX_STRINGS, 4), np.int64)
        table = np.full(2 * MAX_STRINGS, -1, np.int64)
        used = np.zeros(1, np.int64)
        rows = function(data, data.size, DTYPE_BYTES, DTYPE_BYTES.size, fields, capacity,
                        strings, MAX_STRINGS, table, used)
        return rows, fields[:, :max(rows, 0)], strings[:used[0]]

    return kernel


compiled = compiled_kernels.Lazy(Path(__file__).with_suffix(".c"),
                                 lambda library: _kernel(library.hook_csv_scan))
"""The scan, ``compiled()(block array) -> (rows, fields, strings)`` (rows -1 for a refused
block), or None where it cannot be built; built once by the C compiler and cached."""


def scan(data: bytes) -> ScannedRows | None:
    """The rows of ``data`` (whole rows, the last one possibly without its line end, no
    header); None when the scan refuses the block (a row it does not take, an op name NCCL
    does not have) or is not available."""
    kernel = compiled()
    if kernel is None:
        return None
    rows, fields, strings = kernel(np.frombuffer(data, dtype=np.uint8))
    if rows < 0:
        return None
    texts = [data[offset:offset + length].decode("ascii")
             for offset, length in strings[:, :2].tolist()]
    op_names = [nccl_names.OPS.get(text) for text in texts]
    if any(name is None for name, kinds in zip(op_names, strings[:, 3].tolist(), strict=True)
           if kinds & KIND_OP):
        return None
    return ScannedRows(pl.DataFrame({name: fields[index] for index, name in enumerate(FIELDS)}),
                       pl.Series(texts, dtype=pl.String), pl.Series(op_names, dtype=pl.String))

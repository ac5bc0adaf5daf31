"""NCCL's enumerations as tracekit names: operations and element types with their sizes.

Shared by every reader of collective calls (hook CSV, NCCL debug logs, Inspector, profiler,
flight recorder) so an op or dtype is spelled one way in the ``collectives`` table.
"""

from __future__ import annotations

import polars as pl

DTYPES: dict[int, tuple[str, int]] = {
    0: ("int8", 1),
    1: ("uint8", 1),
    2: ("int32", 4),
    3: ("uint32", 4),
    4: ("int64", 8),
    5: ("uint64", 8),
    6: ("float16", 2),
    7: ("float32", 4),
    8: ("float64", 8),
    9: ("bfloat16", 2),
    10: ("float8e4m3", 1),
    11: ("float8e5m2", 1),
}
"""``ncclDataType_t`` value -> (tracekit dtype name, bytes per element); src/nccl.h.in."""

DTYPE_SIZES: dict[str, int] = {name: size for name, size in DTYPES.values()}

OPS: dict[str, str] = {
    "AllReduce": "allreduce",
    "AllGather": "allgather",
    "ReduceScatter": "reducescatter",
    "Broadcast": "broadcast",
    "Reduce": "reduce",
    "Send": "send",
    "Recv": "recv",
    "AlltoAll": "alltoall",
    "Gather": "gather",
    "Scatter": "scatter",
    "PutSignal": "putsignal",
    "Signal": "signal",
    "WaitSignal": "waitsignal",
}
"""NCCL operation name (as printed by COLL lines and the shim) -> tracekit op name."""

P2P_OPS = ("send", "recv")
ROOTED_OPS = ("broadcast", "reduce", "gather", "scatter")


_DTYPE_CODES = max(DTYPES) + 1
_DTYPE_NAMES = pl.Series([DTYPES[code][0] if code in DTYPES else None
                          for code in range(_DTYPE_CODES)], dtype=pl.String)
_DTYPE_BYTES = pl.Series([DTYPES[code][1] if code in DTYPES else None
                          for code in range(_DTYPE_CODES)], dtype=pl.Int64)


def _by_code(code: pl.Expr, table: pl.Series) -> pl.Expr:
    """``table[code]``, null for a code outside it. Indexing a table by the code costs a third
    of a dictionary ``replace``, and the readers call this on every call record."""
    return pl.when(code.is_between(0, _DTYPE_CODES - 1)).then(
        pl.lit(table).gather(code.clip(0, _DTYPE_CODES - 1)))


def dtype_name(code: pl.Expr, names: pl.DataType = pl.String) -> pl.Expr:
    """Map an integer ``ncclDataType_t`` expression to the tracekit dtype name (null when
    unknown), as ``names`` (String, or a source's Categorical codes)."""
    return _by_code(code, _DTYPE_NAMES.cast(names))


def dtype_bytes(code: pl.Expr) -> pl.Expr:
    """Bytes per element of an integer ``ncclDataType_t`` expression (null when unknown)."""
    return _by_code(code, _DTYPE_BYTES)


def dtype_size(name: pl.Expr) -> pl.Expr:
    """Bytes per element of a tracekit dtype-name expression."""
    return name.replace_strict(DTYPE_SIZES, default=None, return_dtype=pl.Int64)


def op_name(nccl_name: pl.Expr) -> pl.Expr:
    """Map NCCL's operation name to the tracekit op name (null when unknown)."""
    return nccl_name.replace_strict(OPS, default=None, return_dtype=pl.String)

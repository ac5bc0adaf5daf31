"""PyTorch Flight Recorder dumps (ProcessGroupNCCL trace buffer): the pickle written by default
(``<TORCH_FR_DUMP_TEMP_FILE><rank>``) and the JSON variant, schema versions 1.x to 2.10.

A dump holds the last N ops each rank enqueued before a hang or an on-demand dump. Pickles
are read with :mod:`tracekit.ingest.safe_pickle`, never ``pickle.load``. Missing keys are
tolerated (fields accreted over versions); an entry without an op name or creation time is
quarantined with its index as line number.

Rows: ``comm`` is the process-group name, ``seq`` is PyTorch's per-group ``op_id`` (the same
on every rank, unlike a counter over a ring buffer that dropped its oldest entries) and
``op_count`` the collective or P2P sequence id.
"""

from __future__ import annotations

import ast
import io
import json
import re
import reprlib
from collections.abc import Iterator

import polars as pl

from tracekit.core import schema
from tracekit.core.errors import InputError
from tracekit.ingest import nccl_names, safe_pickle
from tracekit.ingest.base import Chunk, Reader, Source, quarantine_frame
from tracekit.ingest.limits import check_json, too_large

TORCH_DTYPES = {
    "Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16",
    "Char": "int8", "Byte": "uint8", "Int": "int32", "Long": "int64", "Bool": "uint8",
    "UInt32": "uint32", "UInt64": "uint64", "Float8_e4m3fn": "float8e4m3",
    "Float8_e5m2": "float8e5m2",
}
"""``c10::ScalarType`` names as the recorder prints them -> tracekit dtype names."""

OPS = {
    "all_reduce": "allreduce", "allreduce": "allreduce", "allreduce_coalesced": "allreduce",
    "all_gather": "allgather", "allgather": "allgather", "_allgather_base": "allgather",
    "allgather_into_tensor_coalesced": "allgather", "all_gather_into_tensor": "allgather",
    "reduce_scatter": "reducescatter", "_reduce_scatter_base": "reducescatter",
    "reduce_scatter_tensor_coalesced": "reducescatter", "reduce_scatter_tensor": "reducescatter",
    "broadcast": "broadcast", "reduce": "reduce", "all_to_all": "alltoall",
    "alltoall": "alltoall", "alltoall_base": "alltoall", "gather": "gather",
    "scatter": "scatter", "barrier": "barrier", "send": "send", "recv": "recv",
}
"""``profiling_name`` after ``nccl:`` -> tracekit op name."""

P2P_NAME = re.compile(r"^(send|recv) (\d+)(?:->|<-)(\d+)$")
RANK_IN_NAME = re.compile(r"(\d+)(?:\.\w+)?$")


class FlightRecorderReader(Reader):
    format = "flight-recorder"
    options = ("rank",)
    version = "1"
    tables = ("collectives", "comms")
    priority = 20
    description = "PyTorch Flight Recorder dump (pickle or JSON, schema 1.x-2.10)"

    def sniff(self, source: Source) -> bool:
        head = source.head
        if head.startswith(b"\x80"):
            return b"pg_config" in head or b"entries" in head
        return head.lstrip().startswith(b"{") and b'"version"' in head and (
            b'"pg_config"' in head or b'"entries"' in head)

    def read(self, source: Source, options: dict[str, str]) -> Iterator[Chunk]:
        if source.size > source.limits.max_whole_file_bytes:
            raise InputError(too_large("a Flight Recorder dump",
                                       source.limits.max_whole_file_bytes,
                                       "max_whole_file_bytes"), source.name)
        with source.open() as stream:
            data = stream.read()
        dump = _load(data, source)
        entries = dump.get("entries") or []
        if not isinstance(entries, list):
            raise InputError("Flight Recorder 'entries' is not a list", source.name)
        rank = _global_rank(source, dump, options)
        groups = _groups(dump)
        rows, bad = [], []
        for index, entry in enumerate(entries, start=1):
            try:
                row = _row(entry, groups, rank) if isinstance(entry, dict) else None
                reason = "entry without profiling_name or time_created_ns"
            except (TypeError, ValueError, OverflowError, IndexError) as error:
                row, reason = None, f"malformed entry ({type(error).__name__}: {error})"
            if row is None:
                bad.append({"line_no": index, "line": reprlib.repr(entry), "reason": reason})
            else:
                rows.append(row)
        collectives = pl.DataFrame(rows, schema={
            "rank": pl.Int32, "comm": pl.String, "nranks": pl.Int32, "op": pl.String,
            "seq": pl.Int64, "op_count": pl.Int64, "count": pl.Int64, "dtype": pl.String,
            "peer": pl.Int32, "t_start_ns": pl.Int64, "t_end_ns": pl.Int64})
        collectives = collectives.with_columns(
            pl.lit(None, dtype=pl.String).alias("job"),
            (pl.col("count") * nccl_names.dtype_size(pl.col("dtype"))).alias("bytes"))
        comms = pl.DataFrame(
            [{"comm": name, "rank": rank, "comm_rank": ranks.index(rank)
              if rank in ranks else None, "nranks": len(ranks) or None, "comm_name": desc}
             for name, (desc, ranks) in groups.items()],
            schema={"comm": pl.String, "rank": pl.Int32, "comm_rank": pl.Int32,
                    "nranks": pl.Int32, "comm_name": pl.String},
        ).with_columns(pl.lit(None, dtype=pl.String).alias("job"))
        bad_frame = pl.DataFrame(bad, schema={"line_no": pl.Int64, "line": pl.String,
                                              "reason": pl.String})
        notes = [f"Flight Recorder schema {dump.get('version', '?')}: the last {len(entries)} "
                 "ops before the dump, not the whole run"]
        if rank is None:
            notes.append("global rank unknown: name the file <prefix><rank> as PyTorch does, or "
                         "pass --option rank=N")
        yield Chunk(tables={"collectives": schema.conform("collectives", collectives),
                            "comms": schema.conform("comms", comms)},
                    quarantine=quarantine_frame(source, bad_frame), lines=len(entries),
                    skipped=0, bytes_read=len(data), notes=notes)


def _load(data: bytes, source: Source) -> dict:
    """The dump as plain data, checked against the source's limits before it is walked."""
    path, limits = source.name, source.limits
    if data.lstrip().startswith(b"{"):
        check_json(source, io.BytesIO(data))
        try:
            dump = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise InputError(f"invalid Flight Recorder JSON: {error}", path) from None
    else:
        dump = safe_pickle.loads(data, path, limits)
    if not isinstance(dump, dict):
        raise InputError("not a Flight Recorder dump (top level is not a dict)", path)
    return dump


def _global_rank(source: Source, dump: dict, options: dict[str, str]) -> int | None:
    """The ``rank`` option, else the number ending the file name (PyTorch writes one file per
    global rank), else the rank on the largest communicator in ``nccl_comm_state``."""
    if "rank" in options:
        return int(options["rank"])
    found = RANK_IN_NAME.search(source.file_name)
    if found:
        return int(found.group(1))
    states = [s for s in (dump.get("nccl_comm_state") or {}).values() if isinstance(s, dict)]
    best = max(states, key=lambda s: int(s.get("nRanks", 0) or 0), default=None)
    return int(best["rank"]) if best and str(best.get("rank", "")).isdigit() else None


def _groups(dump: dict) -> dict[str, tuple[str | None, list[int]]]:
    """Process-group name -> (desc, member ranks) from ``pg_config`` (ranks is a string)."""
    groups = {}
    for key, config in (dump.get("pg_config") or {}).items():
        if not isinstance(config, dict):
            continue
        ranks = config.get("ranks", "[]")
        try:
            members = ranks if isinstance(ranks, list) else ast.literal_eval(str(ranks))
        except (ValueError, SyntaxError):
            members = []
        if not isinstance(members, list | tuple) or not all(map(_is_int64, members)):
            members = []
        groups[str(config.get("name", key))] = (config.get("desc"), list(members))
    return groups


def _row(entry: dict, groups: dict, rank: int | None) -> dict | None:
    name = str(entry.get("profiling_name") or "").removeprefix("nccl:")
    created = entry.get("time_created_ns")
    if not name or not _is_int64(created):
        return None
    p2p = P2P_NAME.match(name)
    op = p2p.group(1) if p2p else OPS.get(name, name)
    group = entry.get("process_group") or [entry.get("pg_id")]
    comm = str(group[0]) if group and group[0] is not None else None
    sizes = entry.get("output_sizes" if op == "reducescatter" else "input_sizes") or []
    count = sum(_numel(shape) for shape in sizes) if sizes else None
    dtypes = entry.get("input_dtypes") or []
    duration_ms = entry.get("duration_ms")
    seq_id = entry.get("p2p_seq_id") if entry.get("is_p2p") else entry.get("collective_seq_id")
    return {
        "rank": rank, "comm": comm,
        "nranks": len(groups.get(comm, (None, []))[1]) or None,
        "op": op, "seq": _int64(entry.get("op_id")), "op_count": _int64(seq_id),
        "count": _int64(count),
        "dtype": TORCH_DTYPES.get(dtypes[0]) if dtypes else None,
        "peer": int(p2p.group(3)) if p2p else None,
        "t_start_ns": created,
        "t_end_ns": _int64(created + round(duration_ms * 1e6))
        if isinstance(duration_ms, int | float) else None,
    }


def _is_int64(value: object) -> bool:
    """A whole number a 64-bit column can hold (bools are not counts)."""
    return isinstance(value, int) and not isinstance(value, bool) and -2**63 <= value < 2**63


def _int64(value: object) -> int | None:
    """``value`` where an Int64 column can hold it; anything else (a float, a string, a
    number beyond 64 bits) is unknown rather than a reason to lose the entry."""
    return value if _is_int64(value) else None


def _numel(shape) -> int:
    total = 1
    for extent in shape:
        total *= int(extent)
    return total


READERS = [FlightRecorderReader()]

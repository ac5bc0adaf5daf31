"""A compiled scan of the common COLL line in a block of ``NCCL_DEBUG=INFO`` text.

Almost every line of a COLL log has one shape: an optional launcher prefix or timestamp, the
``host:pid:tid [dev] NCCL INFO `` envelope, then ``<Op>: opCount <hex> sendbuff <p> recvbuff
<p> count <n> datatype <n> op <n> root <n> comm <p> [nranks=<n>] stream <p>`` (RCCL adds
``task <n> globalrank <n>``). Polars string kernels tokenise such a line in about 1 us; this
numba loop reads it byte by byte in a fraction of that and writes its numbers into arrays.

It accepts a line only when the polars parser in :mod:`tracekit.ingest.nccl_debug` would read
it as a good call with exactly these values, and hands back every other line (Init lines, other
subsystems, torn, spliced, truncated or unusual lines) untouched, so that parser keeps every
corner case. What it accepts is deliberately narrow: printable ASCII only, one ``NCCL`` in the
line, single spaces between fields, numbers that fit their column, and a timestamp before the
host only in the three forms the polars parser reads (``[%F %T(.frac)]``, ISO 8601 with an
optional zone, epoch seconds) where they are the first run of four or more digits.

The scan is built once into a cached extension module (:mod:`tracekit.core.compiled`), or where that
cannot be built JIT-compiled by numba. numba is optional: without it (or when compiling fails)
:func:`compiled` returns None and the polars parser reads every line, with the same output.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from tracekit.core import compiled as compiled_kernels

FIELDS = ("line_index", "host_id", "pid", "cuda_dev", "op_id", "op_count", "count", "datatype",
          "root", "comm_id", "nranks", "global_rank", "ts_kind", "ts_seconds", "ts_offset_s",
          "ts_frac_ns")
"""Rows of the kernel's output array, one column per accepted line. ``*_id`` index the block's
distinct strings; ``ts_*`` are the parts of the timestamp (see :data:`TS_NONE`...)."""
(LINE_INDEX, HOST_ID, PID, CUDA_DEV, OP_ID, OP_COUNT, COUNT, DATATYPE, ROOT, COMM_ID, NRANKS,
 GLOBAL_RANK, TS_KIND, TS_SECONDS, TS_OFFSET_S, TS_FRAC_NS) = range(len(FIELDS))

TS_NONE, TS_LOCAL, TS_ZONED, TS_EPOCH = 0, 1, 2, 3
"""Timestamp kinds: none; a wall-clock time without zone (``ts_seconds`` counts its seconds as
if it were UTC); the same with a zone offset; epoch seconds."""

NO_GLOBAL_RANK = -(2**62)
"""``global_rank`` of a line without RCCL's ``globalrank`` suffix."""

MIN_LINE_BYTES = 100
"""Fewer bytes than the shortest line the scan accepts (113 with one-character fields), so a
block of n bytes has at most ``n // MIN_LINE_BYTES`` accepted lines."""

MAX_STRINGS = 1 << 15
"""Distinct hosts, op names and comm pointers one block may hold; lines bringing more go to the
polars parser."""

MIN_YEAR, MAX_YEAR = 1900, 2200
"""Years the scan converts itself; polars' nanosecond datetimes span 1678-2262."""


_COMPILED_FUNCTIONS: dict[str, bool] = {}
"""The scan's functions, by name, with whether each is compiled into its callers. They are
compiled by :func:`compiled` on first use, not at import: importing numba costs every ingest
process a quarter of a second, and most ingests read no NCCL debug log."""


def _jit(function):
    """Compiled with numba (on first use), cached on disk beside the module."""
    _COMPILED_FUNCTIONS[function.__name__] = False
    return function


def _inlined(function):
    """Compiled into its callers: calling a function that takes the block's arrays once per
    line and field cost 30% of the scan. The rarely run timestamp parsers stay calls, which
    halves the first compilation (about 30 CPU-s instead of 50)."""
    _COMPILED_FUNCTIONS[function.__name__] = True
    return function


def _literal(text: str) -> np.ndarray:
    return np.frombuffer(text.encode(), dtype=np.uint8).copy()


OPCOUNT = _literal(": opCount ")
SENDBUFF = _literal(" sendbuff ")
RECVBUFF = _literal(" recvbuff ")
COUNT_KEY = _literal(" count ")
DATATYPE_KEY = _literal(" datatype ")
OP_KEY = _literal(" op ")
ROOT_KEY = _literal(" root ")
COMM_KEY = _literal(" comm ")
NRANKS_KEY = _literal(" [nranks=")
STREAM_KEY = _literal("] stream ")
TASK_KEY = _literal(" task ")
GLOBALRANK_KEY = _literal(" globalrank ")
INFO_KEY = _literal("NCCL INFO ")

SPACE, NEWLINE, RETURN = 32, 10, 13
COLON, LEFT, RIGHT, MINUS, PLUS, DOT, COMMA = 58, 91, 93, 45, 43, 46, 44


@_inlined
def _is_digit(byte):
    return 48 <= byte <= 57


@_inlined
def _is_host_char(byte):
    """``[^\\s:\\[\\]<>()]`` on printable ASCII: the characters of a host name."""
    return byte not in (SPACE, COLON, LEFT, RIGHT, 60, 62, 40, 41)


@_inlined
def _expect(data, pos, stop, literal):
    """The position after ``literal`` when the text at ``pos`` starts with it, else -1."""
    if pos < 0 or pos + literal.size > stop:
        return -1
    for k in range(literal.size):
        if data[pos + k] != literal[k]:
            return -1
    return pos + literal.size


@_inlined
def _unsigned(data, pos, stop, max_digits):
    """(value, position after) of 1 to ``max_digits`` decimal digits at ``pos``; position -1
    when there are none or more."""
    if pos < 0:
        return 0, -1
    value, start = 0, pos
    while pos < stop and _is_digit(data[pos]):
        if pos - start == max_digits:
            return 0, -1
        value = value * 10 + (data[pos] - 48)
        pos += 1
    return (value, pos) if pos > start else (0, -1)


@_inlined
def _signed(data, pos, stop, max_digits):
    if 0 <= pos < stop and data[pos] == MINUS:
        value, pos = _unsigned(data, pos + 1, stop, max_digits)
        return -value, pos
    return _unsigned(data, pos, stop, max_digits)


@_inlined
def _hex(data, pos, stop, max_digits):
    """(value, position after) of 1 to ``max_digits`` hex digits, either case."""
    if pos < 0:
        return 0, -1
    value, start = 0, pos
    while pos < stop:
        byte = data[pos]
        if _is_digit(byte):
            digit = byte - 48
        elif 97 <= byte <= 102:
            digit = byte - 87
        elif 65 <= byte <= 70:
            digit = byte - 55
        else:
            break
        if pos - start == max_digits:
            return 0, -1
        value = value * 16 + digit
        pos += 1
    return (value, pos) if pos > start else (0, -1)


@_inlined
def _token(data, pos, stop):
    """The end of the non-empty run of printable non-space characters at ``pos``, else -1
    (also for an ``N``: it might start a second ``NCCL``)."""
    if pos < 0:
        return -1
    start = pos
    while pos < stop and data[pos] != SPACE:
        if data[pos] < 33 or data[pos] > 126 or data[pos] == 78:  # N: a second NCCL, maybe
            return -1
        pos += 1
    return pos if pos > start else -1


@_inlined
def _intern(data, start, stop, strings, table, used):
    """The id of ``data[start:stop]`` among this block's distinct strings (adding it when new),
    or -1 when the table is full. ``strings`` rows are (offset, length, hash)."""
    hashed = 0
    for k in range(start, stop):
        hashed = (hashed * 131 + data[k]) & 0xFFFFFFFFFFFF
    mask = table.size - 1
    slot = hashed & mask
    while True:
        found = table[slot]
        if found < 0:
            if used[0] == strings.shape[0]:
                return -1
            found = used[0]
            strings[found, 0], strings[found, 1], strings[found, 2] = start, stop - start, hashed
            table[slot] = found
            used[0] += 1
            return found
        if strings[found, 2] == hashed and strings[found, 1] == stop - start:
            offset, same = strings[found, 0], True
            for k in range(stop - start):
                if data[offset + k] != data[start + k]:
                    same = False
                    break
            if same:
                return found
        slot = (slot + 1) & mask


@_inlined
def _days_from_civil(year, month, day):
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm)."""
    year -= 1 if month <= 2 else 0
    era = year // 400
    year_of_era = year - era * 400
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146097 + day_of_era - 719468


@_inlined
def _days_in_month(year, month):
    if month == 2:
        leap = (year % 4 == 0 and year % 100 != 0) or year % 400 == 0
        return 29 if leap else 28
    return 30 if month in (4, 6, 9, 11) else 31


@_inlined
def _fraction_ns(data, pos, stop):
    """(nanoseconds, position after) of the 1-9 digits after a decimal mark at ``pos``; the
    regex takes at most nine, so a tenth digit is left where it is."""
    value, digits = 0, 0
    while pos < stop and digits < 9 and _is_digit(data[pos]):
        value = value * 10 + (data[pos] - 48)
        digits += 1
        pos += 1
    for _ in range(9 - digits):
        value *= 10
    return value, pos, digits


@_inlined
def _two_digits(data, pos, stop):
    """The number of the two digits at ``pos`` (whatever follows them), else -1."""
    if pos >= 0 and pos + 2 <= stop and _is_digit(data[pos]) and _is_digit(data[pos + 1]):
        return (data[pos] - 48) * 10 + (data[pos + 1] - 48)
    return -1


@_inlined
def _is_at(data, pos, stop, byte, other):
    """Whether the character at ``pos`` is ``byte`` or ``other``."""
    return 0 <= pos < stop and (data[pos] == byte or data[pos] == other)


@_jit
def _iso_time(data, pos, stop, fields, row):
    """``YYYY-MM-DD[T ]HH:MM:SS([.,]frac)?(Z|[+-]HH:?MM)?`` at ``pos``, where a run of exactly
    four digits starts. False for anything else, and for dates polars would not parse."""
    year = _unsigned(data, pos, pos + 4, 4)[0]
    month = _two_digits(data, pos + 5, stop) if _is_at(data, pos + 4, stop, MINUS, MINUS) else -1
    day = _two_digits(data, pos + 8, stop) if _is_at(data, pos + 7, stop, MINUS, MINUS) else -1
    hour = _two_digits(data, pos + 11, stop) if _is_at(data, pos + 10, stop, 84, SPACE) else -1
    minute = _two_digits(data, pos + 14, stop) if _is_at(data, pos + 13, stop, COLON,
                                                          COLON) else -1
    second = _two_digits(data, pos + 17, stop) if _is_at(data, pos + 16, stop, COLON,
                                                          COLON) else -1
    if min(month, day, hour, minute, second) < 0 or not (
            MIN_YEAR <= year <= MAX_YEAR and 1 <= month <= 12
            and 1 <= day <= _days_in_month(year, month) and hour < 24 and minute < 60
            and second < 60):
        return False
    pos += 19
    frac = 0
    if _is_at(data, pos, stop, DOT, COMMA) and pos + 1 < stop and _is_digit(data[pos + 1]):
        frac, pos, _ = _fraction_ns(data, pos + 1, stop)
    kind, offset = TS_LOCAL, 0
    if _is_at(data, pos, stop, 90, 90):  # Z
        kind = TS_ZONED
    elif _is_at(data, pos, stop, PLUS, MINUS):
        zone_hours = _two_digits(data, pos + 1, stop)
        colon = _is_at(data, pos + 3, stop, COLON, COLON)
        zone_minutes = _two_digits(data, pos + 4 if colon else pos + 3, stop)
        if zone_hours >= 0 and zone_minutes >= 0:
            kind = TS_ZONED
            offset = zone_hours * 3600 + zone_minutes * 60
            offset = -offset if data[pos] == MINUS else offset
    fields[TS_KIND, row] = kind
    fields[TS_SECONDS, row] = (_days_from_civil(year, month, day) * 86400 + hour * 3600
                               + minute * 60 + second)
    fields[TS_OFFSET_S, row] = offset
    fields[TS_FRAC_NS, row] = frac
    return True


@_jit
def _epoch_time(data, start, pos, stop, fields, row):
    """Ten digits of epoch seconds at ``pos`` with an optional ``.frac`` of 1-9 digits,
    after the prefix start, a space or ``[`` and before its end, a space or ``]``."""
    if pos > start and data[pos - 1] != SPACE and data[pos - 1] != LEFT:
        return False
    seconds, pos = _unsigned(data, pos, stop, 10)
    frac = 0
    if pos + 1 < stop and data[pos] == DOT and _is_digit(data[pos + 1]):
        frac, pos, digits = _fraction_ns(data, pos + 1, stop)
        if pos < stop and _is_digit(data[pos]):
            return False
    if pos < stop and data[pos] != SPACE and data[pos] != RIGHT:
        return False
    fields[TS_KIND, row] = TS_EPOCH
    fields[TS_SECONDS, row] = seconds
    fields[TS_OFFSET_S, row] = 0
    fields[TS_FRAC_NS, row] = frac
    return True


@_inlined
def _timestamp(data, start, stop, fields, row):
    """Read the timestamp in the prefix ``data[start:stop]``: the first run of four or more
    digits must be a whole timestamp (or absent); False otherwise."""
    pos = start
    while pos < stop:
        if not _is_digit(data[pos]):
            pos += 1
            continue
        end = pos
        while end < stop and _is_digit(data[end]):
            end += 1
        if end - pos == 4:
            return _iso_time(data, pos, stop, fields, row)
        if end - pos == 10:
            return _epoch_time(data, start, pos, stop, fields, row)
        if end - pos > 4:
            return False
        pos = end
    fields[TS_KIND, row] = TS_NONE
    fields[TS_SECONDS, row] = 0
    fields[TS_OFFSET_S, row] = 0
    fields[TS_FRAC_NS, row] = 0
    return True


@_inlined
def _envelope(data, start, head_end, fields, row, strings, table, used):
    """Read ``host:pid:tid [dev]`` ending at ``head_end`` backwards, as the polars parser's
    end-anchored regex does; returns where the host starts, or -1."""
    pos = head_end - 1
    if pos < start or data[pos] != RIGHT:
        return -1
    dev_end = pos
    pos -= 1
    while pos >= start and _is_digit(data[pos]):
        pos -= 1
    if dev_end - pos - 1 < 1 or dev_end - pos - 1 > 9 or pos < start + 1 or data[pos] != LEFT \
            or data[pos - 1] != SPACE:
        return -1
    fields[CUDA_DEV, row] = _unsigned(data, pos + 1, dev_end, 9)[0]
    tid_end = pos - 1
    pos = tid_end - 1
    while pos >= start and _is_digit(data[pos]):
        pos -= 1
    if pos == tid_end - 1 or pos < start or data[pos] != COLON:
        return -1
    pid_end = pos
    pos -= 1
    while pos >= start and _is_digit(data[pos]):
        pos -= 1
    if pid_end - pos - 1 < 1 or pid_end - pos - 1 > 18 or pos < start or data[pos] != COLON:
        return -1
    fields[PID, row] = _unsigned(data, pos + 1, pid_end, 18)[0]
    host_end = pos
    pos -= 1
    while pos >= start and _is_host_char(data[pos]):
        pos -= 1
    host_start = pos + 1
    if host_start == host_end:
        return -1
    host = _intern(data, host_start, host_end, strings, table, used)
    fields[HOST_ID, row] = host
    return host_start if host >= 0 else -1


@_inlined
def _message(data, pos, stop, fields, row, strings, table, used):
    """Read the COLL message from ``pos`` to the line's end; False unless it is exactly the
    common shape with every number in range."""
    op_start = pos
    while pos < stop and (65 <= data[pos] <= 90 or 97 <= data[pos] <= 122) and data[pos] != 78:
        pos += 1  # letters but N (no NCCL op name has one; it might start a second NCCL)
    if pos == op_start:
        return False
    op_end = pos
    fields[OP_COUNT, row], pos = _hex(data, _expect(data, pos, stop, OPCOUNT), stop, 15)
    pos = _token(data, _expect(data, pos, stop, SENDBUFF), stop)
    pos = _token(data, _expect(data, pos, stop, RECVBUFF), stop)
    fields[COUNT, row], pos = _unsigned(data, _expect(data, pos, stop, COUNT_KEY), stop, 18)
    fields[DATATYPE, row], pos = _unsigned(data, _expect(data, pos, stop, DATATYPE_KEY), stop,
                                           18)
    pos = _token(data, _expect(data, pos, stop, OP_KEY), stop)
    fields[ROOT, row], pos = _signed(data, _expect(data, pos, stop, ROOT_KEY), stop, 9)
    comm_start = _expect(data, pos, stop, COMM_KEY)
    comm_end = _token(data, comm_start, stop)
    fields[NRANKS, row], pos = _unsigned(data, _expect(data, comm_end, stop, NRANKS_KEY), stop,
                                         9)
    pos = _token(data, _expect(data, pos, stop, STREAM_KEY), stop)
    fields[GLOBAL_RANK, row] = NO_GLOBAL_RANK
    if 0 <= pos < stop:
        pos = _token(data, _expect(data, pos, stop, TASK_KEY), stop)
        fields[GLOBAL_RANK, row], pos = _signed(
            data, _expect(data, pos, stop, GLOBALRANK_KEY), stop, 9)
    if pos != stop:
        return False
    fields[OP_ID, row] = _intern(data, op_start, op_end, strings, table, used)
    fields[COMM_ID, row] = _intern(data, comm_start, comm_end, strings, table, used)
    return fields[OP_ID, row] >= 0 and fields[COMM_ID, row] >= 0


@_inlined
def _line(data, start, stop, fields, row, strings, table, used):
    """Read the line ``data[start:stop]``: printable, its first ``NCCL`` starts `` NCCL INFO ``
    (and the message holds no other)."""
    nccl_at = start
    while nccl_at + 3 < stop:
        byte = data[nccl_at]
        if byte < SPACE or byte > 126:
            return False
        if byte == 78 and data[nccl_at + 1] == 67 and data[nccl_at + 2] == 67 \
                and data[nccl_at + 3] == 76:
            break
        nccl_at += 1
    if nccl_at <= start or data[nccl_at - 1] != SPACE or _expect(data, nccl_at, stop,
                                                                  INFO_KEY) < 0:
        return False
    host_start = _envelope(data, start, nccl_at - 1, fields, row, strings, table, used)
    if host_start < 0 or not _timestamp(data, start, host_start, fields, row):
        return False
    return _message(data, nccl_at + INFO_KEY.size, stop, fields, row, strings, table, used)


@_jit
def _scan(data):
    """Scan a block of whole lines. Returns (lines, accepted, fields, strings, string count,
    rejected runs as rows of (first line index, line count), run count, the rejected lines'
    bytes, their length)."""
    size = data.size
    capacity = size // MIN_LINE_BYTES + 1
    fields = np.empty((len(FIELDS), capacity), np.int64)
    runs = np.empty((capacity + 1, 2), np.int64)
    rejected = np.empty(size, np.uint8)
    strings = np.empty((MAX_STRINGS, 3), np.int64)
    table = np.full(2 * MAX_STRINGS, -1, np.int64)
    used = np.zeros(1, np.int64)
    line, accepted, run_count, rejected_size, start = 0, 0, 0, 0, 0
    while start < size:
        pos = start
        while pos < size and data[pos] != NEWLINE:
            pos += 1
        terminated = pos < size
        stop = pos - 1 if terminated and pos > start and data[pos - 1] == RETURN else pos
        ok = (terminated and accepted < capacity
              and _line(data, start, stop, fields, accepted, strings, table, used))
        if ok:
            fields[LINE_INDEX, accepted] = line
            accepted += 1
        else:
            if run_count > 0 and runs[run_count - 1, 0] + runs[run_count - 1, 1] == line:
                runs[run_count - 1, 1] += 1
            else:
                runs[run_count, 0], runs[run_count, 1] = line, 1
                run_count += 1
            end = pos + 1 if terminated else pos
            rejected[rejected_size:rejected_size + end - start] = data[start:end]
            rejected_size += end - start
        line += 1
        start = pos + 1
    return (line, accepted, fields, strings, used[0], runs, run_count, rejected, rejected_size)


@dataclass
class ScannedBlock:
    """What the scan made of a block: ``calls`` holds the accepted lines' values (the
    :data:`FIELDS` numbers), whose ``host_id``, ``op_id`` and ``comm_id`` index ``strings``,
    the block's distinct texts (a few dozen: the reader maps them to its own ids once per
    block instead of hashing a text per call); ``rejected`` the other lines' bytes, whose
    indices in the block are ``rejected_lines``."""

    lines: int
    calls: pl.DataFrame
    strings: pl.Series
    rejected: bytes
    rejected_lines: np.ndarray


_compiled = None
_failed = False
_compiling = threading.Lock()
"""Held while loading or compiling: blocks are scanned on several threads, and the first ones
to arrive must not build (and wrap the functions) twice."""


def compiled():
    """The compiled scan, or None when numba is missing or cannot compile it. Built once ahead
    of time into a cached extension module (:mod:`tracekit.core.compiled`: no numba import, so no
    0.45 s start per process), else JIT-compiled and cached by numba. A thread arriving while
    another loads it waits: parsing that block with polars instead was measured slower (more
    CPU and more wall time)."""
    global _compiled, _failed
    if _compiled is not None or _failed:
        return _compiled
    with _compiling:
        if _compiled is None and not _failed:
            try:
                kernel = compiled_kernels.kernel("nccl_coll_scan", Path(__file__),
                                                 _ahead_of_time)
                if kernel is not None:  # a JIT kernel compiles now, under the lock
                    kernel(np.frombuffer(b"x\n", dtype=np.uint8))
            except Exception:  # noqa: BLE001 - any compiler failure means: parse with polars
                kernel = None
            _compiled, _failed = kernel, kernel is None
        return _compiled


def _numba_callees() -> None:
    """Make the scan's callees numba functions (once): compiling the scan, ahead of time or
    just in time, inlines or calls them."""
    import numba

    module = globals()
    for name, inline in _COMPILED_FUNCTIONS.items():  # callees first, as defined
        if name != "_scan" and not isinstance(module[name], numba.core.dispatcher.Dispatcher):
            options = {"inline": "always"} if inline else {}
            module[name] = numba.njit(cache=True, nogil=True, **options)(module[name])


def _ahead_of_time():
    """The scan and its signature, for :mod:`tracekit.core.compiled` to build."""
    from numba import types

    _numba_callees()
    table = types.Array(types.int64, 2, "C")
    returned = types.Tuple((types.int64, types.int64, table, table, types.int64, table,
                            types.int64, types.Array(types.uint8, 1, "C"), types.int64))
    return _scan, returned(types.Array(types.uint8, 1, "C", readonly=True))


def scan(block: bytes) -> ScannedBlock | None:
    """Scan ``block`` (whole lines, the last one possibly without its line end); None when the
    compiled scan is not available."""
    kernel = compiled()
    if kernel is None:
        return None
    (lines, accepted, fields, strings, string_count, runs, run_count, rejected,
     rejected_size) = kernel(np.frombuffer(block, dtype=np.uint8))
    texts = pl.Series([block[offset:offset + length].decode("ascii")
                       for offset, length in strings[:string_count, :2].tolist()],
                      dtype=pl.String)
    calls = pl.DataFrame({name: fields[index, :accepted] for index, name in enumerate(FIELDS)})
    first, count = runs[:run_count, 0], runs[:run_count, 1]
    rejected_lines = np.arange(count.sum()) + np.repeat(first - (np.cumsum(count) - count), count)
    return ScannedBlock(lines, calls, texts, rejected[:rejected_size].tobytes(), rejected_lines)

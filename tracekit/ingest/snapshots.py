"""Time and host of snapshot-style monitoring dumps, which rarely print either themselves.

Collectors wrap tools like ``ipmitool sensor`` or ``grep -H . hw_counters/*`` in a loop and mark
each snapshot with a line of their own: ``# ts=1760433600 host=gpu-a17`` or a bare ``date +%s`` /
``date -Iseconds`` line. When a file has no such line, its time may sit in the file name
(``ipmi_1760433600.txt``, ``dcgm-2025-10-14T09:20:00Z.prom``) or come from ``--option ts=...``.
This module turns those conventions into ``ts_ns`` / ``host`` columns, vectorised over lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import polars as pl

from tracekit.core.errors import InputError
from tracekit.ingest.base import Chunk, Source

_NUMERIC = r"\d{9,19}(?:\.\d+)?"
_ISO = r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"
TIMESTAMP_PATTERN = f"(?:{_ISO}|{_NUMERIC})"
"""An epoch number (s, ms, µs or ns, told apart by magnitude) or an ISO 8601 time."""

_MARKER_TS = rf"^\s*#.*\bts=({TIMESTAMP_PATTERN})"
_MARKER_HOST = r"^\s*#.*\bhost=(\S+)"
_BARE_TS = rf"^\s*(?:#\s*)?({TIMESTAMP_PATTERN})\s*$"
_MAYBE_MARKER = r"^\s*[#\d]"
"""What every line the three patterns above match starts with."""

_FILE_NAME_TIMES = (
    (re.compile(r"(?<!\d)(\d{4})-?(\d\d)-?(\d\d)[T_ -]?(\d\d)[:\-]?(\d\d)[:\-]?(\d\d)(?!\d)"),
     "ymdhms"),
    (re.compile(r"(?<!\d)(1\d{9})(\d{3})?(?![\d])"), "epoch"),
)
"""Times in file names. An epoch may follow any separator (``dcgm.gpu-a17.1760433600.prom``)."""

EXPORTER_WORDS = frozenset({
    "dcgm", "dcgm-exporter", "dcgm_exporter", "node", "node-exporter", "node_exporter", "hwc",
    "hw_counters", "mlx5", "rnic", "nic", "ethtool", "ipmi", "ipmitool", "ipmi_exporter",
    "sensor", "sensors", "sdr", "prom", "metrics", "scrape", "counters", "dmon", "dcgmi",
    "exporter", "hw", "sys", "class", "infiniband", "ports", "port", "net", "stats",
    "statistics", "snapshot", "snapshots", "dump", "dumps", "prometheus", "telemetry",
    "monitoring", "logs", "log", "job", "jobs", "export", "exports", "data", "raw", "federate",
})
"""Collector, sysfs and dump words: never a host, in a file name or as a folder."""

_DEVICE = r"mlx\d+(?:_\d+)?|(?:eth|ib|bond|hca)\d+"
_GENERIC_TOKEN = re.compile(rf"^(?:{_DEVICE})$", re.IGNORECASE)
"""Tokens that name a device, never a host (``mlx5_0``, ``eth0``)."""

_DATE_FOLDER = re.compile(r"^\d{4}-?\d\d-?\d\d(?:$|[T_ -])")
_HOST_CHARS = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_IPV4 = re.compile(r"^\d{1,3}(?:\.\d{1,3}){3}$")
_WORD_NUMBER = re.compile(r"^[A-Za-z]+(?:-[A-Za-z]+)*-\d+$")
_TOKEN_SEPARATORS = re.compile(r"[._-]")

_EXTENSION = re.compile(r"(?:\.(?:prom|txt|log|json|csv|out|metrics|gz|xz|zst|bz2))+$",
                        re.IGNORECASE)


def epoch_ns(text: pl.Expr) -> pl.Expr:
    """Nanoseconds since the epoch from a string column holding epoch numbers or ISO times.

    Epoch numbers are told apart by magnitude (10 digits = s, 13 = ms, 16 = µs, 19 = ns) and
    their fraction is read digit by digit, so ``1760433600.123`` is exact. ISO times without an
    offset are taken as UTC.
    """
    text = text.str.strip_chars()
    whole = text.str.extract(r"^(\d+)(?:\.\d*)?$", 1)
    digits = whole.str.len_chars()
    fraction_ns = (
        text.str.extract(r"^\d+\.(\d+)$", 1).fill_null("").str.slice(0, 9).str.pad_end(9, "0")
        .cast(pl.Int64)
    )
    scale = (
        pl.when(digits <= 11).then(pl.lit(1_000_000_000, pl.Int64))
        .when(digits <= 14).then(pl.lit(1_000_000, pl.Int64))
        .when(digits <= 17).then(pl.lit(1_000, pl.Int64))
        .otherwise(pl.lit(1, pl.Int64))
    )
    numeric = whole.cast(pl.Int64, strict=False) * scale + pl.when(digits <= 11).then(fraction_ns)\
        .otherwise(0)
    iso = text.str.replace(" ", "T").str.replace(",", ".").str.replace(r"Z$", "+00:00")\
        .str.replace(r"([+-]\d\d)(\d\d)$", "${1}:${2}")
    with_offset = iso.str.strptime(pl.Datetime("ns", "UTC"), "%Y-%m-%dT%H:%M:%S%.f%:z",
                                   strict=False)
    naive = iso.str.strptime(pl.Datetime("ns"), "%Y-%m-%dT%H:%M:%S%.f", strict=False)\
        .dt.replace_time_zone("UTC")
    return pl.coalesce(numeric, with_offset.dt.epoch("ns"), naive.dt.epoch("ns"))


def parse_time_ns(text: str) -> int | None:
    """One timestamp string (epoch or ISO) to ns, or None when it is neither."""
    return pl.select(epoch_ns(pl.lit(text))).item()


def file_name_ts_ns(source: Source) -> int | None:
    """A timestamp embedded in the file name, or None. Dates (``20251014T092000``,
    ``2025-10-14_09-20-00``) win over bare 10/13-digit epoch numbers."""
    name = source.file_name
    for pattern, kind in _FILE_NAME_TIMES:
        match = pattern.search(name)
        if not match:
            continue
        if kind == "ymdhms":
            y, mo, d, h, mi, s = match.groups()
            return parse_time_ns(f"{y}-{mo}-{d}T{h}:{mi}:{s}")
        return parse_time_ns(match.group(1) + (match.group(2) or ""))
    return None


def file_host(source: Source) -> tuple[str | None, str | None]:
    """The host a monitoring file's name or folder gives, and a note when it had to be guessed.

    The first of :func:`name_host_readings`, for files whose name holds a scrape time; a name
    that holds only collector words (``node-1760433600.prom``, ``hw_counters-1760433600.txt``)
    takes the nearest folder that may name a host (:func:`folder_host_readings`:
    ``gpu-a17/node-...``), with a note, since a folder may name a job rather than a host.
    Whether the host is one the job knows is decided once the whole job is read
    (:mod:`tracekit.ingest.hosts`).
    """
    return path_host(source.name)


def path_host(path: str) -> tuple[str | None, str | None]:
    """:func:`file_host` of the source at ``path`` (an archive member's as ``archive!member``)."""
    file_name = path.rsplit("!", 1)[-1].replace("\\", "/").rsplit("/", 1)[-1]
    if not _time_in_name(file_name):
        return None, None
    readings = name_host_readings(file_name)
    if readings:
        return readings[0], None
    folders = folder_host_readings(path)
    if not folders:
        return None, None
    return folders[0], folder_host_note(folders[0])


def folder_host_note(folder: str) -> str:
    """The note of a host taken from a folder's name."""
    return (f"host {folder!r} taken from the folder name; pass --option host=NAME "
            "if the folder does not name the host")


def _time_in_name(file_name: str) -> re.Match | None:
    name = _EXTENSION.sub("", file_name)
    found = [m for pattern, _ in _FILE_NAME_TIMES if (m := pattern.search(name))]
    return found[0] if found else None


def name_host_readings(file_name: str) -> list[str]:
    """The ways a file name's text before its scrape time reads as ``<exporter><sep><host>``,
    the likeliest first; none without a time in the name.

    Leading collector words (:data:`EXPORTER_WORDS`, device and port tokens) are dropped
    whatever the separator; failing one, the first ``.`` / ``_`` token is (a dotted FQDN after
    it stays whole); ``<host>_<exporter>`` is read the other way round. A dash alone never
    splits the likeliest reading, since host names hold dashes. The less stripped readings
    follow (``node.node-1`` reads ``node-1`` after ``1`` is refused as a number), then the
    name whole where a collector word led it across a dash (``sys-gpu-01``, ``data-node-3``),
    then the readings without a collector word after a dash (``gpu01-hwc``), for the job's
    other sources to pick from."""
    match = _time_in_name(file_name)
    if match is None:
        return []
    prefix = _EXTENSION.sub("", file_name)[:match.start()].rstrip("._- ")
    stages = [prefix]
    while (lead := re.match(r"^([A-Za-z0-9]+)([._-])(.+)$", stages[-1])) and \
            _is_generic(lead.group(1)):
        stages.append(lead.group(3))
    readings = [_strip_trailing_word(stage) for stage in reversed(stages[1:] or stages)]
    if len(stages) == 1 and readings[0] == prefix and \
            (split := re.match(r"^([^._]+)[._](.+)$", prefix)):
        readings.insert(0, split.group(2))
    if len(stages) > 1 and prefix[len(prefix) - len(stages[1]) - 1] == "-":
        readings.append(prefix)
    readings += [cut for reading in readings if (cut := _strip_trailing_dash_word(reading))]
    return list(dict.fromkeys(r for r in readings if _may_be_host(r)))


def folder_host_readings(path: str) -> list[str]:
    """The folders of a source's path (an archive member's inside the archive) that may name a
    host, nearest first: not a date, not collector or dump words only."""
    folders = path.rsplit("!", 1)[-1].replace("\\", "/").split("/")[:-1]
    return [folder for folder in reversed(folders)
            if _may_be_host(folder) and not _DATE_FOLDER.match(folder)]


def _strip_trailing_word(text: str) -> str:
    """``gpu-a17_dcgm`` -> ``gpu-a17``: trailing collector words after a ``.`` or ``_``."""
    while (trail := re.match(rf"^(.+?)[._]({_DEVICE})$", text, re.IGNORECASE)
           or re.match(r"^(.+)[._]([A-Za-z0-9]+)$", text)) and _is_generic(trail.group(2)):
        text = trail.group(1)
    return text


def _strip_trailing_dash_word(text: str) -> str | None:
    """``gpu01-hwc-dcgm`` -> ``gpu01``: trailing collector words after a dash; None when there
    is none."""
    stripped = text
    while (trail := re.match(r"^(.+?)-([A-Za-z0-9]+)$", stripped)) and _is_generic(trail.group(2)):
        stripped = trail.group(1)
    return stripped if stripped != text else None


def _is_generic(word: str) -> bool:
    return word.lower() in EXPORTER_WORDS or bool(_GENERIC_TOKEN.match(word))


def _may_be_host(text: str) -> bool:
    """An IPv4 address, words and a number (``node-1``, ``data-node-3``, though ``node`` and
    ``data`` name collectors and dumps), or
    host name characters with a word that names no collector or device (``mlx5_0``,
    ``0_ports_1`` are none)."""
    if _IPV4.match(text) or _WORD_NUMBER.match(text):
        return True
    if not _HOST_CHARS.match(text) or _is_generic(text):
        return False
    return any(re.search(r"[A-Za-z]", t) and not _is_generic(t)
               for t in _TOKEN_SEPARATORS.split(text))


def option_ts_ns(options: dict[str, str], source: Source, key: str = "ts") -> int | None:
    """``--option ts=...`` as ns; a clear error when it is not a time."""
    if key not in options:
        return None
    value = parse_time_ns(options[key])
    if value is None:
        raise InputError(f"--option {key}={options[key]!r} is not an epoch time or ISO 8601 "
                         "time (e.g. 1760433600 or 2025-10-14T09:20:00Z)", source.name)
    return value


def missing_time_error(source: Source, what: str) -> InputError:
    """The error for a dump whose samples cannot be placed in time, with every way to fix it."""
    return InputError(
        f"{what} carry no timestamps and the file name holds none; add a '# ts=<epoch>' line "
        "before each snapshot, put the time in the file name (e.g. name_1760433600.prom) or "
        "pass --option ts=<epoch seconds or ISO time>",
        source.name,
    )


@dataclass
class SnapshotClock:
    """Stamps lines with the time and host of the snapshot they belong to, across batches.

    A snapshot starts at a marker line (``# ts=... host=...`` or a bare timestamp line); lines
    before the first marker take the fallback time (file name, then ``--option ts``) and host
    (``--option host``, then the file name or folder: :func:`file_host`, whose note, when the
    host was guessed from a folder, ``note`` keeps for the reader's chunks).
    """

    fallback_ts_ns: int | None
    fallback_host: str | None
    note: str | None = None
    _ts_ns: int | None = None
    _host: str | None = None
    _snapshot: int = 0

    @classmethod
    def for_source(cls, source: Source, options: dict[str, str]) -> SnapshotClock:
        fallback = file_name_ts_ns(source)
        if fallback is None:
            fallback = option_ts_ns(options, source)
        if options.get("host"):
            return cls(fallback, options["host"])
        return cls(fallback, *file_host(source))

    def annotate(self, chunk: Chunk) -> Chunk:
        """``chunk`` with this clock's note, if any, among its notes."""
        if self.note and self.note not in chunk.notes:
            chunk.notes.append(self.note)
        return chunk

    def stamp(self, lines: pl.DataFrame) -> pl.DataFrame:
        """Add ``is_marker``, ``snapshot`` (0-based), ``snap_ts_ns`` and ``snap_host`` to a frame
        with a ``line`` column."""
        line = pl.col("line")
        ts_text = pl.coalesce(line.str.extract(_MARKER_TS, 1), line.str.extract(_BARE_TS, 1))
        # a marker starts with "#" or a time's digit: the extracts run on those lines only
        # (three regexes on every line of a node_exporter file cost 0.13 CPU-s of 0.33)
        found = (lines.select(pl.int_range(pl.len(), dtype=pl.UInt32).alias("_at"), "line")
                 .filter(line.str.contains(_MAYBE_MARKER))
                 .select("_at", epoch_ns(ts_text).alias("_marker_ts"),
                         line.str.extract(_MARKER_HOST, 1).alias("_marker_host")))
        at = found["_at"]
        marked = lines.with_columns(
            pl.repeat(None, lines.height, dtype=pl.Int64, eager=True)
            .scatter(at, found["_marker_ts"]).alias("_marker_ts"),
            pl.repeat(None, lines.height, dtype=pl.String, eager=True)
            .scatter(at, found["_marker_host"]).alias("_marker_host"),
        ).with_columns(pl.col("_marker_ts").is_not_null().alias("is_marker"))
        first_ts = self._ts_ns if self._ts_ns is not None else self.fallback_ts_ns
        first_host = self._host if self._host is not None else self.fallback_host
        stamped = marked.with_columns(
            (pl.col("is_marker").cum_sum() + self._snapshot).alias("snapshot"),
            pl.col("_marker_ts").forward_fill().fill_null(pl.lit(first_ts, pl.Int64))
            .alias("snap_ts_ns"),
            pl.col("_marker_host").forward_fill().fill_null(pl.lit(first_host, pl.String))
            .alias("snap_host"),
        ).drop("_marker_ts", "_marker_host")
        if stamped.height:
            last = stamped.row(stamped.height - 1, named=True)
            self._ts_ns, self._host = last["snap_ts_ns"], last["snap_host"]
            self._snapshot = last["snapshot"]
        return stamped

"""Every reader of ``tracekit formats`` over mutated real samples: no exception but tracekit's
own one-line errors escapes, every line is accounted for, and memory stays under the budget.

The mutations are the torture test's of issue 22 in miniature: line ends changed to CR or
CRLF, a byte-order mark, NUL and invalid UTF-8 bytes, stray quotes and brackets, NaN, infinity
and numbers beyond 64 bits, lines deleted, duplicated and cut, compression magic at a block's
start. Inputs are the first lines of each sample, so the suite stays well under two minutes.
"""

from __future__ import annotations

import resource

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import FORMATS
from tests.ingest.collective_helpers import read_all
from tracekit.core.errors import TracekitError
from tracekit.ingest import registry
from tracekit.ingest.base import Source
from tracekit.ingest.hook_csv import HEADER

SEED_BYTES = 3000
"""How much of each sample a mutation starts from: a few dozen lines, every kind of line."""

HOSTILE = [b"\r", b"\r\n", b"\x00", b"\xef\xbb\xbf", b"\xff", b"\xc3", b'"', b"'", b"NaN",
           b"nan", b"Inf", b"-Infinity", b"-5", b"0", b"18446744073709551616", b"9" * 40,
           b"1e309", b"\n", b",", b"{", b"[", b"]", b"}", b"\x1f\x8b\x08", b"x^", b" NCCL ",
           b"=", b"#", b"\t"]
"""What the mutations insert (the bytes that broke readers in the torture test)."""

BUDGET_BYTES = 1024**3
"""What the whole suite may add to the process's peak memory (the issue's bound)."""

HOOK_CSV_SEED = (HEADER + "\n" + "\n".join(
    f"{i},{1_700_000_000_000_000_000 + i * 1000},5000,host-a,100,0,0,0xc0,2,{i},AllReduce,256,"
    "7,0x1,0x1,-1" for i in range(20)) + "\n").encode()


def samples() -> dict[str, list[bytes]]:
    """Sample beginnings by the format they sniff as (the hook CSV has no shared sample)."""
    found: dict[str, list[bytes]] = {"hook-csv": [HOOK_CSV_SEED]}
    for path in sorted(FORMATS.glob("*")) if FORMATS.is_dir() else []:
        source = Source(str(path), path.stat().st_size, lambda path=path: path.open("rb"))
        try:
            reader = registry.sniff(source)
        except TracekitError:
            continue
        found.setdefault(reader.format, []).append(path.read_bytes()[:SEED_BYTES])
    return found


SAMPLES = samples()
ANY_SAMPLE = [seed for seeds in SAMPLES.values() for seed in seeds]

NOT_LINE_ACCOUNTED = {
    "flight-recorder": "counts entries, and also writes one comms row per process group",
    "nccl-profiler": "one JSON document of events, not lines",
    "nccl-inspector": "a JSON line with event traces also writes one row per kernel",
    "nccl-inspector-prom": "several metric lines make one bucket row",
    "megatron-log": "timer blocks span lines; iterations are derived from the step rows",
    "dcgmi-dmon": "one line holds several fields, each a row",
}
"""Formats whose rows are not one per line (with why); for them only the quarantine's line
numbers are checked. Every other format must satisfy rows - derived + skipped + quarantined ==
lines (derived: rows not read from a line of their own, such as clock-event flags)."""


@st.composite
def mutated(draw, seeds: list[bytes]) -> bytes:
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(0, 6))):
        at = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(["insert", "delete", "duplicate", "cut", "line-ends"]))
        if kind == "insert":
            data[at:at] = draw(st.sampled_from(HOSTILE))
        elif kind == "delete":
            del data[at:at + draw(st.integers(1, 40))]
        elif kind == "duplicate":
            start = data.rfind(b"\n", 0, at) + 1
            end = data.find(b"\n", at)
            line = bytes(data[start:end + 1 if end >= 0 else len(data)])
            data[start:start] = line
        elif kind == "cut":
            del data[at:]
        else:
            data = bytearray(data.replace(b"\n", draw(st.sampled_from([b"\r", b"\r\n"]))))
    return bytes(data)


def check(format: str, data: bytes) -> None:
    """Read ``data`` as ``format``: a tracekit error, or chunks whose counts add up."""
    reader = registry.reader_for_format(format)
    source = Source.from_bytes(f"fuzz.{format}", data)
    try:
        result = read_all(reader, source)
    except TracekitError as error:
        assert "\n" not in str(error)
        return
    assert result.skipped >= 0
    # a line of the file, or a record of one counted in ``lines`` (JSON samples)
    last = max(result.lines, data.count(b"\n") + 1)
    assert result.quarantine["line_no"].is_between(0, last).all()
    if format not in NOT_LINE_ACCOUNTED and data.strip():
        assert (result.rows() - result.derived + result.skipped + result.quarantine.height
                == result.lines)


@pytest.fixture(scope="module")
def memory_budget():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    yield
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    assert grown < BUDGET_BYTES


@pytest.mark.parametrize("format", registry.formats())
def test_reader_survives_mutated_samples(format, memory_budget):
    if not ANY_SAMPLE:
        pytest.skip(f"format samples not found at {FORMATS}")
    seeds = SAMPLES.get(format, ANY_SAMPLE)

    @settings(max_examples=100, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(data=mutated(seeds))
    def read(data: bytes) -> None:
        check(format, data)

    read()

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

SEED_BYTES = 5000
"""How much of each sample a mutation starts from: a few dozen lines, every kind of line, and
the JSON samples whole (4.6 KB at most), so they parse before they are mutated."""

OPTIONS = {"ts": "1700000000", "start": "2026-01-01T00:00:00Z", "interval": "1000"}
"""The options a user passes to the samples that carry no time of their own (Prometheus text,
ipmitool and ethtool snapshots, dcgmi dmon); the other readers ignore them."""

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

MLPERF_SEED = "".join(
    f':::MLLOG {{"namespace": "", "time_ms": {1000 + 2500 * i}, "event_type": "POINT_IN_TIME", '
    f'"key": "tracked_stats", "value": {{"train_step_timing": 2.5}}, "metadata": '
    f'{{"step": {8 * i}}}}}\n' for i in range(20)).encode()

STEP_TABLE_SEED = ("worker,step,duration_s\n" + "".join(
    f"{w},{s},{1.5 + 0.01 * s}\n" for w in range(2) for s in range(10))).encode()

DLLOGGER_SEED = "".join(
    f'DLLL {{"timestamp": "{1700000000 + 2.5 * i}", "datetime": "2023-11-14 22:13:20", '
    f'"elapsedtime": "{2.5 * i}", "type": "LOG", "step": {i}, "data": {{"reduced_train_loss": '
    f'3.2, "train_step_timing in s": 2.5}}}}\n' for i in range(20)).encode()

SEEDS = {"hook-csv": ("rank0.csv", HOOK_CSV_SEED), "mlperf-log": ("mlperf.log", MLPERF_SEED),
         "step-table": ("steps.csv", STEP_TABLE_SEED),
         "dllogger": ("dllogger.json", DLLOGGER_SEED)}
"""Seeds of the text formats without a shared sample, written as their tests write them."""

NO_SEED = {
    "labeled-job": "a job.json that is recognised, not ingested",
    "synth-manifest": "a synth.json that is recognised, not ingested",
    "whatif-result": "analyser output that is recognised, not ingested",
    "labels": "a Parquet table tracekit wrote itself",
    "truth": "a Parquet table tracekit wrote itself",
    "whatif-trace": "a Parquet op trace",
    "labels-json": "the ground truth of a labeled dump (tests/ingest/test_sources.py)",
    "truth-csv": "the ground truth of a labeled dump (tests/ingest/test_sources.py)",
    "whatif-meta": "job metadata YAML (tests/ingest/test_whatif.py)",
    "nsys-sqlite": "an SQLite database, not text (tests/ingest/test_nsys_sqlite.py)",
}
"""Formats fuzzed only with the other formats' samples (why): they hold no dump from a
collector, and their own tests read their files."""


def samples() -> dict[str, list[tuple[str, bytes]]]:
    """Sample beginnings (file name, bytes) by the format they sniff as; the name is kept, as
    some readers take the metric or the time from it."""
    found = {format: [seed] for format, seed in SEEDS.items()}
    for path in sorted(FORMATS.glob("*")) if FORMATS.is_dir() else []:
        source = Source(str(path), path.stat().st_size, lambda path=path: path.open("rb"))
        try:
            reader = registry.sniff(source)
        except TracekitError:
            continue
        found.setdefault(reader.format, []).append((path.name, path.read_bytes()[:SEED_BYTES]))
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
    "acmetrace": "one line holds a cell per server, each a row",
}
"""Formats whose rows are not one per line (with why); for them only the quarantine's line
numbers are checked. Every other format must satisfy rows - derived + skipped + quarantined ==
lines (derived: rows not read from a line of their own, such as clock-event flags)."""


@st.composite
def mutated(draw, seeds: list[tuple[str, bytes]]) -> tuple[str, bytes]:
    name, seed = draw(st.sampled_from(seeds))
    data = bytearray(seed)
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
    return name, bytes(data)


def check(format: str, name: str, data: bytes) -> None:
    """Read ``data`` as ``format``: a tracekit error, or chunks whose counts add up."""
    reader = registry.reader_for_format(format)
    source = Source.from_bytes(f"fuzz/{name}", data)
    try:
        result = read_all(reader, source, dict(OPTIONS))
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
    @given(sample=mutated(seeds))
    def read(sample: tuple[str, bytes]) -> None:
        check(format, *sample)

    read()


def test_every_format_is_fuzzed_from_a_seed_it_reads():
    """Each format of ``tracekit formats`` has seeds of its own (or says in NO_SEED why not), and
    each seed, unmutated, reads rows: a seed the reader refuses whole (a missing option, a JSON
    document cut short) would leave its parser unfuzzed."""
    if not ANY_SAMPLE:
        pytest.skip(f"format samples not found at {FORMATS}")
    assert sorted([*SAMPLES, *NO_SEED]) == sorted(registry.formats())
    for format, seeds in SAMPLES.items():
        for name, data in seeds:
            source = Source.from_bytes(f"fuzz/{name}", data)
            result = read_all(registry.reader_for_format(format), source, dict(OPTIONS))
            assert result.rows() > 0, (format, name)

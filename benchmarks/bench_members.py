"""Many small members: is an ingest's cost per member constant?

Builds dumps of N one-call hook CSV logs (64 ranks, every third log with one quarantined line),
as a tar archive and as a folder, for N in ``TRACEKIT_BENCH_MEMBERS`` (default
10,000, 20,000, 40,000; ``100000`` measures that once), and ingests each into a new dataset in
this process, after a warm-up dump of 500 members (so imports and kernel loads count in no
size), then again (every member unchanged: the manifest's records skip it). It prints the wall
and CPU milliseconds per member of both and the ratio of the per-member CPU to the smallest
N's: a constant cost per member keeps the ratio near 1; above
:data:`PER_MEMBER_BOUND` a step grows with the dump. It also prints the peak resident memory
of the first ingest (Linux), which grows by what is kept per member.
``TRACEKIT_BENCH_MEMBERS_LAYOUTS`` picks ``archive``, ``folder`` or both (default). Minutes
long, so it runs only when named (``python -m benchmarks members``).
"""

from __future__ import annotations

import io
import os
import re
import shutil
import tarfile
import tempfile
import time
from pathlib import Path

RUN_BY_DEFAULT = False
SIZES = [int(n) for n in os.environ.get("TRACEKIT_BENCH_MEMBERS", "10000,20000,40000").split(",")]
LAYOUTS = os.environ.get("TRACEKIT_BENCH_MEMBERS_LAYOUTS", "archive,folder").split(",")
PER_MEMBER_BOUND = 1.1
"""Largest per-member cost ratio of a linear ingest: the 2.2x doubling bound of issue 26 per
member (2.2 / 2)."""
T0 = 1_700_000_000_000_000_000


def _members(count: int) -> list[tuple[str, bytes]]:
    from tracekit.ingest.hook_csv import HEADER

    return [(f"dump/rank{i}.csv", (f"{HEADER}\n0,{T0 + i},5000,host-a,100,{i % 64},0,0xc0,2,0,"
                                   "AllReduce,256,7,0x1,0x1,-1\n" + "7,x\n" * (i % 3 == 0)
                                   ).encode()) for i in range(count)]


def _dump(root: Path, layout: str, count: int) -> Path:
    """The dump of ``count`` members under ``root``, as ``layout``."""
    if layout == "folder":
        for name, data in _members(count):
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(data)
        return root / "dump"
    with tarfile.open(root / "dump.tar", "w") as tar:
        for name, data in _members(count):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return root / "dump.tar"


def _ingest_ms(layout: str, count: int) -> tuple[list[tuple[float, float]], float]:
    """Wall and CPU milliseconds per member of ingesting ``count`` members into a new dataset,
    and of ingesting them again (every member unchanged, skipped by its manifest record); and
    the peak resident MiB of the first."""
    from tracekit.ingest.pipeline import ingest

    with tempfile.TemporaryDirectory(prefix="tracekit-bench-members-") as scratch:
        dump = _dump(Path(scratch), layout, count)
        runs, peak = [], 0.0
        _reset_peak_rss()
        for status in ("ingested", "unchanged"):
            wall, cpu = time.perf_counter(), time.process_time()
            summary = ingest([dump], Path(scratch) / "ds")
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            peak = peak or _peak_rss_mib()
            assert [s.status for s in summary.sources] == [status] * count
            runs.append((1000 * wall / count, 1000 * cpu / count))
        shutil.rmtree(Path(scratch) / "ds")
    return runs, peak


def _reset_peak_rss() -> None:
    """Start this process' peak resident memory over from what it holds now (Linux), so each
    ingest's peak is its own, not the largest dump's before it."""
    Path("/proc/self/clear_refs").write_text("5")


def _peak_rss_mib() -> float:
    """This process' peak resident memory since :func:`_reset_peak_rss`, in MiB."""
    return int(re.search(r"VmHWM:\s+(\d+) kB", Path("/proc/self/status").read_text())[1]) / 1024


def main() -> None:
    for layout in LAYOUTS:
        _ingest_ms(layout, 500)  # warm-up
        base = None
        for count in SIZES:
            runs, peak = _ingest_ms(layout, count)
            base = base or [cpu_ms for _, cpu_ms in runs]
            line = [f"{layout:>7} {count:>7,} members:"]
            for (wall_ms, cpu_ms), first, what in zip(runs, base, ("new", "again"), strict=True):
                ratio = cpu_ms / first
                flag = "" if ratio <= PER_MEMBER_BOUND else f" > {PER_MEMBER_BOUND}: grows"
                line.append(f"{what} {wall_ms:6.2f} ms wall, {cpu_ms:6.2f} ms CPU per member "
                            f"(x{ratio:.2f}{flag});")
            print(" ".join(line) + f" peak {peak:.0f} MiB", flush=True)
        print(f"(ratios: per-member CPU over {SIZES[0]:,} members')", flush=True)


if __name__ == "__main__":
    main()

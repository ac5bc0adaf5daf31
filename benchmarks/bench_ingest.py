"""Ingest speed of the NCCL debug log and hook CSV readers, end to end (file to Parquet).

Generates a log of ``TRACEKIT_BENCH_MB`` megabytes (default 1024, as ``make bench`` runs it)
and prints MB/s with baselines measured in the same run on the same bytes: ``polars.read_csv``
of the file as one string column (the floor any parser pays to see every line) and plain
Python loops over the lines: for the NCCL log ``re_loop`` only matches each line against the
COLL pattern (a floor: it extracts nothing) and ``re_parse`` is what a straightforward parser
does (match, convert the numbers, append to columns); for the hook CSV the ``csv`` module.
``reader`` is the format reader alone (no Parquet, no dataset), which separates parsing from
the pipeline's writing. ``hook-csv-per-rank`` is the same hook CSV as a folder of one file per
rank (16), the layout the shim writes, beside ``polars_csv_floor`` streaming the same folder.
Each measurement runs in a fresh process
so its peak RSS is its own; ``TRACEKIT_BENCH_REPEAT`` (default 1) keeps the best of several
runs. On a shared machine wall time depends on the load, so CPU seconds (user + system, all
threads) are printed too: ``MB/CPU-s`` is the speed an idle core would give, and ``cores busy``
(CPU seconds per wall second) how much of the machine the run kept working.
"""

from __future__ import annotations

import compileall
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tracekit

SIZE_MB = int(os.environ.get("TRACEKIT_BENCH_MB", "1024"))
REPEAT = int(os.environ.get("TRACEKIT_BENCH_REPEAT", "1"))
SEED = 7

COLL_RE = (r"(\S+):(\d+):(\d+) \[(\d+)\] NCCL INFO (\w+): opCount ([0-9a-f]+) sendbuff (\S+) "
           r"recvbuff (\S+) count (\d+) datatype (\d+) op (\d+) root (\d+) comm (\S+) "
           r"\[nranks=(\d+)\] stream (\S+)")


def write_nccl_log(path: Path, size_bytes: int) -> None:
    """A 2.27-style log of 16 ranks under ``srun -l``: Init lines, then interleaved COLL
    lines with a sprinkle of other subsystems' lines."""
    rng = random.Random(SEED)
    ranks = range(16)
    head = []
    for rank in ranks:
        host, pid = f"gpu-b{rank // 8:02d}", 40000 + rank
        head.append(f"{rank}: {host}:{pid}:{pid + 170} [0] NCCL INFO ncclCommInitRankConfig comm "
                    f"0x55{rank:02x}1d0c7a40 rank {rank} nranks 16 cudaDev 0 nvmlDev {rank % 8} "
                    f"busId {0x18 + rank % 8:x}000 commId 0xa3b91e07c45d2f68 - Init COMPLETE\n")
    ops = [("AllReduce", 16777216, 9), ("ReduceScatter", 41943040, 7),
           ("AllGather", 10485760, 9), ("Send", 8388608, 9), ("Recv", 8388608, 9)]
    block = []
    for i in range(20000):
        rank = i % 16
        host, pid = f"gpu-b{rank // 8:02d}", 40000 + rank
        name, count, dtype = ops[rng.randrange(len(ops))]
        if i % 50 == 0:
            block.append(f"{rank}: {host}:{pid}:{pid + 300} [0] NCCL INFO Channel 00/0 : "
                         f"{rank}[0] -> {(rank + 1) % 16}[0] via P2P/IPC\n")
        block.append(f"{rank}: {host}:{pid}:{pid} [0] NCCL INFO {name}: opCount {i // 16:x} "
                     f"sendbuff 0x7f11b4{i % 4096:06x} recvbuff 0x7f11b6{i % 4096:06x} count "
                     f"{count} datatype {dtype} op 0 root {(rank + 1) % 16} comm "
                     f"0x55{rank:02x}1d0c7a40 [nranks=16] stream 0x562f1c2e9d60\n")
    body = "".join(block).encode()
    with path.open("wb") as out:
        out.write("".join(head).encode())
        written = 0
        while written < size_bytes:
            out.write(body)
            written += len(body)


def hook_rows(ranks: range) -> bytes:
    """20,000 hook CSV rows, the calls of ``ranks`` taking turns."""
    rows = []
    for i in range(20000):
        rank = ranks[i % len(ranks)]
        t_call_ns = 1760434267000000000 + i * 250000
        rows.append(f"{i},{t_call_ns},{180000 + i % 977},gpu-b{rank // 8:02d},{40000 + rank},"
                    f"{rank},0,0x55{rank:02x}1d0c7a40,16,{i // len(ranks)},AllReduce,"
                    f"16777216,9,0x7f11b4000000,0x7f11b4000000,-1\n")
    return "".join(rows).encode()


def write_hook_csv(path: Path, size_bytes: int) -> None:
    """16 ranks interleaved in one file."""
    write_hook_file(path, size_bytes, hook_rows(range(16)))


def write_rank_files(path: Path, size_bytes: int) -> None:
    """The same calls as one hook CSV file per rank, the layout the LD_PRELOAD shim writes."""
    path.mkdir()
    for rank in range(16):
        write_hook_file(path / f"rank{rank:02d}.csv", size_bytes // 16, hook_rows(range(rank,
                                                                                  rank + 1)))


def write_hook_file(path: Path, size_bytes: int, body: bytes) -> None:
    from tracekit.ingest.hook_csv import HEADER

    with path.open("wb") as out:
        out.write((HEADER + "\n").encode())
        written = 0
        while written < size_bytes:
            out.write(body)
            written += len(body)


FLOOR_FIELDS = ("prefix", "envelope", "dev", "nccl", "info", "op_name", "opCount", "op_count",
                "k1", "sendbuff", "k2", "recvbuff", "k3", "count", "k4", "datatype", "k5", "op",
                "k6", "root", "k7", "comm", "nranks", "k8", "stream")
"""``polars_floor``: the space-separated fields of a COLL line under ``srun -l``, read by polars'
CSV reader. It keeps only COLL lines and converts their numbers, with none of the reader's
semantics (no Init-line rank map, call numbering, quarantine, hashing or manifest): the speed
a streaming polars pipeline reaches on these bytes, which the issue measured at 410-428 MB/s
without the launcher prefix. ``polars_csv_floor`` is the same for the hook CSV: its typed
columns streamed to Parquet, with no validation, quarantine or rank split."""

CHILD = {
    "tracekit": (
        "from tracekit.ingest.pipeline import ingest\n"
        "s = ingest([Path(sys.argv[2])], Path(sys.argv[3]), job='bench')\n"
        "assert not s.failed, s.failed[0].error\n"
    ),
    "reader": (
        "from tracekit.ingest import registry\n"
        "from tracekit.ingest.base import Source\n"
        "p = Path(sys.argv[2])\n"
        "source = Source(str(p), p.stat().st_size, lambda: p.open('rb'))\n"
        "for chunk in registry.sniff(source).read(source, {}): pass\n"
    ),
    "read_csv": (
        "import polars as pl\n"
        "pl.read_csv(sys.argv[2], has_header=False, separator='\\x1f', quote_char=None,\n"
        "            new_columns=['line'], schema_overrides={'line': pl.String}).height\n"
    ),
    "polars_floor": (
        "import polars as pl\n"
        f"fields = {FLOOR_FIELDS!r}\n"
        "lines = pl.scan_csv(sys.argv[2], has_header=False, separator=' ', quote_char=None,\n"
        "                    new_columns=list(fields), truncate_ragged_lines=True,\n"
        "                    schema_overrides={name: pl.String for name in fields})\n"
        "envelope = pl.col('envelope').str.split_exact(':', 2)\n"
        "lines.filter(pl.col('opCount') == 'opCount').select(\n"
        "    pl.col('prefix').str.strip_suffix(':').cast(pl.Int32).alias('rank'),\n"
        "    envelope.struct[0].alias('host'), envelope.struct[1].cast(pl.Int64).alias('pid'),\n"
        "    pl.col('op_name').str.strip_suffix(':'),\n"
        "    pl.col('op_count').str.to_integer(base=16),\n"
        "    *(pl.col(n).cast(pl.Int64) for n in ('count', 'datatype', 'op', 'root')),\n"
        "    pl.col('comm'),\n"
        "    pl.col('nranks').str.extract(r'(\\d+)').cast(pl.Int32),\n"
        ").sink_parquet(sys.argv[3] + '.parquet', compression='zstd', compression_level=1)\n"
    ),
    "polars_csv_floor": (
        "import polars as pl\n"
        "from tracekit.ingest.hook_csv import CSV_SCHEMA\n"
        "files = sys.argv[2] + '/*' if Path(sys.argv[2]).is_dir() else sys.argv[2]\n"
        "pl.scan_csv(files, schema=CSV_SCHEMA, quote_char=None).drop(\n"
        "    'sendbuff', 'recvbuff').sink_parquet(sys.argv[3] + '.parquet', compression='zstd',\n"
        "                                        compression_level=1)\n"
    ),
    "re_loop": (
        f"import re\nfind = re.compile({COLL_RE!r}).search\n"
        "rows = 0\n"
        "with open(sys.argv[2], encoding='utf-8', errors='replace') as f:\n"
        "    for line in f:\n"
        "        if find(line): rows += 1\n"
    ),
    "re_parse": (
        f"import re\nfind = re.compile({COLL_RE!r}).search\n"
        "columns = [[] for _ in range(15)]\n"
        "numeric = {1, 2, 3, 8, 9, 10, 11, 13}\n"
        "with open(sys.argv[2], encoding='utf-8', errors='replace') as f:\n"
        "    for line in f:\n"
        "        m = find(line)\n"
        "        if m:\n"
        "            for i, value in enumerate(m.groups()):\n"
        "                columns[i].append(int(value) if i in numeric\n"
        "                                  else int(value, 16) if i == 5 else value)\n"
    ),
    "csv_loop": (
        "import csv\n"
        "rows = 0\n"
        "with open(sys.argv[2], encoding='utf-8', errors='replace', newline='') as f:\n"
        "    for row in csv.reader(f):\n"
        "        if len(row) == 16 and row[0].isdigit(): rows += int(row[1]) > 0\n"
    ),
}


def measure(kind: str, path: Path, work: Path) -> tuple[float, float, float, list[float]]:
    """Wall seconds, CPU seconds (user + system, all threads) and peak RSS (MiB, the child's
    own ``VmHWM``: ``ru_maxrss`` keeps the parent's across exec) of one measurement in a fresh
    interpreter, the run with the best wall time of :data:`REPEAT`, and the CPU seconds of
    every run, sorted (on a shared machine their spread is the figure to quote)."""
    code = ("import sys, time, resource\nfrom pathlib import Path\nt = time.perf_counter()\n"
            + CHILD[kind] + "u = resource.getrusage(resource.RUSAGE_SELF)\n"
            "hwm = next(l for l in open('/proc/self/status') if l.startswith('VmHWM'))\n"
            "print(time.perf_counter() - t, u.ru_utime + u.ru_stime, int(hwm.split()[1]) / 1024)\n")
    runs = []
    for _ in range(REPEAT):
        output = subprocess.run([sys.executable, "-c", code, kind, str(path),
                                 str(work / f"ds-{kind}-{time.monotonic_ns()}")],
                                check=True, capture_output=True, text=True).stdout.split()
        runs.append(tuple(float(value) for value in output))
    return (*min(runs), sorted(cpu for _, cpu, _ in runs))


def cpu_range(mb: float, cpus: list[float]) -> str:
    """MB per CPU-second of the slowest, median and fastest run."""
    return " / ".join(f"{mb / cpu:,.0f}" for cpu in (cpus[-1], cpus[len(cpus) // 2], cpus[0]))


def run(name: str, writer, baselines: tuple[str, ...], work: Path) -> None:
    path = work / f"{name}.log"
    writer(path, SIZE_MB * 1024 * 1024)
    files = list(path.iterdir()) if path.is_dir() else [path]
    mb = sum(file.stat().st_size for file in files) / 1e6
    print(f"{name}: {mb:,.0f} MB" + (f" in {len(files)} files" if path.is_dir() else ""))
    seconds, cpu, peak, cpus = measure("tracekit", path, work)
    print(f"  tracekit end to end: {seconds:.2f} s = {mb / seconds:,.0f} MB/s "
          f"({mb / cpu:,.0f} MB/CPU-s, {cpu / seconds:.2f} cores busy), peak RSS {peak:,.0f} MiB; "
          f"MB/CPU-s min / median / max of {len(cpus)}: {cpu_range(mb, cpus)}")
    for baseline in baselines:
        base_s, base_cpu, base_peak, base_cpus = measure(baseline, path, work)
        print(f"  {baseline}: {mb / base_s:,.0f} MB/s ({mb / base_cpu:,.0f} MB/CPU-s, "
              f"{cpu_range(mb, base_cpus)}; {base_cpu / base_s:.2f} cores busy), peak RSS "
              f"{base_peak:,.0f} MiB -> tracekit end to end is {base_s / seconds:.2f}x its "
              f"speed ({base_cpu / cpu:.2f}x per CPU-s)")
    shutil.rmtree(path) if path.is_dir() else path.unlink()


def main() -> None:
    # Each child imports tracekit as an installed package does, from compiled bytecode: under
    # PYTHONDONTWRITEBYTECODE with no cached bytecode every child compiled the package's
    # sources again, 0.04 CPU-s more per process than an installed tracekit pays.
    compileall.compile_dir(Path(tracekit.__file__).parent, quiet=1)
    with tempfile.TemporaryDirectory(prefix="tracekit-bench-") as folder:
        work = Path(folder)
        run("nccl-debug", write_nccl_log,
            ("reader", "polars_floor", "read_csv", "re_loop", "re_parse"), work)
        run("hook-csv", write_hook_csv, ("reader", "polars_csv_floor", "read_csv", "csv_loop"),
            work)
        run("hook-csv-per-rank", write_rank_files, ("polars_csv_floor",), work)


if __name__ == "__main__":
    main()

"""The C kernels (``tracekit/core/compiled.py``): CPU seconds to build both into an empty
cache, from a process's start to its first call of each (beside a process that only imports
numpy and polars, which every ingest and detection pays anyway), of scanning one 16 MiB block
of the bench NCCL log and of the bench hook CSV, and BOCD points per CPU-second in C against
the numpy recursion. Each in fresh processes, three rounds: min / median / max."""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROUNDS = 3
BLOCK_BYTES = 16 * 2**20
"""One block of the NCCL reader (``LINE_BATCH_BYTES``)."""

PROBES = {
    "build": """
import resource, shutil, sys, tempfile
from pathlib import Path
from tracekit.core import compiled
from tracekit.detect import bocd_kernel
from tracekit.ingest import hook_csv_scan, nccl_coll_scan
def cpu():
    return sum(getattr(resource.getrusage(who), field) for field in ("ru_utime", "ru_stime")
               for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
with tempfile.TemporaryDirectory() as folder:
    sources = [Path(shutil.copy(Path(m.__file__).with_suffix(".c"), folder))
               for m in (nccl_coll_scan, hook_csv_scan, bocd_kernel)]
    before = cpu()
    assert all(compiled.load(source) is not None for source in sources)
    print(cpu() - before)
""",
    "floor": """
import time
import numpy, polars
print(time.process_time())
""",
    "scan_start": """
import time
import numpy as np
from tracekit.ingest import nccl_coll_scan
nccl_coll_scan.compiled()(np.frombuffer(b"x\\n", dtype=np.uint8))
print(time.process_time())
""",
    "bocd_start": """
import time
import numpy as np
from tracekit.detect.bocd_kernel import compiled
from tracekit.detect.bocd import Bocd
assert compiled() is not None
Bocd().detect(np.linspace(1.0, 1.1, 40))
print(time.process_time())
""",
    "scan": """
import sys, time
import numpy as np
from tracekit.ingest import nccl_coll_scan
kernel = nccl_coll_scan.compiled()
data = np.fromfile(sys.argv[1], dtype=np.uint8)
started = time.process_time()
kernel(data)
first = time.process_time() - started
warm = []
for _ in range(3):
    started = time.process_time()
    kernel(data)
    warm.append(time.process_time() - started)
print(first, min(warm))
""",
    "hook_scan": """
import sys, time
from pathlib import Path
from tracekit.ingest import hook_csv_scan
data = Path(sys.argv[1]).read_bytes()
started = time.process_time()
assert hook_csv_scan.scan(data) is not None
first = time.process_time() - started
warm = []
for _ in range(3):
    started = time.process_time()
    hook_csv_scan.scan(data)
    warm.append(time.process_time() - started)
print(first, min(warm))
""",
    "bocd": """
import time
import numpy as np
from tracekit.detect import bocd
def series(points, seed=0):
    rng = np.random.default_rng(seed)
    values = 1.5 * (1.0 + 0.01 * rng.standard_normal(points))
    values[points // 2:] *= 1.2
    return values
def rate(points, run):
    started = time.process_time()
    run()
    return points / (time.process_time() - started)
detector = bocd.Bocd()
job = np.vstack([series(4000, seed) for seed in range(256)])
long = series(10**6)
rates = [rate(long.size, lambda: detector.detect(long)),
         rate(job.size, lambda: detector.detect_many(job))]
online = series(20_000, 3)
def feed():
    streamed = bocd.Bocd()
    for x in online.tolist():
        streamed.update(x)
rates.append(rate(online.size, feed))
bocd.compiled = lambda: None  # the numpy recursion
rates.append(rate(online.size, lambda: detector.detect(online)))
print(*rates)
""",
}


def _probe(name: str, *arguments: str) -> list[float]:
    output = subprocess.run([sys.executable, "-c", PROBES[name], *arguments], check=True,
                            capture_output=True, text=True, cwd=Path(__file__).parents[1])
    return [float(value) for value in output.stdout.split()]


def _spread(values: list[float], scale: float = 1.0, digits: int = 3) -> str:
    values = sorted(value * scale for value in values)
    return " / ".join(f"{value:,.{digits}f}" for value in
                      (values[0], statistics.median(values), values[-1]))


def main() -> None:
    from benchmarks.bench_ingest import write_hook_csv, write_nccl_log

    with tempfile.TemporaryDirectory() as folder:
        blocks = {}
        for probe, writer in (("scan", write_nccl_log), ("hook_scan", write_hook_csv)):
            log, blocks[probe] = Path(folder) / f"{probe}.log", Path(folder) / f"{probe}.block"
            writer(log, BLOCK_BYTES + 2**20)
            text = log.read_bytes()
            start = text.index(b"\n") + 1 if probe == "hook_scan" else 0  # the header line
            blocks[probe].write_bytes(text[start: text.rindex(b"\n", 0, BLOCK_BYTES) + 1])
        megabytes = {probe: block.stat().st_size / 1e6 for probe, block in blocks.items()}
        rounds = [{name: _probe(name, *([str(blocks[name])] if name in blocks else []))
                   for name in PROBES} for _ in range(ROUNDS)]

    def column(name: str, index: int = 0) -> list[float]:
        return [measured[name][index] for measured in rounds]

    print(f"kernels (min / median / max of {ROUNDS} fresh processes, CPU-s)")
    print(f"  build the three into an empty cache, compiler included: {_spread(column('build'))} s")
    floor = column("floor")
    print(f"  start to importing numpy and polars:     {_spread(floor)} s")
    for name, what in (("scan_start", "the first NCCL scan call"),
                       ("bocd_start", "the first BOCD detection")):
        print(f"  start to {what}: {_spread(column(name))} s")
    for probe, log in (("scan", "NCCL log"), ("hook_scan", "hook CSV")):
        for index, what in ((0, "first in its process"), (1, "warm")):
            seconds = column(probe, index)
            print(f"  scan one 16 MiB block of the {log}, {what}: {_spread(seconds)} s "
                  f"({_spread([megabytes[probe] / s for s in seconds], digits=0)} MB per CPU-s)")
    for index, what in ((0, "one series of 10^6 points"), (1, "256 ranks x 4,000 together"),
                        (2, "20,000 points one by one (online)")):
        print(f"  bocd {what}: {_spread(column('bocd', index), 1e-3, 0)} k points/s")
    c_over_numpy = [measured["bocd"][0] / measured["bocd"][3] for measured in rounds]
    print(f"  bocd numpy recursion, one series of 20,000: {_spread(column('bocd', 3), 1e-3, 0)}"
          f" k points/s (C on 10^6: x{_spread(c_over_numpy, digits=0)})")

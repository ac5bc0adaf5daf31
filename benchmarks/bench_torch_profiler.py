"""Reading a Kineto trace: tracekit's streaming reader (tables built, every event accounted
for) against ``json.load`` of the same file (the events parsed, nothing built), CPU time in one
process. The trace is a real one repeated, shifted in time, to ~50 MB: the A100 trace of HTA's
tests when ``../shared`` is beside the checkout, else the gloo fixture."""

from __future__ import annotations

import gzip
import json
import tempfile
import time
from pathlib import Path

from tracekit.ingest.base import Source
from tracekit.ingest.torch_profiler import read_trace

REPO = Path(__file__).resolve().parents[1]
REAL = REPO.parent / "shared" / "real" / "hta-kineto" / "rank0_of_16.json.gz"
FIXTURE = REPO / "tests" / "data" / "torch_profiler" / "compute" / "rank1.pt.trace.json.gz"
TARGET_BYTES = 50 * 1024**2
SHIFT_US = 10_000_000
"""Each copy of the events is this much later, so steps and correlations stay distinct."""


def _write_trace(path: Path) -> None:
    trace = json.loads(gzip.decompress((REAL if REAL.exists() else FIXTURE).read_bytes()))
    events = trace.pop("traceEvents")
    copies = max(1, TARGET_BYTES // len(json.dumps(events)))
    with path.open("w") as out:
        out.write(json.dumps(trace)[:-1] + ', "traceEvents": [\n')
        for copy in range(copies):
            for index, event in enumerate(events):
                if isinstance(event.get("ts"), int | float):
                    event = event | {"ts": event["ts"] + copy * SHIFT_US}
                args = event.get("args")
                if isinstance(args, dict) and isinstance(args.get("correlation"), int):
                    event["args"] = args | {"correlation": args["correlation"] + copy * 10**9}
                name = event.get("name", "")
                if name.startswith("ProfilerStep#"):
                    event["name"] = f"ProfilerStep#{int(name[13:]) + copy * 1000}"
                out.write(("" if copy == index == 0 else ",\n") + json.dumps(event))
        out.write("\n]}\n")


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rank0.json"
        _write_trace(path)
        size = path.stat().st_size
        start = time.process_time()
        with path.open() as stream:
            events = len(json.load(stream)["traceEvents"])
        baseline = time.process_time() - start
        source = Source(str(path), size, lambda: path.open("rb"))
        start = time.process_time()
        read = read_trace(source)
        ours = time.process_time() - start
    assert read.events == events
    megabytes = size / 1e6
    print(f"torch-profiler: {megabytes:.0f} MB, {events:,} events: json.load "
          f"{megabytes / baseline:.1f} MB/s, tracekit {megabytes / ours:.1f} MB/s "
          f"({baseline / ours:.2f}x json.load's speed)")


if __name__ == "__main__":
    main()

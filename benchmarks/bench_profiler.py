"""Reading PyTorch profiler traces: tracekit against Holistic Trace Analysis, same traces,
same process.

For each real Kineto trace of ``../shared/real/hta-kineto`` (``TRACEKIT_HTA_KINETO`` points
elsewhere) it times tracekit's ``torch-profiler`` reader alone (every event parsed into
canonical frames), tracekit's whole ingest (reader, Parquet parts, manifest), the time split
on the ingested tables, and HTA's ``TraceAnalysis`` load (its parser and per-rank frames:
what every HTA analysis starts from), and prints HTA's load over tracekit's ingest. Wall time
on a shared machine moves with its load: ``TRACEKIT_BENCH_REPEAT`` (default 1) keeps the best
of several runs. Without HTA installed (the ``hta`` extra) only tracekit's times are printed.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
import warnings
from pathlib import Path

from tracekit.attribute.time_split import span_split
from tracekit.core.dataset import open_dataset
from tracekit.ingest.base import Source
from tracekit.ingest.pipeline import ingest
from tracekit.ingest.registry import reader_for_format

REPEAT = int(os.environ.get("TRACEKIT_BENCH_REPEAT", "1"))
TRACES = os.environ.get("TRACEKIT_HTA_KINETO", str(
    Path(__file__).resolve().parents[2] / "shared" / "real" / "hta-kineto"))
NAMES = ("nccl_data_rank0_of_2.json.gz", "rank0_of_16.json.gz", "sampled_rank-0.json.gz")


def _best(function, *args) -> float:
    times = []
    for _ in range(REPEAT):
        start = time.perf_counter()
        function(*args)
        times.append(time.perf_counter() - start)
    return min(times)


def _read(path: Path) -> None:
    reader = reader_for_format("torch-profiler")
    source = Source(str(path), path.stat().st_size, lambda: path.open("rb"))
    for _ in reader.read(source, {}):
        pass


def _ingest(folder: Path, output: Path) -> None:
    shutil.rmtree(output, ignore_errors=True)
    ingest([folder], output, job="bench")


def _split(output: Path) -> None:
    dataset = open_dataset(output)
    span_split(dataset.table("op_traces").collect(), dataset.table("collectives").collect())


def _hta_load(folder: Path) -> None:
    from hta.trace_analysis import TraceAnalysis

    TraceAnalysis(trace_dir=str(folder), include_last_profiler_step=True)


def main() -> None:
    root = Path(TRACES)
    if not root.is_dir():
        print(f"skipped: no Kineto traces at {root} (set TRACEKIT_HTA_KINETO)")
        return
    try:
        import hta  # noqa: F401
    except ImportError:
        hta_installed = False
        print("HTA is not installed (pip install -e '.[hta]'): tracekit's times only")
    else:
        hta_installed = True
        logging.getLogger("hta").setLevel(logging.ERROR)
        warnings.filterwarnings("ignore", module="hta")
    for name in NAMES:
        with tempfile.TemporaryDirectory() as scratch:
            folder = Path(scratch) / "trace"
            folder.mkdir()
            shutil.copy(root / name, folder / name)
            output = Path(scratch) / "ds"
            read_s = _best(_read, folder / name)
            ingest_s = _best(_ingest, folder, output)
            split_s = _best(_split, output)
            line = (f"{name} ({(root / name).stat().st_size / 1e6:.1f} MB gz): tracekit reader "
                    f"{read_s:.2f} s, ingest {ingest_s:.2f} s, time split {split_s:.2f} s")
            if hta_installed:
                hta_s = _best(_hta_load, folder)
                line += (f"; HTA TraceAnalysis load {hta_s:.2f} s: HTA / tracekit ingest "
                         f"x{hta_s / ingest_s:.1f}, / reader x{hta_s / read_s:.1f}")
            print(line, flush=True)


if __name__ == "__main__":
    main()

"""Congestion culprits found per dump layout, on fresh seeds.

Each layout of :data:`tracekit.synth.writers.dump_layout.DUMP_LAYOUTS` (and ``flat`` with hosts
named ``node-01``, a collector word and a number) gets ``TRACEKIT_BENCH_LAYOUT_JOBS`` (default
4) jobs of the ``congestion-4host`` preset (8 ranks on 4 hosts, 300 iterations, one congested
link each), drawn from a seed new at every run (``TRACEKIT_BENCH_LAYOUT_SEED`` repeats one).
Every job is analysed as ``tracekit eval`` does; the line per layout is the verdict
detector's culprits right over the labeled fail-slows, against ``per-host`` (the layout whose
markers carry the host, so names play no part) as the baseline.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

RUN_BY_DEFAULT = False
"""About 10 s of analysis per job: 36 jobs take minutes."""

VARIANTS = ("per-host", "flat", "flat:node-", "per-exporter", "per-day", "sysfs-names",
            "site-names", "prometheus-job")
"""Layouts measured, ``LAYOUT[:HOST_PREFIX]``."""


def culprits(layout: str, prefix: str, jobs: int, seed: int, root: Path) -> tuple[int, int]:
    """Right culprits and labeled fail-slows of ``jobs`` congestion jobs laid out as
    ``layout``."""
    import polars as pl

    from tracekit.detect.verdict import VERDICT_DETECTOR
    from tracekit.evaluate.scoring import episode_matches, load_corpus
    from tracekit.pipeline.corpus import analyze_corpus
    from tracekit.synth.corpus import generate_corpus

    generate_corpus(root / "corpus", "congestion-4host", jobs, seed, dump_layout=layout,
                    host_prefix=prefix)
    corpus = load_corpus(analyze_corpus(root / "corpus", root / "work"))
    matches = episode_matches(corpus.labels, corpus.episodes, [VERDICT_DETECTOR]).filter(
        pl.col("detector") == VERDICT_DETECTOR)
    return int(matches["target_correct"].fill_null(False).sum()), matches.height


def main() -> None:
    jobs = int(os.environ.get("TRACEKIT_BENCH_LAYOUT_JOBS", "4"))
    seed = int(os.environ.get("TRACEKIT_BENCH_LAYOUT_SEED", time.time_ns() % 2**31))
    print(f"{jobs} congestion jobs per layout, seed {seed}")
    baseline = None
    for variant in VARIANTS:
        layout, _, prefix = variant.partition(":")
        started = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            right, labeled = culprits(layout, prefix or "gpu", jobs, seed, Path(tmp))
        share = right / labeled if labeled else None
        baseline = share if baseline is None else baseline
        ratio = f"{share / baseline:.2f}x per-host" if share is not None and baseline else "-"
        print(f"{variant:>16}: culprit {right}/{labeled} ({ratio}) in "
              f"{time.perf_counter() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()

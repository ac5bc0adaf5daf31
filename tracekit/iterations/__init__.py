"""Per-rank iteration times reconstructed from collective calls (framework-agnostic).

Front door for notebooks and the CLI: :func:`reconstruct` works on a ``collectives`` frame,
:func:`reconstruct_dataset` reads a dataset and writes its ``iterations`` rows with
``source = "acf"`` (other sources' rows are kept), :func:`compare_dataset` measures them
against another source (the framework's own log). ``docs/iterations.md`` explains the method.
"""

from __future__ import annotations

import polars as pl

from tracekit.core.dataset import Dataset
from tracekit.core.errors import InputError
from tracekit.core.parallel import Executor, LocalExecutor, rank_scans, record_build
from tracekit.iterations.compare import Comparison, RankComparison, compare
from tracekit.iterations.period import ACF_THRESHOLD, Period, find_period, match_acf
from tracekit.iterations.reconstruct import (
    QUALITY_DISTURBED,
    QUALITY_OK,
    QUALITY_RESYNC,
    SOURCE,
    RankSummary,
    Reconstruction,
    reconstruct,
)

__all__ = [
    "ACF_THRESHOLD", "QUALITY_DISTURBED", "QUALITY_OK", "QUALITY_RESYNC", "SOURCE", "Comparison",
    "Period", "RankComparison", "RankSummary", "Reconstruction", "compare", "compare_dataset",
    "find_period", "match_acf", "reconstruct", "reconstruct_dataset",
]

PART = "acf"
"""Name of the ``iterations`` part holding reconstructed rows; other sources own other parts."""


def reconstruct_dataset(dataset: Dataset, threshold: float = ACF_THRESHOLD,
                        executor: Executor | None = None) -> Reconstruction:
    """Reconstruct every rank's iterations from the dataset's ``collectives`` and write them as
    the ``acf`` part of ``iterations``, replacing earlier reconstructions only. ``executor``
    runs batches of ranks (default: a local loop); the manifest records which ran them."""
    if not dataset.has_table("collectives"):
        raise InputError("no collectives table: ingest per-rank collective logs first (hook CSV, "
                         "NCCL_DEBUG=INFO COLL lines, Inspector)", str(dataset.path))
    executor = executor or LocalExecutor()
    ranks = dataset.ranks("collectives")
    result = reconstruct(rank_scans(dataset, "collectives", ranks), threshold, executor, ranks)
    with dataset.updating():
        dataset.write_part("iterations", result.iterations, PART)
        record_build(dataset, "iterations", executor, ranks=len(result.ranks))
    return result


def compare_dataset(dataset: Dataset, reference: str = "framework",
                    missing_ok: bool = False) -> Comparison | None:
    """Error of the dataset's ``acf`` iterations against those of source ``reference``; None
    when the dataset has no rows of that source and ``missing_ok`` (the framework log is
    optional), else an error naming the sources present."""
    iterations = dataset.table("iterations").collect()
    mine = iterations.filter(pl.col("source") == SOURCE)
    theirs = iterations.filter(pl.col("source") == reference)
    if mine.height == 0:
        raise InputError("no reconstructed iterations: run `tracekit iterations DATASET` first",
                         str(dataset.path))
    if theirs.height == 0:
        if missing_ok:
            return None
        known = ", ".join(sorted(set(iterations["source"].drop_nulls().to_list()))) or "none"
        raise InputError(f"no iterations with source {reference!r} (sources present: {known}); "
                         "ingest the framework log (Megatron, MLPerf) first", str(dataset.path))
    return compare(mine, theirs, reference)

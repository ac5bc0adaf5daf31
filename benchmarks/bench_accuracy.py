"""Accuracy on fresh seeds: a corpus drawn anew each run (:mod:`benchmarks.accuracy_corpus`:
2-8 hosts, dump layouts of many sites and partial monitoring, single, compound, back-to-back,
two-cause, near-threshold, short and on/off episodes, decoys and benign slowdowns), analysed
end to end, scored against its labels.

Prints, for the verdict detector: jobs right and FPR (overall and per dump layout), found /
culprit / cause per labeled cause (full and partial monitoring apart), and the reliability of
the confidence: per confidence bin and per kind of verdict, the share right, with the Brier
score. A verdict is an episode that names a culprit or a cause; it is right when what it
claims (culprit and cause; the culprit alone for ``insufficient-evidence``) is right for
every fail-slow it overlaps (one that overlaps none is wrong).

``python -m benchmarks accuracy [--jobs N] [--seed S] [--workers W] [--keep=DIR]
[--dumps=A,B] [--scenarios=X,Y]``: N jobs (default 55: about 15 CPU-s each, most of it
ingesting the scrape files), seed S (default: a fresh one, printed so a run can be repeated),
W processes (default 2), the jobs and their datasets kept under DIR to look at, only the dump
layouts and scenarios named (default: all of
:data:`~benchmarks.accuracy_corpus.DUMP_LAYOUTS` and
:data:`~benchmarks.accuracy_corpus.SCENARIOS`). The CI gate stays
``tracekit eval datasets/corpus``.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
from pathlib import Path

import polars as pl

from benchmarks.accuracy_corpus import (
    DUMP_LAYOUTS,
    PARTIAL_MONITORING,
    SCENARIOS,
    DrawnJob,
    draw_jobs,
    write_job,
)
from benchmarks.accuracy_margins import print_margins

DEFAULT_JOBS = 55
BINS = (0.0, 0.3, 0.5, 0.7, 0.9, 1.0001)
"""Confidence bins of the reliability table, ``[low, high)``."""


def _option(name: str, default: int | None) -> int | None:
    args = sys.argv[1:]
    if name in args and args.index(name) + 1 < len(args):
        return int(args[args.index(name) + 1])
    return default


def _listed(name: str, default: tuple[str, ...]) -> tuple[str, ...]:
    value = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith(f"{name}=")), None)
    return default if value is None else tuple(v for v in value.split(",") if v)


def _analyse(task: tuple[DrawnJob, str]) -> tuple[str, list[str]]:
    """Write one job and analyse it into ``work/<job>/dataset``; the dataset's path and the
    errors of the sources it could not read (a reader that fails on a layout loses its
    monitoring, and every verdict that needed it, without another trace)."""
    from tracekit.pipeline.analyze import analyze

    job, work = task
    root = Path(work) / job.name
    folder = write_job(job, root)
    target = root / "dataset"
    result = analyze([folder], target, job=job.name, write_job_report=False)
    return str(target), result.failed_sources


def verdicts(evaluation, episodes: pl.DataFrame, detector: str) -> pl.DataFrame:
    """One row per episode of ``detector`` that names a culprit or a cause: job, episode,
    cause, confidence, its :func:`verdict_class` and whether it is right. An
    ``insufficient-evidence`` verdict claims only its culprit, so it is right when that is;
    any other when its culprit and cause are."""
    from tracekit.attribute.verdict import INSUFFICIENT

    if "inferred" not in episodes.columns:
        episodes = episodes.with_columns(inferred=pl.lit(False))
    named = episodes.filter(pl.col("detector") == detector, pl.col("confidence") > 0,
                            ~pl.col("cause").fill_null("").is_in(["", "unknown"]))
    judged = (evaluation.matches.filter(pl.col("detector") == detector,
                                        pl.col("detected_episode").is_not_null())
              .group_by("job", pl.col("detected_episode").alias("episode"))
              .agg(pl.col("target_correct").fill_null(False).all().alias("culprit"),
                   (pl.col("target_correct").fill_null(False)
                    & pl.col("cause_correct").fill_null(False)).all().alias("both")))
    return (named.select("job", "episode", "kind", "cause", "confidence", "inferred")
            .join(judged, on=["job", "episode"], how="left")
            .with_columns(right=pl.when(pl.col("cause") == INSUFFICIENT)
                          .then(pl.col("culprit")).otherwise(pl.col("both")).fill_null(False),
                          **{"class": verdict_class()})
            .drop("culprit", "both"))


def verdict_class() -> pl.Expr:
    """The kind of evidence a verdict rests on, each with its own confidence
    (:mod:`tracekit.attribute.verdict`): told apart by cause, ``inferred`` and value."""
    from tracekit.attribute import verdict as v

    return (pl.when(pl.col("kind") == "compound").then(pl.lit("compound"))
            .when((pl.col("cause") == v.INSUFFICIENT)
                  & (pl.col("confidence") == v.CONFIDENCE_ARRIVAL)).then(pl.lit("arrival only"))
            .when(pl.col("cause") == v.INSUFFICIENT).then(pl.lit("timing only"))
            .when(pl.col("inferred")).then(pl.lit("inferred"))
            .when(pl.col("confidence") == v.CONFIDENCE_UNCHECKED).then(pl.lit("part unchecked"))
            .when(pl.col("confidence") == v.CONFIDENCE_TIMING_AND_SIGNAL)
            .then(pl.lit("timing and signal"))
            .when(pl.col("confidence") == v.CONFIDENCE_SIGNAL).then(pl.lit("signal"))
            .otherwise(pl.lit("other")))


def reliability(judged: pl.DataFrame, by: str = "bin"
                ) -> tuple[pl.DataFrame, float | None]:
    """Verdicts per confidence bin (or per ``by``: ``class``), their mean confidence and share
    right; the Brier score."""
    if judged.is_empty():
        return pl.DataFrame(), None
    labels = [f"[{lo:.1f}, {min(hi, 1.0):.1f}{']' if hi > 1 else ')'}"
              for lo, hi in zip(BINS, BINS[1:], strict=False)]
    binned = judged.with_columns(pl.col("confidence").cut(list(BINS[1:-1]), labels=labels,
                                                          left_closed=True).alias("bin"))
    table = (binned.group_by(by).agg(verdicts=pl.len(),
                                     confidence=pl.col("confidence").mean(),
                                     right=pl.col("right").mean())
             .sort(by))
    brier = judged.select(((pl.col("confidence") - pl.col("right").cast(pl.Float64)) ** 2)
                          .mean()).item()
    return table, brier


def _share(right: int, total: int) -> str:
    return f"{right}/{total}" + (f" ({100 * right / total:.1f} %)" if total else "")


def main() -> None:
    from tracekit.detect.verdict import VERDICT_DETECTOR
    from tracekit.evaluate.scoring import load_corpus, score_corpus

    count = _option("--jobs", DEFAULT_JOBS)
    seed = _option("--seed", None)
    seed = int.from_bytes(os.urandom(4), "little") if seed is None else seed
    workers = _option("--workers", 2)
    jobs = draw_jobs(count, seed, _listed("--dumps", tuple(DUMP_LAYOUTS)),
                     _listed("--scenarios", SCENARIOS))
    started = time.perf_counter()
    keep = next(iter(_listed("--keep", ())), None)
    with (tempfile.TemporaryDirectory(prefix="tracekit-accuracy-") if keep is None
          else nullcontext(keep)) as work:
        with ProcessPoolExecutor(workers) as pool:
            analysed = list(pool.map(_analyse, [(job, work) for job in jobs]))
        datasets = [path for path, _ in analysed]
        failed = [error for _, errors in analysed for error in errors]
        corpus = load_corpus([Path(p) for p in datasets])
        # the verdict detector counted even where it stayed silent on every job
        evaluation = score_corpus(corpus, Path(work), include_detectors=[VERDICT_DETECTOR])
        elapsed = time.perf_counter() - started
        _print(count, seed, elapsed, workers, jobs, corpus, evaluation)
        if failed:
            print(f"{len(failed)} sources could not be read, first: {failed[0]}")
        print_margins([Path(p) for p in datasets], jobs)


def _print(count, seed, elapsed, workers, jobs, corpus, evaluation) -> None:
    from tracekit.detect.verdict import VERDICT_DETECTOR

    print(f"{count} fresh jobs (seed {seed}), {elapsed:.0f} s with {workers} processes; "
          f"verdict detector {VERDICT_DETECTOR}")
    outcomes = evaluation.outcomes.filter(pl.col("detector") == VERDICT_DETECTOR).join(
        pl.DataFrame({"job": [j.name for j in jobs], "dump": [j.layout for j in jobs],
                      "scenario": [j.scenario for j in jobs]}), on="job")
    by_dump = (outcomes.group_by("dump").agg(
        jobs=pl.len(), right=pl.col("outcome").is_in(["tp", "tn"]).sum(),
        fp=(pl.col("outcome") == "fp").sum(), negatives=(~pl.col("positive")).sum())
        .sort("dump"))
    everything = by_dump.sum()
    print(f"jobs right {_share(everything['right'][0], everything['jobs'][0])}, "
          f"FPR {everything['fp'][0]}/{everything['negatives'][0]}")
    for row in by_dump.iter_rows(named=True):
        print(f"  {row['dump']:<24} jobs right {_share(row['right'], row['jobs'])}, "
              f"FPR {row['fp']}/{row['negatives']}")
    wrong = outcomes.filter(pl.col("outcome").is_in(["fp", "fn"]))
    if wrong.height:
        print("  wrong jobs: " + ", ".join(f"{r['job']} {r['scenario']} ({r['outcome']})"
                                           for r in wrong.iter_rows(named=True)))
    partial = {j.name for j in jobs if j.layout in PARTIAL_MONITORING}
    for kind, names in (("full monitoring", {j.name for j in jobs} - partial),
                        ("partial monitoring", partial)):
        if names:
            _print_causes(kind, corpus, names)
    missed = evaluation.matches.filter(
        pl.col("detector") == VERDICT_DETECTOR,
        ~(pl.col("target_correct").fill_null(False) & pl.col("cause_correct").fill_null(False)))
    for row in missed.join(corpus.episodes.filter(pl.col("detector") == VERDICT_DETECTOR)
                           .select("job", pl.col("episode").alias("detected_episode"),
                                   "evidence"), on=["job", "detected_episode"], how="left"
                           ).iter_rows(named=True):
        print(f"  wrong: {row['job']} {row['cause']} {row['target']} -> "
              f"{row['detected_cause']} {row['detected_target']}: "
              f"{(row['evidence'] or '')[:160]}")
    judged = verdicts(evaluation, corpus.episodes, VERDICT_DETECTOR)
    table, brier = reliability(judged)
    print(f"reliability of {judged.height} verdicts (Brier {brier:.3f})" if brier is not None
          else "no verdicts")
    for row in table.iter_rows(named=True):
        print(f"  confidence {row['bin']:<11} {row['verdicts']:>5} verdicts, mean "
              f"{row['confidence']:.2f}, right {row['right']:.2f}")
    for row in reliability(judged, by="class")[0].iter_rows(named=True):
        print(f"  {row['class']:<22} {row['verdicts']:>5} verdicts, mean "
              f"{row['confidence']:.2f}, right {row['right']:.2f}")


def _print_causes(kind: str, corpus, names: set[str]) -> None:
    """Found / culprit / cause per labeled cause over the jobs ``names``: partial monitoring
    apart, since a cause its exporters do not show cannot be named."""
    from tracekit.detect.verdict import VERDICT_DETECTOR
    from tracekit.evaluate.scoring import evaluate

    mine = pl.col("job").is_in(sorted(names))
    causes = evaluate(corpus.jobs.filter(mine), corpus.labels.filter(mine),
                      corpus.episodes.filter(mine)).cause_table.filter(
        pl.col("detector") == VERDICT_DETECTOR)
    print(f"{'labeled cause, ' + kind:<34} {'found':>14} {'culprit':>14} {'cause':>14}")
    for row in causes.iter_rows(named=True):
        print(f"{row['cause']:<34} {row['recall_text']:>14} {row['culprit_text']:>14} "
              f"{row['cause_right_text']:>14}")


RUN_BY_DEFAULT = True

if __name__ == "__main__":
    main()

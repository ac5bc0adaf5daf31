"""CI accuracy gate: the committed corpus, evaluated end to end, is no worse than the committed
baseline beyond the tolerance the baseline states; and the gate is tight enough to catch a
detector that misses one fail-slow, detects late, or loses its attribution.

The corpus is analysed once per module (raw dumps -> ingest, iterations, detect, attribute);
every weakened variant below re-scores those tables or re-runs detection only.

Changing the corpus or the detectors on purpose: re-measure with
``tracekit eval datasets/corpus --update-baseline datasets/baselines/accuracy.json`` and commit
the file with the change.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest

from tracekit.evaluate.scoring import (
    Corpus,
    Evaluation,
    corpus_changed,
    evaluate,
    load_corpus,
    read_baseline,
    regressions,
)
from tracekit.pipeline.corpus import evaluate_corpus

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "datasets" / "corpus"
BASELINE = REPO / "datasets" / "baselines" / "accuracy.json"
UPDATE = f"tracekit eval {CORPUS.relative_to(REPO)} --update-baseline " \
         f"{BASELINE.relative_to(REPO)}"

LATE_ITERATIONS = 10
"""How late the 'late detector' variant reports: well past the 1-iteration tolerance even for
a detection that fired a few iterations before the labeled onset."""


@pytest.fixture(scope="module")
def baseline() -> dict:
    return read_baseline(BASELINE)


@pytest.fixture(scope="module")
def measured(baseline, tmp_path_factory) -> tuple[Corpus, Evaluation]:
    work = tmp_path_factory.mktemp("corpus-work")
    return evaluate_corpus(CORPUS, work, include_detectors=list(baseline["metrics"]["job"]))


def _rescore(corpus: Corpus, episodes: pl.DataFrame, detectors: list[str]) -> dict:
    return evaluate(corpus.jobs, corpus.labels, episodes, detectors).metrics()


def _detecting(baseline: dict) -> list[str]:
    """Baseline detectors that found at least one labeled fail-slow."""
    return [name for name, categories in baseline["metrics"]["episode"].items()
            if categories["all"]["detected_labels"] > 0]


def test_baseline_was_measured_on_this_corpus(baseline):
    assert corpus_changed(baseline, CORPUS) is None, (
        f"datasets/corpus changed since the baseline was measured; run `{UPDATE}`")


def test_no_metric_worse_than_the_baseline(measured, baseline):
    worse = regressions(measured[1].metrics(), baseline)
    assert not worse, ("accuracy regressed against the committed baseline:\n"
                       + "\n".join(f"  {r}" for r in worse)
                       + f"\nif this is intended, re-measure with `{UPDATE}`")


def test_baseline_holds_exact_counts(measured, baseline):
    """The rates in the file are the counts in the file (what review diffs show)."""
    jobs = measured[0].jobs.height
    for categories in baseline["metrics"]["job"].values():
        assert categories["all"]["jobs"] == jobs
        for row in categories.values():
            assert row["tp"] + row["fp"] + row["tn"] + row["fn"] == row["jobs"]
            assert row["accuracy"] == round(100 * (row["tp"] + row["tn"]) / row["jobs"], 3)
    for categories in baseline["metrics"]["episode"].values():
        for row in categories.values():
            assert row["recall"] == round(100 * row["detected_labels"] / row["labels"], 3)


def test_a_detector_missing_one_fail_slow_fails_the_gate(measured, baseline):
    corpus, evaluation = measured
    detectors = list(baseline["metrics"]["job"])
    for detector in _detecting(baseline):
        job = evaluation.matches.filter((pl.col("detector") == detector)
                                        & pl.col("detected"))["job"][0]
        silent_there = corpus.episodes.filter(~((pl.col("detector") == detector)
                                                & (pl.col("job") == job)))
        found = {(r.where, r.metric) for r in regressions(
            _rescore(corpus, silent_there, detectors), baseline)}
        assert (f"episode {detector}/all", "recall") in found, detector
        assert (f"job {detector}/all", "fnr") in found, detector
        assert all(f" {detector}/" in where for where, _ in found), found


def test_a_late_detector_fails_the_gate(measured, baseline):
    corpus, _ = measured
    detectors = list(baseline["metrics"]["job"])
    for detector in _detecting(baseline):
        late = corpus.episodes.with_columns(pl.when(pl.col("detector") == detector).then(
            pl.col("start_iteration") + LATE_ITERATIONS).otherwise(pl.col("start_iteration")))
        found = {(r.where, r.metric) for r in regressions(
            _rescore(corpus, late, detectors), baseline)}
        assert (f"episode {detector}/all", "delay_iterations_median") in found, detector


def test_lost_attribution_fails_the_gate(measured, baseline):
    corpus, _ = measured
    attributed = [name for name, c in baseline["metrics"]["episode"].items()
                  if c["all"]["localisation"] is not None]
    assert attributed, "the committed baseline has no attributed detector"
    unattributed = corpus.episodes.with_columns(cause=pl.lit(None, pl.String),
                                                target=pl.lit(None, pl.String))
    found = {(r.where, r.metric) for r in regressions(
        _rescore(corpus, unattributed, list(baseline["metrics"]["job"])), baseline)}
    for detector in attributed:
        assert (f"episode {detector}/all", "localisation") in found
        assert (f"episode {detector}/all", "cause_accuracy") in found


def test_a_detector_weakened_in_the_pipeline_fails_the_gate(measured, baseline, tmp_path):
    """Re-run real detection on the analysed jobs, requiring a 10x slowdown before an
    episode counts (a detector that no longer sees the injected fail-slows)."""
    from tracekit.detect import detect_dataset

    corpus, _ = measured
    detectors = list(baseline["metrics"]["job"])
    copies = []
    for dataset in corpus.jobs["dataset"]:
        copy = tmp_path / Path(dataset).name
        shutil.copytree(dataset, copy)
        detect_dataset(copy, detectors, min_slowdown=9.0)
        copies.append(copy)
    weakened = load_corpus(copies)
    found = {(r.where, r.metric) for r in regressions(
        _rescore(weakened, weakened.episodes, detectors), baseline)}
    for detector in _detecting(baseline):
        assert (f"job {detector}/all", "fnr") in found
        assert (f"episode {detector}/all", "recall") in found

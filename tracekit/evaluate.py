"""Labels versus detections: the accuracy numbers a detector is judged by.

Two levels, as DESIGN.md defines them after the Greyhound paper (Tables 3 and 4):

* job level: a job is positive when its labels hold at least one fail-slow episode; a detector
  flags a job when it reports at least one episode. Accuracy, FPR = FP / negatives and
  FNR = FN / positives, each shown with its fraction (``99.1 (106/107)``), per job category and
  per detector;
* episode level: a detected episode matches a labeled fail-slow when their intervals overlap.
  Precision, recall, detection delay from the labeled onset (seconds and iterations), and, when
  attribution filled them, localisation (culprit) and cause accuracy.

Every function takes the canonical ``labels`` and ``episodes`` tables plus a ``jobs`` frame
(``job``, ``category``) that lists every job of the corpus, negatives included, so a detector
that stays silent on a job is still counted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.errors import InputError

ALL = "all"
"""Category name of the row that pools every job."""

OPEN_END_NS = 2**63 - 1
"""End used for an episode still open at the end of its trace (``t_end_ns`` null)."""

HIGHER_IS_BETTER = ("accuracy", "precision", "recall", "localisation", "cause_accuracy")
LOWER_IS_BETTER = ("fpr", "fnr", "delay_iterations_median", "delay_s_median")

DEFAULT_TOLERANCE = {"rate_pct": 2.0, "delay_iterations": 1.0, "delay_s": 5.0}
"""How much worse than the baseline a metric may get before the regression check fails:
percentage points for rates, absolute for median delays. The committed corpus is generated from
a seed, so counts are exact; the slack only absorbs floating-point differences across
platforms, never a lost detection (one job of the committed corpus is several points)."""


@dataclass(frozen=True)
class Fraction:
    """A rate with the counts behind it, printed the way the paper prints it."""

    numerator: int
    denominator: int

    @property
    def percent(self) -> float | None:
        return None if self.denominator == 0 else 100.0 * self.numerator / self.denominator

    def __str__(self) -> str:
        if self.denominator == 0:
            return "n/a (0/0)"
        return f"{self.percent:.1f} ({self.numerator}/{self.denominator})"


def _fail_slow_labels(labels: pl.DataFrame) -> pl.DataFrame:
    """Labels of real fail-slows (benign disturbances are negatives)."""
    return labels.filter(pl.col("fail_slow").fill_null(True))


def _detectors(episodes: pl.DataFrame, detectors: list[str] | None) -> list[str]:
    return sorted(episodes["detector"].drop_nulls().unique().to_list()) if detectors is None \
        else list(detectors)


def _detector_frame(episodes: pl.DataFrame, detectors: list[str] | None) -> pl.DataFrame:
    return pl.DataFrame({"detector": _detectors(episodes, detectors)},
                        schema={"detector": pl.String})


def job_outcomes(jobs: pl.DataFrame, labels: pl.DataFrame, episodes: pl.DataFrame,
                 detectors: list[str] | None = None) -> pl.DataFrame:
    """One row per (detector, job): its category, whether it is positive, whether the detector
    flagged it, and the outcome ``tp`` / ``fp`` / ``tn`` / ``fn``."""
    positive = _fail_slow_labels(labels).select("job").unique().with_columns(positive=pl.lit(True))
    flagged = episodes.select("detector", "job").unique().with_columns(flagged=pl.lit(True))
    grid = _detector_frame(episodes, detectors).join(
        jobs.select("job", "category"), how="cross")
    return (
        grid.join(positive, on="job", how="left")
        .join(flagged, on=["detector", "job"], how="left")
        .with_columns(pl.col("positive", "flagged").fill_null(False))
        .with_columns(
            outcome=pl.when(pl.col("positive") & pl.col("flagged")).then(pl.lit("tp"))
            .when(pl.col("positive")).then(pl.lit("fn"))
            .when(pl.col("flagged")).then(pl.lit("fp"))
            .otherwise(pl.lit("tn"))
        )
        .sort("detector", "category", "job")
    )


def job_accuracy(outcomes: pl.DataFrame) -> pl.DataFrame:
    """Counts and rates per detector and category (plus the pooled category ``all``).

    Rates are percentages (null when their denominator is zero); ``*_text`` columns hold the
    paper's ``99.1 (106/107)`` form.
    """
    pooled = outcomes.with_columns(category=pl.lit(ALL))
    counts = (
        pl.concat([outcomes, pooled])
        .group_by("detector", "category")
        .agg(
            jobs=pl.len(),
            **{name: (pl.col("outcome") == name).sum() for name in ("tp", "fp", "tn", "fn")},
        )
        .with_columns(positives=pl.col("tp") + pl.col("fn"),
                      negatives=pl.col("fp") + pl.col("tn"),
                      correct=pl.col("tp") + pl.col("tn"))
    )
    rates = {"accuracy": ("correct", "jobs"), "fpr": ("fp", "negatives"),
             "fnr": ("fn", "positives")}
    counts = counts.with_columns(
        pl.when(pl.col(den) > 0).then(100.0 * pl.col(num) / pl.col(den)).alias(name)
        for name, (num, den) in rates.items()
    )
    counts = counts.with_columns(
        pl.when(pl.col(den) > 0)
        .then(pl.format("{} ({}/{})", pl.col(name).round(1).cast(pl.String), pl.col(num),
                        pl.col(den)))
        .otherwise(pl.lit("n/a (0/0)"))
        .alias(f"{name}_text")
        for name, (num, den) in rates.items()
    )
    category_order = pl.col("category") == ALL
    return counts.sort("detector", category_order, "category")


def episode_matches(labels: pl.DataFrame, episodes: pl.DataFrame,
                    detectors: list[str] | None = None) -> pl.DataFrame:
    """One row per (detector, labeled fail-slow): the earliest detected episode overlapping it
    (null when missed), the detection delay from the labeled onset, and whether the detected
    culprit and cause agree with the label (null when the episode was not attributed).

    A detection that starts at or before the labeled onset has zero delay.
    """
    truth = _fail_slow_labels(labels).select(
        "job", pl.col("episode").alias("label_episode"), "kind", "cause", "target",
        "target_rank", "target_host", "target_gpu", "target_link",
        pl.col("t_start_ns").alias("label_start_ns"),
        pl.col("t_end_ns").fill_null(OPEN_END_NS).alias("label_end_ns"),
        pl.col("start_iteration").alias("label_start_iteration"),
    )
    found = episodes.select(
        "detector", "job", pl.col("episode").alias("detected_episode"),
        pl.col("t_start_ns").alias("detected_start_ns"),
        pl.col("t_end_ns").fill_null(OPEN_END_NS).alias("detected_end_ns"),
        pl.col("start_iteration").alias("detected_start_iteration"),
        pl.col("kind").alias("detected_kind"), pl.col("cause").alias("detected_cause"),
        pl.col("target").alias("detected_target"),
    )
    grid = _detector_frame(episodes, detectors).join(truth, how="cross")
    overlapping = (
        grid.join(found, on=["detector", "job"], how="inner")
        .filter((pl.col("detected_start_ns") <= pl.col("label_end_ns"))
                & (pl.col("detected_end_ns") >= pl.col("label_start_ns")))
        .sort("detected_start_ns")
        .group_by("detector", "job", "label_episode", maintain_order=True)
        .first()
        .select("detector", "job", "label_episode", *[c for c in found.columns
                                                      if c not in ("detector", "job")])
    )
    matched = grid.join(overlapping, on=["detector", "job", "label_episode"], how="left")
    attributed_target = pl.col("detected_target").is_not_null() & (
        pl.col("detected_target") != "")
    attributed_cause = pl.col("detected_cause").is_not_null() & ~pl.col("detected_cause").is_in(
        ["", "insufficient-evidence", "unknown"])
    return matched.with_columns(
        detected=pl.col("detected_episode").is_not_null(),
        delay_s=((pl.col("detected_start_ns") - pl.col("label_start_ns")).clip(lower_bound=0)
                 / 1e9),
        delay_iterations=(pl.col("detected_start_iteration")
                          - pl.col("label_start_iteration")).clip(lower_bound=0),
        target_correct=pl.when(attributed_target).then(
            _canonical_target(pl.col("detected_target")).is_in(_label_targets())),
        cause_correct=pl.when(attributed_cause).then(
            _cause_set(pl.col("detected_cause")) == _cause_set(pl.col("cause"))),
    ).sort("detector", "job", "label_episode")


def _canonical_target(target: pl.Expr) -> pl.Expr:
    """``link:b07-b03`` and ``link:b03-b07`` name the same link: sort link endpoints."""
    endpoints = target.str.strip_prefix("link:").str.split("-").list.sort().list.join("-")
    return pl.when(target.str.starts_with("link:")).then(pl.format("link:{}", endpoints)) \
        .otherwise(target.str.strip_chars())


def _label_targets() -> pl.Expr:
    """Every spelling of a label's culprit a detector may use: its words, its rank, its GPU."""
    spellings = [
        _canonical_target(pl.col("target")),
        pl.format("rank:{}", pl.col("target_rank")),
        pl.format("gpu:{}/{}", pl.col("target_host"), pl.col("target_gpu")),
        _canonical_target(pl.format("link:{}", pl.col("target_link"))),
    ]
    return pl.concat_list(spellings).list.drop_nulls()


def _cause_set(cause: pl.Expr) -> pl.Expr:
    """Compound causes are joined by ``+`` in any order; compare them as sorted lists."""
    return cause.str.split("+").list.eval(pl.element().str.strip_chars()).list.sort()


def detection_matches(labels: pl.DataFrame, episodes: pl.DataFrame) -> pl.DataFrame:
    """One row per detected episode: ``true_positive`` when it overlaps a labeled fail-slow of
    its job (an episode overlapping only a benign disturbance is a false positive)."""
    truth = _fail_slow_labels(labels).select(
        "job", pl.col("t_start_ns").alias("label_start_ns"),
        pl.col("t_end_ns").fill_null(OPEN_END_NS).alias("label_end_ns"))
    found = episodes.select("detector", "job", "episode", "t_start_ns",
                            pl.col("t_end_ns").fill_null(OPEN_END_NS).alias("end_ns"))
    hits = (
        found.join(truth, on="job", how="inner")
        .filter((pl.col("t_start_ns") <= pl.col("label_end_ns"))
                & (pl.col("end_ns") >= pl.col("label_start_ns")))
        .select("detector", "job", "episode").unique()
        .with_columns(true_positive=pl.lit(True))
    )
    return (found.drop("end_ns").join(hits, on=["detector", "job", "episode"], how="left")
            .with_columns(pl.col("true_positive").fill_null(False))
            .sort("detector", "job", "episode"))


def episode_accuracy(labels: pl.DataFrame, episodes: pl.DataFrame,
                     detectors: list[str] | None = None) -> pl.DataFrame:
    """Per detector: precision, recall (percent, with fractions), median and worst detection
    delay, localisation and cause accuracy over the attributed matches."""
    detectors = _detectors(episodes, detectors)
    matches = episode_matches(labels, episodes, detectors)
    detections = detection_matches(labels, episodes)
    names = _detector_frame(episodes, detectors)
    recall = matches.group_by("detector").agg(
        labels=pl.len(), detected_labels=pl.col("detected").sum(),
        delay_s_median=pl.col("delay_s").median(), delay_s_max=pl.col("delay_s").max(),
        delay_iterations_median=pl.col("delay_iterations").median(),
        delay_iterations_max=pl.col("delay_iterations").max(),
        attributed_targets=pl.col("target_correct").is_not_null().sum(),
        correct_targets=pl.col("target_correct").sum(),
        attributed_causes=pl.col("cause_correct").is_not_null().sum(),
        correct_causes=pl.col("cause_correct").sum(),
    )
    precision = detections.group_by("detector").agg(
        detections=pl.len(), true_detections=pl.col("true_positive").sum())
    rates = {"precision": ("true_detections", "detections"),
             "recall": ("detected_labels", "labels"),
             "localisation": ("correct_targets", "attributed_targets"),
             "cause_accuracy": ("correct_causes", "attributed_causes")}
    counts = [c for pair in rates.values() for c in pair]
    table = (names.join(recall, on="detector", how="left")
             .join(precision, on="detector", how="left")
             .with_columns(pl.col(counts).fill_null(0).cast(pl.Int64)))
    table = table.with_columns(
        pl.when(pl.col(den) > 0).then(100.0 * pl.col(num) / pl.col(den)).alias(name)
        for name, (num, den) in rates.items()
    )
    return table.with_columns(
        pl.when(pl.col(den) > 0)
        .then(pl.format("{} ({}/{})", pl.col(name).round(1).cast(pl.String), pl.col(num),
                        pl.col(den)))
        .otherwise(pl.lit("n/a (0/0)" if name in ("precision", "recall") else "not attributed"))
        .alias(f"{name}_text")
        for name, (num, den) in rates.items()
    ).sort("detector")


@dataclass
class Evaluation:
    """Everything ``tracekit eval`` computes for one corpus."""

    jobs: pl.DataFrame
    outcomes: pl.DataFrame
    job_table: pl.DataFrame
    matches: pl.DataFrame
    episode_table: pl.DataFrame

    def metrics(self) -> dict[str, Any]:
        """The numbers the regression baseline keeps, as plain JSON-ready values."""
        job_metrics = {
            row["detector"]: {} for row in self.job_table.iter_rows(named=True)}
        for row in self.job_table.iter_rows(named=True):
            job_metrics[row["detector"]][row["category"]] = {
                key: row[key] for key in ("jobs", "tp", "fp", "tn", "fn", "accuracy", "fpr",
                                          "fnr")}
        episode_metrics = {
            row["detector"]: {key: row[key] for key in (
                "labels", "detections", "precision", "recall", "delay_s_median",
                "delay_iterations_median", "localisation", "cause_accuracy")}
            for row in self.episode_table.iter_rows(named=True)}
        return {"job": job_metrics, "episode": episode_metrics}


def evaluate(jobs: pl.DataFrame, labels: pl.DataFrame, episodes: pl.DataFrame,
             detectors: list[str] | None = None) -> Evaluation:
    """Job-level and episode-level accuracy of every detector over ``jobs``."""
    detectors = _detectors(episodes, detectors)
    outcomes = job_outcomes(jobs, labels, episodes, detectors)
    return Evaluation(
        jobs=jobs,
        outcomes=outcomes,
        job_table=job_accuracy(outcomes),
        matches=episode_matches(labels, episodes, detectors),
        episode_table=episode_accuracy(labels, episodes, detectors),
    )


# -- corpus ---------------------------------------------------------------------------------


UNKNOWN_CATEGORY = "unknown"


@dataclass
class Corpus:
    """The pooled tables of many job datasets, with one row per job in ``jobs`` (job,
    category, layout, dataset path)."""

    jobs: pl.DataFrame
    labels: pl.DataFrame
    episodes: pl.DataFrame
    iteration_errors: pl.DataFrame
    """Reconstruction error per job against its reference iterations (job, layout, reference,
    matched, median_rel_error, p99_rel_error); empty when no job has both."""


LARGE_JOB_GPUS = 512
"""Greyhound's "large jobs" use at least 512 GPUs; its compute probes run on one node and its
communication probes on four (paper-notes.md, Table 1)."""


def job_category(dataset) -> str:
    """The job's population as the paper splits them: ``large`` from 512 ranks, ``compute``
    on one host, ``communication`` across hosts. A ``category`` in the manifest wins."""
    category = dataset.manifest.get("category") or dataset.manifest.get("build", {}).get(
        "category")
    if category:
        return str(category)
    tables = dataset.manifest.get("tables", {})
    hosts = max((t.get("hosts") or 0 for t in tables.values()), default=0)
    ranks = max((t.get("ranks") or 0 for t in tables.values()), default=0)
    layout = dataset.table("parallel_layout").select("world_size").collect()["world_size"]
    ranks = max(ranks, layout.max() or 0) if layout.len() else ranks
    if ranks >= LARGE_JOB_GPUS:
        return "large"
    if hosts == 0:
        return UNKNOWN_CATEGORY
    return "compute" if hosts == 1 else "communication"


def job_layout(dataset) -> str | None:
    """``TP2xDP4xPP1`` from the dataset's parallel layout, when recorded."""
    layout = dataset.table("parallel_layout").collect()
    if layout.height == 0:
        return None
    row = layout.row(0, named=True)
    return f"TP{row['tp_size']}xDP{row['dp_size']}xPP{row['pp_size']}"


REFERENCE_SOURCES = ("truth", "framework", "megatron")
"""Iteration sources an ACF reconstruction is checked against, most trusted first."""


def _iteration_error(dataset) -> dict[str, Any] | None:
    from tracekit.iterations import SOURCE, compare

    iterations = dataset.table("iterations").collect()
    sources = set(iterations["source"].drop_nulls().to_list())
    reference = next((s for s in REFERENCE_SOURCES if s in sources), None)
    if SOURCE not in sources or reference is None:
        return None
    result = compare(iterations.filter(pl.col("source") == SOURCE),
                     iterations.filter(pl.col("source") == reference), reference)
    if result.matched == 0:
        return None
    return {"reference": reference, "matched": result.matched,
            "median_rel_error": float(result.errors["rel_error"].median()),
            "p99_rel_error": result.rel_error_quantile(0.99)}


def load_corpus(datasets: list[Path]) -> Corpus:
    """Pool the labels, episodes and reconstruction errors of ``datasets``."""
    from tracekit import schema
    from tracekit.dataset import open_dataset

    jobs, labels, episodes, errors = [], [], [], []
    for path in datasets:
        dataset = open_dataset(path)
        layout = job_layout(dataset)
        jobs.append({"job": dataset.job, "category": job_category(dataset), "layout": layout,
                     "dataset": str(path)})
        labels.append(dataset.table("labels").collect())
        episodes.append(dataset.table("episodes").collect())
        error = _iteration_error(dataset)
        if error is not None:
            errors.append({"job": dataset.job, "layout": layout, **error})
    error_schema = {"job": pl.String, "layout": pl.String, "reference": pl.String,
                    "matched": pl.Int64, "median_rel_error": pl.Float64,
                    "p99_rel_error": pl.Float64}
    return Corpus(
        jobs=pl.DataFrame(jobs, schema={"job": pl.String, "category": pl.String,
                                        "layout": pl.String, "dataset": pl.String}),
        labels=pl.concat([schema.table("labels").empty(), *labels]),
        episodes=pl.concat([schema.table("episodes").empty(), *episodes]),
        iteration_errors=pl.DataFrame(errors, schema=error_schema),
    )


def evaluate_corpus(corpus: Path, work: Path, include_detectors: list[str] | None = None,
                    progress=None) -> tuple[Corpus, Evaluation]:
    """Analyse every job of a labeled corpus (raw jobs into ``work``) and evaluate every
    detector that reported an episode, plus ``include_detectors`` (those of a baseline: a
    detector gone silent then counts as missing every fail-slow instead of vanishing).
    ``progress(job, done, total)`` after each job."""
    from tracekit.analyze import analyze_corpus

    corpus_data = load_corpus(analyze_corpus(Path(corpus), Path(work), progress))
    if corpus_data.labels.height == 0:
        raise InputError("no job of this corpus has labels; evaluation needs a labeled corpus "
                         "(`tracekit synth corpus`)", str(corpus))
    detectors = sorted(set(_detectors(corpus_data.episodes, None)) | set(include_detectors or []))
    return corpus_data, evaluate(corpus_data.jobs, corpus_data.labels, corpus_data.episodes,
                                 detectors)


# -- regression baseline -------------------------------------------------------------------


@dataclass(frozen=True)
class Regression:
    """One metric that got worse than the baseline allows."""

    where: str
    metric: str
    baseline: float | None
    current: float | None
    allowed: float

    def __str__(self) -> str:
        return (f"{self.where} {self.metric}: {self.current} vs baseline {self.baseline} "
                f"(tolerance {self.allowed})")


def _tolerance_for(metric: str, tolerance: dict[str, float]) -> float:
    if metric.startswith("delay_iterations"):
        return tolerance["delay_iterations"]
    if metric.startswith("delay_s"):
        return tolerance["delay_s"]
    return tolerance["rate_pct"]


def _compare(where: str, current: dict[str, Any], baseline: dict[str, Any],
             tolerance: dict[str, float]) -> list[Regression]:
    found = []
    for metric in (*HIGHER_IS_BETTER, *LOWER_IS_BETTER):
        if metric not in baseline:
            continue
        was, now = baseline[metric], current.get(metric)
        allowed = _tolerance_for(metric, tolerance)
        if was is None:
            continue
        worse = now is None or (now < was - allowed if metric in HIGHER_IS_BETTER
                                else now > was + allowed)
        if worse:
            found.append(Regression(where, metric, was, now, allowed))
    return found


def regressions(metrics: dict[str, Any], baseline: dict[str, Any]) -> list[Regression]:
    """Metrics worse than ``baseline`` beyond its stated tolerance (a detector or category in
    the baseline that disappeared counts as a regression of all its metrics)."""
    tolerance = {**DEFAULT_TOLERANCE, **baseline.get("tolerance", {})}
    found = []
    for detector, categories in baseline["metrics"]["job"].items():
        for category, was in categories.items():
            now = metrics["job"].get(detector, {}).get(category, {})
            found += _compare(f"{detector}/{category}", now, was, tolerance)
    for detector, was in baseline["metrics"]["episode"].items():
        found += _compare(f"{detector}/episodes", metrics["episode"].get(detector, {}), was,
                          tolerance)
    return found


def baseline_document(metrics: dict[str, Any], corpus: str) -> dict[str, Any]:
    """The JSON a baseline file holds: the corpus it was measured on, the tolerance and the
    metrics."""
    return {"corpus": corpus, "tolerance": dict(DEFAULT_TOLERANCE), "metrics": metrics}


def write_baseline(path: Path, metrics: dict[str, Any], corpus: str) -> None:
    """Write (replace) a baseline file; the only way a baseline changes."""
    from tracekit.dataset import atomic_path

    with atomic_path(Path(path)) as temporary:
        temporary.write_text(json.dumps(baseline_document(metrics, corpus), indent=2,
                                        sort_keys=True) + "\n")


def read_baseline(path: Path) -> dict[str, Any]:
    """A baseline file; a clear error when it is missing or not a baseline."""
    path = Path(path)
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError("no baseline file; create it with `tracekit eval CORPUS "
                         "--update-baseline FILE`", str(path)) from None
    except (OSError, json.JSONDecodeError) as error:
        raise InputError(f"unreadable baseline: {error}", str(path)) from None
    if not isinstance(document, dict) or "metrics" not in document:
        raise InputError("not a tracekit accuracy baseline (no 'metrics')", str(path))
    return document

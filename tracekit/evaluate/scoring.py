"""Labels versus detections: the accuracy numbers a detector is judged by.

Two levels, as DESIGN.md defines them after the Greyhound paper (Tables 3 and 4):

* job level: a job is positive when its labels hold at least one fail-slow episode; a detector
  flags a job when it reports at least one episode. Accuracy, FPR = FP / negatives and
  FNR = FN / positives, each shown with its fraction (``99.1 (106/107)``), per job category and
  per detector;
* episode level: a detected episode matches a labeled fail-slow when their intervals overlap.
  Precision, recall, detection delay from the labeled onset to the episode's dated start
  (seconds and iterations), alarm delay from the onset to the iteration at which the detector,
  run online, reported the change opening the episode (its confirmation latency shows here,
  not in the detection delay), and, when attribution filled them, localisation (culprit) and
  cause accuracy.

Every function takes the canonical ``labels`` and ``episodes`` tables plus a ``jobs`` frame
(``job``, ``category``) that lists every job of the corpus, negatives included, so a detector
that stays silent on a job is still counted.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.core.errors import InputError
from tracekit.core.identity import canonical_link_targets
from tracekit.core.thresholds import is_fail_slow

ALL = "all"
"""Category name of the row that pools every job."""

UNKNOWN_CATEGORY = "unknown"
"""Category of a job whose size the dataset does not record."""

NOT_ATTRIBUTED = "not attributed"

OPEN_END_NS = 2**63 - 1
"""End used for an episode still open at the end of its trace (``t_end_ns`` null)."""

HIGHER_IS_BETTER = ("accuracy", "precision", "recall", "localisation", "cause_accuracy")
LOWER_IS_BETTER = ("fpr", "fnr", "delay_iterations_median", "delay_s_median",
                   "alarm_delay_iterations_median", "alarm_delay_s_median")

ALARM_COLUMNS = {"alarm_iteration": pl.Int64, "alarm_ns": pl.Int64}
"""Columns :func:`load_corpus` adds to the episodes: the iteration whose arrival made the
detector, run online, report the change opening the episode, and that iteration's end."""


def with_alarm_columns(episodes: pl.DataFrame) -> pl.DataFrame:
    """``episodes`` with :data:`ALARM_COLUMNS`, null where it lacks them."""
    return episodes.with_columns(pl.lit(None, dtype).alias(name)
                                 for name, dtype in ALARM_COLUMNS.items()
                                 if name not in episodes.columns)

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
    """Labels of real fail-slows (benign disturbances are negatives); a label without the flag
    is judged by the definition, where its severity and length are known."""
    length = pl.col("end_iteration") - pl.col("start_iteration") + 1
    return labels.filter(pl.col("fail_slow").fill_null(is_fail_slow(pl.col("severity"), length))
                         .fill_null(True))


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


JOB_RATES = {"accuracy": ("correct", "jobs"), "fpr": ("fp", "negatives"),
             "fnr": ("fn", "positives")}
EPISODE_RATES = {"precision": ("true_detections", "detections"),
                 "recall": ("detected_labels", "labels"),
                 "localisation": ("correct_targets", "attributed_targets"),
                 "cause_accuracy": ("correct_causes", "attributed_causes")}
CAUSE_RATES = {"recall": ("detected_labels", "labels"),
               "culprit": ("correct_targets", "labels"),
               "cause_right": ("correct_causes", "labels")}
"""Each rate of the job, episode and per-cause tables: (numerator, denominator) columns."""


def _with_rates(table: pl.DataFrame, rates: dict[str, tuple[str, str]],
                empty: dict[str, str] | None = None) -> pl.DataFrame:
    """Add each rate ``name: (numerator, denominator)`` as a percentage (null over zero) and as
    ``name_text`` in the paper's ``99.1 (106/107)`` form (``empty[name]`` or ``n/a (0/0)``
    over zero)."""
    empty = empty or {}
    table = table.with_columns(
        pl.when(pl.col(den) > 0).then(100.0 * pl.col(num) / pl.col(den)).alias(name)
        for name, (num, den) in rates.items())
    return table.with_columns(
        pl.when(pl.col(den) > 0)
        .then(pl.format("{} ({}/{})", pl.col(name).round(1).cast(pl.String), pl.col(num),
                        pl.col(den)))
        .otherwise(pl.lit(empty.get(name, "n/a (0/0)")))
        .alias(f"{name}_text")
        for name, (num, den) in rates.items())


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
    return _with_rates(counts, JOB_RATES).sort("detector", _category_order(), "category")


def episode_matches(labels: pl.DataFrame, episodes: pl.DataFrame,
                    detectors: list[str] | None = None) -> pl.DataFrame:
    """One row per (detector, labeled fail-slow): the earliest detected episode overlapping it
    (null when missed), the detection delay from the labeled onset, and whether the detected
    culprit and cause agree with the label (null when the episode was not attributed): the
    verdict names every part of the label's culprit and cause, and nothing that no labeled
    fail-slow overlapping the same episode names; so each half of a compound fail-slow labeled
    as two episodes (congestion on a link, a thermal GPU) is right when one compound verdict
    names both.

    A detection that starts at or before the labeled onset has zero delay; so has an alarm
    raised before it. The alarm delay is null when ``episodes`` lacks :data:`ALARM_COLUMNS`.
    """
    episodes = with_alarm_columns(episodes)
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
        pl.col("target").alias("detected_target"), *ALARM_COLUMNS,
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
    matched = matched.with_columns(
        _culprit_parts(_label_target()).alias("label_culprit"),
        _cause_set(pl.col("cause")).alias("label_cause"),
    )
    # what every labeled fail-slow that the same detected episode overlaps names, pooled: a
    # compound fail-slow labeled as two episodes is named by one verdict with both parts
    pooled = (matched.filter(pl.col("detected_episode").is_not_null())
              .group_by("detector", "job", "detected_episode")
              .agg(pl.col("label_culprit").list.explode().unique().alias("overlapping_culprits"),
                   pl.col("label_cause").list.explode().unique().alias("overlapping_causes")))
    matched = matched.join(pooled, on=["detector", "job", "detected_episode"], how="left")
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
        alarm_delay_s=(pl.col("alarm_ns") - pl.col("label_start_ns")).clip(lower_bound=0) / 1e9,
        alarm_delay_iterations=(pl.col("alarm_iteration")
                                - pl.col("label_start_iteration")).clip(lower_bound=0),
        target_correct=pl.when(attributed_target).then(_names_exactly(
            _culprit_parts(pl.col("detected_target")), pl.col("label_culprit"),
            pl.col("overlapping_culprits"))),
        cause_correct=pl.when(attributed_cause).then(_names_exactly(
            _cause_set(pl.col("detected_cause")), pl.col("label_cause"),
            pl.col("overlapping_causes"))),
    ).sort("detector", "job", "label_episode")


def _names_exactly(detected: pl.Expr, label: pl.Expr, overlapping: pl.Expr) -> pl.Expr:
    """The verdict names every part of the label and nothing that no overlapping labeled
    fail-slow names (an extra healthy rank is a wrong culprit)."""
    return (label.list.set_difference(detected).list.len() == 0) & (
        detected.list.set_difference(overlapping).list.len() == 0)


def _label_target() -> pl.Expr:
    """The label's culprit; older labels fill only the ``target_*`` columns."""
    return pl.coalesce(pl.col("target"), pl.format("rank:{}", pl.col("target_rank")),
                       pl.format("gpu:{}/{}", pl.col("target_host"), pl.col("target_gpu")),
                       pl.format("link:{}", pl.col("target_link")))


def _culprit_parts(target: pl.Expr) -> pl.Expr:
    """A culprit as the sorted set of its ``+``-joined parts, in the label's terms.

    A compound culprit lists its parts in whatever order the injection (or the attribution)
    found them, so ``rank:1+link:b<->a`` equals ``link:a<->b+rank:1``. Link endpoints are
    sorted (:func:`~tracekit.core.identity.canonical_link_targets`: host names may hold ``-``,
    so a link whose hosts cannot be told apart equals only its own spelling), and the labeled
    GPU spelled ``gpu:HOST/G`` becomes its rank (``target_*`` columns of the same row), so
    either spelling of the culprit GPU is right.
    """
    parts = target.str.split("+").list.eval(canonical_link_targets(pl.element()))
    gpu = pl.format("gpu:{}/{}", pl.col("target_host"), pl.col("target_gpu"))
    rank = pl.format("rank:{}", pl.col("target_rank"))
    as_rank = parts.list.set_difference(pl.concat_list(gpu)).list.concat(pl.concat_list(rank))
    return (pl.when(rank.is_not_null() & parts.list.contains(gpu)).then(as_rank)
            .otherwise(parts).list.unique().list.sort())


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


def _by_category(frame: pl.DataFrame, jobs: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with its job's category, plus a copy of every row in the pooled ``all``."""
    categorised = frame.join(jobs.select("job", "category"), on="job", how="left").with_columns(
        pl.col("category").fill_null(UNKNOWN_CATEGORY))
    return pl.concat([categorised, categorised.with_columns(category=pl.lit(ALL))])


def _category_order() -> pl.Expr:
    return pl.col("category") == ALL


def episode_accuracy(jobs: pl.DataFrame, labels: pl.DataFrame, episodes: pl.DataFrame,
                     detectors: list[str] | None = None) -> pl.DataFrame:
    """Per detector and job category (plus ``all``): precision, recall (percent, with
    fractions), median and worst detection delay, median alarm delay, localisation and cause
    accuracy over the attributed matches."""
    detectors = _detectors(episodes, detectors)
    matches = _by_category(episode_matches(labels, episodes, detectors), jobs)
    detections = _by_category(detection_matches(labels, episodes), jobs)
    categories = pl.concat([jobs.select("category"), pl.DataFrame({"category": [ALL]})]).unique()
    names = _detector_frame(episodes, detectors).join(categories, how="cross")
    recall = matches.group_by("detector", "category").agg(
        labels=pl.len(), detected_labels=pl.col("detected").sum(),
        delay_s_median=pl.col("delay_s").median(), delay_s_max=pl.col("delay_s").max(),
        delay_iterations_median=pl.col("delay_iterations").median(),
        delay_iterations_max=pl.col("delay_iterations").max(),
        alarm_delay_s_median=pl.col("alarm_delay_s").median(),
        alarm_delay_iterations_median=pl.col("alarm_delay_iterations").median(),
        attributed_targets=pl.col("target_correct").is_not_null().sum(),
        correct_targets=pl.col("target_correct").sum(),
        attributed_causes=pl.col("cause_correct").is_not_null().sum(),
        correct_causes=pl.col("cause_correct").sum(),
    )
    precision = detections.group_by("detector", "category").agg(
        detections=pl.len(), true_detections=pl.col("true_positive").sum())
    counts = [c for pair in EPISODE_RATES.values() for c in pair]
    table = (names.join(recall, on=["detector", "category"], how="left")
             .join(precision, on=["detector", "category"], how="left")
             .with_columns(pl.col(counts).fill_null(0).cast(pl.Int64)))
    return _with_rates(table, EPISODE_RATES, {"localisation": NOT_ATTRIBUTED,
                                      "cause_accuracy": NOT_ATTRIBUTED}
                       ).sort("detector", _category_order(), "category")


JOB_METRICS = ("jobs", "tp", "fp", "tn", "fn", "accuracy", "fpr", "fnr")
EPISODE_METRICS = ("labels", "detected_labels", "detections", "true_detections",
                   "attributed_targets", "correct_targets", "attributed_causes",
                   "correct_causes", "precision", "recall", "delay_s_median",
                   "delay_iterations_median", "alarm_delay_s_median",
                   "alarm_delay_iterations_median", "localisation", "cause_accuracy")
"""What the regression baseline keeps per detector and category: the exact counts behind
every rate, so a changed number in review says which job or episode moved."""

METRIC_DIGITS = 3
"""Rates and delays are stored rounded (far below any tolerance) so the baseline diffs
cleanly."""


def _metric_tree(table: pl.DataFrame, keys: tuple[str, ...]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for row in table.iter_rows(named=True):
        tree.setdefault(row["detector"], {})[row["category"]] = {
            key: round(row[key], METRIC_DIGITS) if isinstance(row[key], float) else row[key]
            for key in keys}
    return tree


@dataclass
class Evaluation:
    """Everything ``tracekit eval`` computes for one corpus."""

    jobs: pl.DataFrame
    outcomes: pl.DataFrame
    job_table: pl.DataFrame
    matches: pl.DataFrame
    episode_table: pl.DataFrame
    cause_table: pl.DataFrame
    """Per detector and labeled cause: found, culprit and cause right (:func:`cause_accuracy`)."""

    def as_json(self) -> dict[str, list[dict[str, Any]]]:
        """The job-level, episode-level and per-cause tables as JSON-ready rows: counts and
        delays as numbers, each rate as ``{"percent", "count", "of"}`` (``percent`` null over
        zero), where the printed tables hold ``99.1 (106/107)`` text. A job-level row has its
        detections' culprit and cause accuracy too, as the printed table has."""
        attributed = {key: EPISODE_RATES[key] for key in ("localisation", "cause_accuracy")}
        job_level = self.job_table.join(
            self.episode_table.select("detector", "category",
                                      *dict.fromkeys(c for pair in attributed.values()
                                                     for c in pair),
                                      *attributed),
            on=["detector", "category"], how="left", maintain_order="left")
        return {
            "job_level": _json_rows(job_level, ("detector", "category", "jobs", "tp", "fp",
                                                "tn", "fn"), JOB_RATES | attributed),
            "episode_level": _json_rows(
                self.episode_table, ("detector", "category", "labels", "detections",
                                     "delay_s_median", "delay_s_max", "delay_iterations_median",
                                     "delay_iterations_max", "alarm_delay_s_median",
                                     "alarm_delay_iterations_median"), EPISODE_RATES),
            "by_cause": _json_rows(self.cause_table, ("detector", "cause", "labels"),
                                   CAUSE_RATES),
        }

    def metrics(self) -> dict[str, Any]:
        """The numbers the regression baseline keeps, as plain JSON-ready values:
        ``{"job"|"episode": {detector: {category: {metric: value}}}}``."""
        return {"job": _metric_tree(self.job_table, JOB_METRICS),
                "episode": _metric_tree(self.episode_table, EPISODE_METRICS)}


def _json_rows(table: pl.DataFrame, keys: tuple[str, ...],
               rates: dict[str, tuple[str, str]]) -> list[dict[str, Any]]:
    """``table``'s ``keys`` and each of its ``rates`` as ``{"percent", "count", "of"}``."""
    return [{**{key: row[key] for key in keys},
             **{name: {"percent": None if row[name] is None else round(row[name], METRIC_DIGITS),
                       "count": row[num] or 0, "of": row[den] or 0}
                for name, (num, den) in rates.items()}}
            for row in table.iter_rows(named=True)]


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
        episode_table=episode_accuracy(jobs, labels, episodes, detectors),
        cause_table=cause_accuracy(episode_matches(labels, episodes, detectors)),
    )


def cause_accuracy(matches: pl.DataFrame) -> pl.DataFrame:
    """Per detector and labeled cause (``gpu-thermal``, ``network-congestion``, ...): how many
    labeled fail-slows were found, and of those whose culprit and cause are right, as
    fractions over all the labels of that cause (a missed or unattributed one counts wrong),
    so a team checking its own incidents reads one number per cause."""
    table = matches.group_by("detector", "cause").agg(
        labels=pl.len(), detected_labels=pl.col("detected").sum(),
        correct_targets=pl.col("target_correct").fill_null(False).sum(),
        correct_causes=pl.col("cause_correct").fill_null(False).sum(),
    ).with_columns(pl.col("labels", "detected_labels", "correct_targets", "correct_causes")
                   .cast(pl.Int64))
    return _with_rates(table, CAUSE_RATES, {}).sort("detector", "cause")


# -- corpus ---------------------------------------------------------------------------------



@dataclass
class Corpus:
    """The pooled tables of many job datasets, with one row per job in ``jobs`` (job,
    category, layout, dataset path)."""

    jobs: pl.DataFrame
    labels: pl.DataFrame
    episodes: pl.DataFrame
    """Every job's episodes, with :data:`ALARM_COLUMNS`."""
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


def episode_alarms(dataset) -> pl.DataFrame:
    """The dataset's episodes with :data:`ALARM_COLUMNS`: the ``confirmed_iteration`` of the
    job-level event at each episode's start, and when that iteration ended (null for an episode
    opened by no change point, or detected before events recorded confirmations)."""
    from tracekit.detect.episodes import job_iterations

    episodes = dataset.table("episodes").collect()
    alarms = (dataset.table("events")
              .filter(pl.col("rank").is_null(), pl.col("confirmed_iteration").is_not_null())
              .select("detector", pl.col("iteration").alias("start_iteration"),
                      pl.col("confirmed_iteration").alias("alarm_iteration"))
              .collect())
    if episodes.is_empty() or alarms.is_empty():
        return with_alarm_columns(episodes)
    ends = job_iterations(dataset.table("iterations").collect()).select(
        pl.col("iteration").alias("alarm_iteration"), pl.col("t_end_ns").alias("alarm_ns"))
    return (episodes.join(alarms, on=["detector", "start_iteration"], how="left")
            .join(ends, on="alarm_iteration", how="left"))


def load_corpus(datasets: list[Path]) -> Corpus:
    """Pool the labels, episodes (with the job verdict's, :mod:`tracekit.detect.verdict`) and
    reconstruction errors of ``datasets``."""
    from tracekit.core import schema
    from tracekit.core.dataset import open_dataset
    from tracekit.detect.verdict import with_verdict

    jobs, labels, episodes, errors = [], [], [], []
    for path in datasets:
        dataset = open_dataset(path)
        layout = job_layout(dataset)
        jobs.append({"job": dataset.job, "category": job_category(dataset), "layout": layout,
                     "dataset": str(path)})
        labels.append(dataset.table("labels").collect())
        episodes.append(episode_alarms(dataset))
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
        episodes=with_verdict(pl.concat([with_alarm_columns(schema.table("episodes").empty()),
                                         *episodes])),
        iteration_errors=pl.DataFrame(errors, schema=error_schema),
    )


def score_corpus(corpus: Corpus, source: Path,
                 include_detectors: list[str] | None = None) -> Evaluation:
    """Evaluate every detector that reported an episode in ``corpus`` (loaded from ``source``),
    plus ``include_detectors`` (those of a baseline: a detector gone silent then counts as
    missing every fail-slow instead of vanishing)."""
    if corpus.labels.height == 0:
        raise InputError("no job of this corpus has labels; evaluation needs a labeled corpus "
                         "(`tracekit synth corpus`)", str(source))
    detectors = sorted(set(_detectors(corpus.episodes, None)) | set(include_detectors or []))
    return evaluate(corpus.jobs, corpus.labels, corpus.episodes, detectors)


# -- regression baseline -------------------------------------------------------------------


@dataclass(frozen=True)
class MetricChange:
    """One metric that moved beyond the baseline's tolerance (worse: a regression; better: an
    improvement the baseline should lock in)."""

    where: str
    metric: str
    baseline: float | None
    current: float | None
    allowed: float

    def __str__(self) -> str:
        def show(value: float | None) -> str:
            return "not measured" if value is None else f"{value:g}"

        return (f"{self.where} {self.metric}: {show(self.current)} vs baseline "
                f"{show(self.baseline)} (tolerance {self.allowed:g})")


def _tolerance_for(metric: str, tolerance: dict[str, float]) -> float:
    if "delay_iterations" in metric:
        return tolerance["delay_iterations"]
    if "delay_s" in metric:
        return tolerance["delay_s"]
    return tolerance["rate_pct"]


def _moved(metric: str, was: float | None, now: float | None, allowed: float,
           worse: bool) -> bool:
    """Whether ``now`` is worse (or, with ``worse`` false, better) than ``was`` beyond
    ``allowed``. A metric that lost its value (a detector gone silent, attribution gone) is
    worse; one that gained a value is better."""
    if was is None or now is None:
        return (was is not None) if worse else (now is not None)
    gain = now - was if metric in HIGHER_IS_BETTER else was - now
    return gain < -allowed if worse else gain > allowed


def _changes(metrics: dict[str, Any], baseline: dict[str, Any], worse: bool
             ) -> list[MetricChange]:
    tolerance = {**DEFAULT_TOLERANCE, **baseline.get("tolerance", {})}
    found = []
    for level in ("job", "episode"):
        for detector, categories in baseline["metrics"][level].items():
            for category, was in categories.items():
                now = metrics[level].get(detector, {}).get(category, {})
                for metric in (*HIGHER_IS_BETTER, *LOWER_IS_BETTER):
                    allowed = _tolerance_for(metric, tolerance)
                    if metric in was and _moved(metric, was[metric], now.get(metric),
                                                allowed, worse):
                        found.append(MetricChange(f"{level} {detector}/{category}", metric,
                                                  was[metric], now.get(metric), allowed))
    return found


def regressions(metrics: dict[str, Any], baseline: dict[str, Any]) -> list[MetricChange]:
    """Metrics worse than ``baseline`` beyond its stated tolerance (a detector or category in
    the baseline that disappeared counts as a regression of all its metrics)."""
    return _changes(metrics, baseline, worse=True)


def improvements(metrics: dict[str, Any], baseline: dict[str, Any]) -> list[MetricChange]:
    """Metrics better than ``baseline`` beyond its tolerance: update the baseline to keep
    them (otherwise a later regression could hide behind them)."""
    return _changes(metrics, baseline, worse=False)


UPDATE_COMMAND = "`tracekit eval CORPUS --update-baseline FILE`"

BASELINE_FORMAT = 2
"""Version of the baseline file layout (2: metrics per detector and category at both levels,
with counts, and the corpus fingerprint)."""


def corpus_fingerprint(corpus: Path) -> str:
    """SHA-256 over the corpus' files (relative names and bytes): a baseline measured on other
    data is not comparable, and the check says so instead of reporting phantom regressions."""
    corpus = Path(corpus)
    digest = hashlib.sha256()
    for path in sorted(p for p in corpus.rglob("*") if p.is_file()):
        relative = path.relative_to(corpus)
        if any(part.startswith(".") for part in relative.parts):
            continue
        digest.update(relative.as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def baseline_document(metrics: dict[str, Any], corpus: Path) -> dict[str, Any]:
    """The JSON a baseline file holds: format, the corpus it was measured on (name and
    fingerprint), the tolerance and the metrics."""
    return {"format": BASELINE_FORMAT,
            "corpus": {"name": Path(corpus).name, "sha256": corpus_fingerprint(corpus)},
            "tolerance": dict(DEFAULT_TOLERANCE), "metrics": metrics}


def write_baseline(path: Path, metrics: dict[str, Any], corpus: Path) -> None:
    """Write (replace) a baseline file; the only way a baseline changes."""
    from tracekit.core.dataset import atomic_path

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as temporary:
        temporary.write_text(json.dumps(baseline_document(metrics, corpus), indent=2,
                                        sort_keys=True) + "\n")


def read_baseline(path: Path) -> dict[str, Any]:
    """A baseline file; a clear error when it is missing, not a baseline, or of another
    format."""
    path = Path(path)
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"no baseline file; create it with {UPDATE_COMMAND}", str(path)) \
            from None
    except (OSError, json.JSONDecodeError) as error:
        raise InputError(f"unreadable baseline: {error}", str(path)) from None
    if not isinstance(document, dict) or "metrics" not in document:
        raise InputError("not a tracekit accuracy baseline (no 'metrics')", str(path))
    if document.get("format") != BASELINE_FORMAT:
        raise InputError(f"baseline format {document.get('format')} is not the current "
                         f"{BASELINE_FORMAT}; re-measure it with {UPDATE_COMMAND}", str(path))
    return document


def corpus_changed(baseline: dict[str, Any], corpus: Path) -> str | None:
    """Why ``baseline`` was not measured on ``corpus`` as it is now (None when it was)."""
    measured = baseline.get("corpus", {}).get("sha256")
    if measured == corpus_fingerprint(corpus):
        return None
    return (f"the baseline was measured on another version of the corpus "
            f"(sha256 {str(measured)[:12]}); if the corpus change is intended, re-measure with "
            f"{UPDATE_COMMAND}")

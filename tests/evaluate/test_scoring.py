"""Evaluation against hand-computed fractions on a tiny corpus of five jobs.

Jobs: c1, c2 compute (c1 positive), n1, n2, n3 communication (n1, n2 positive; n3 holds only a
benign GC pause). Detector ``a`` flags c1, n1, n3; detector ``b`` flags n2 only.
"""

from __future__ import annotations

import json

import polars as pl
import pytest

from tracekit.core import schema
from tracekit.core.errors import InputError
from tracekit.evaluate.scoring import (
    Fraction,
    MetricChange,
    corpus_changed,
    episode_matches,
    evaluate,
    improvements,
    read_baseline,
    regressions,
    write_baseline,
)

S = 1_000_000_000


def _labels() -> pl.DataFrame:
    rows = [
        # job, episode, fail_slow, kind, cause, target, rank, host, gpu, link, start, end, it0
        ("c1", 0, True, "compute", "gpu-thermal", "gpu:b07/5", 13, "b07", 5, None, 100, 200, 10),
        ("n1", 0, True, "communication", "network-congestion", "link:b03-b07", None, None, None,
         "b03-b07", 100, 300, 20),
        ("n1", 1, True, "compute", "cpu-contention+gpu-thermal", "host:b01", None, "b01", None,
         None, 500, 600, 50),
        ("n2", 0, True, "communication", "network-congestion", "link:b01-b02", None, None, None,
         "b01-b02", 50, 80, 5),
        ("n3", 0, False, "noise", "gc-pause", None, None, None, None, None, 40, 41, 4),
    ]
    names = ["job", "episode", "fail_slow", "kind", "cause", "target", "target_rank",
             "target_host", "target_gpu", "target_link", "t_start_ns", "t_end_ns",
             "start_iteration"]
    frame = pl.DataFrame(rows, schema=[(n, schema.LABELS.schema[n]) for n in names],
                         orient="row")
    return schema.conform("labels", frame.with_columns(pl.col("t_start_ns", "t_end_ns") * S))


def _episodes() -> pl.DataFrame:
    rows = [
        # detector, job, episode, start, end, it0, cause, target
        ("a", "c1", 0, 103, 190, 13, "gpu-thermal", "rank:13"),
        ("a", "n1", 0, 90, 120, 18, "network-congestion", "link:b07-b03"),
        ("a", "n1", 1, 150, None, 30, None, None),
        ("a", "n3", 0, 40, 41, 4, "gc-pause", None),
        ("b", "n2", 0, 60, 70, 8, "gpu-thermal", "link:b01-b02"),
        ("b", "n2", 1, 70, 75, 9, None, None),
    ]
    names = ["detector", "job", "episode", "t_start_ns", "t_end_ns", "start_iteration",
             "cause", "target"]
    frame = pl.DataFrame(rows, schema=[(n, schema.EPISODES.schema[n]) for n in names],
                         orient="row")
    return schema.conform("episodes", frame.with_columns(pl.col("t_start_ns", "t_end_ns") * S))


JOBS = pl.DataFrame({"job": ["c1", "c2", "n1", "n2", "n3"],
                     "category": ["compute", "compute", "communication", "communication",
                                  "communication"]})


@pytest.fixture(scope="module")
def evaluation():
    return evaluate(JOBS, _labels(), _episodes())


def test_fraction_prints_like_the_paper():
    assert str(Fraction(106, 107)) == "99.1 (106/107)"
    assert str(Fraction(0, 65)) == "0.0 (0/65)"
    assert str(Fraction(0, 0)) == "n/a (0/0)"


def test_job_outcomes(evaluation):
    outcome = {(r["detector"], r["job"]): r["outcome"]
               for r in evaluation.outcomes.iter_rows(named=True)}
    assert outcome == {
        ("a", "c1"): "tp", ("a", "c2"): "tn", ("a", "n1"): "tp", ("a", "n2"): "fn",
        ("a", "n3"): "fp",
        ("b", "c1"): "fn", ("b", "c2"): "tn", ("b", "n1"): "fn", ("b", "n2"): "tp",
        ("b", "n3"): "tn",
    }


def test_job_table_fractions(evaluation):
    table = {(r["detector"], r["category"]): r for r in evaluation.job_table.iter_rows(named=True)}
    a_comm = table[("a", "communication")]
    assert (a_comm["accuracy_text"], a_comm["fpr_text"], a_comm["fnr_text"]) == (
        "33.3 (1/3)", "100.0 (1/1)", "50.0 (1/2)")
    a_all = table[("a", "all")]
    assert (a_all["accuracy_text"], a_all["fpr_text"], a_all["fnr_text"]) == (
        "60.0 (3/5)", "50.0 (1/2)", "33.3 (1/3)")
    b_comp = table[("b", "compute")]
    assert (b_comp["accuracy_text"], b_comp["fpr_text"], b_comp["fnr_text"]) == (
        "50.0 (1/2)", "0.0 (0/1)", "100.0 (1/1)")
    assert evaluation.job_table.filter(pl.col("detector") == "a")["category"].to_list() == [
        "communication", "compute", "all"]


def test_episode_matches_delay_and_attribution(evaluation):
    a = evaluation.matches.filter(pl.col("detector") == "a")
    rows = {(r["job"], r["label_episode"]): r for r in a.iter_rows(named=True)}
    c1 = rows[("c1", 0)]
    assert (c1["detected_episode"], c1["delay_s"], c1["delay_iterations"]) == (0, 3.0, 3)
    assert c1["target_correct"] is True and c1["cause_correct"] is True
    n1 = rows[("n1", 0)]  # detected before the labeled onset: zero delay; link order ignored
    assert (n1["detected_episode"], n1["delay_s"], n1["delay_iterations"]) == (0, 0.0, 0)
    assert n1["target_correct"] is True
    n1b = rows[("n1", 1)]  # the open episode (no end) overlaps it, but was not attributed
    assert (n1b["detected_episode"], n1b["delay_s"]) == (1, 0.0)
    assert n1b["target_correct"] is None and n1b["cause_correct"] is None
    assert rows[("n2", 0)]["detected"] is False
    b_n2 = evaluation.matches.filter((pl.col("detector") == "b") & (pl.col("job") == "n2"))
    assert b_n2["target_correct"].to_list() == [True]
    assert b_n2["cause_correct"].to_list() == [False]
    assert b_n2["delay_iterations"].to_list() == [3]


def test_episode_table(evaluation):
    table = {r["detector"]: r for r in evaluation.episode_table.filter(
        pl.col("category") == "all").iter_rows(named=True)}
    a, b = table["a"], table["b"]
    assert a["precision_text"] == "75.0 (3/4)"  # the GC-pause detection is a false positive
    assert a["recall_text"] == "75.0 (3/4)"
    assert a["delay_s_median"] == 0.0 and a["delay_s_max"] == 3.0
    assert a["localisation_text"] == "100.0 (2/2)"
    assert a["cause_accuracy_text"] == "100.0 (2/2)"
    assert b["precision_text"] == "100.0 (2/2)"
    assert b["recall_text"] == "25.0 (1/4)"
    assert b["cause_accuracy_text"] == "0.0 (0/1)"


def test_silent_detector_still_counted():
    result = evaluate(JOBS, _labels(), _episodes(), detectors=["a", "b", "quiet"])
    quiet = result.job_table.filter((pl.col("detector") == "quiet")
                                    & (pl.col("category") == "all")).row(0, named=True)
    assert (quiet["accuracy_text"], quiet["fnr_text"]) == ("40.0 (2/5)", "100.0 (3/3)")
    row = result.episode_table.filter((pl.col("detector") == "quiet")
                                      & (pl.col("category") == "all")).row(0, named=True)
    assert (row["recall_text"], row["precision_text"], row["localisation_text"]) == (
        "0.0 (0/4)", "n/a (0/0)", "not attributed")


def test_episode_table_per_category(evaluation):
    rows = {(r["detector"], r["category"]): r for r in evaluation.episode_table.iter_rows(
        named=True)}
    assert evaluation.episode_table.filter(pl.col("detector") == "a")["category"].to_list() == [
        "communication", "compute", "all"]
    compute, comm = rows[("a", "compute")], rows[("a", "communication")]
    assert (compute["recall_text"], compute["precision_text"]) == ("100.0 (1/1)", "100.0 (1/1)")
    assert (comm["recall_text"], comm["precision_text"]) == ("66.7 (2/3)", "66.7 (2/3)")
    assert compute["localisation_text"] == comm["localisation_text"] == "100.0 (1/1)"
    assert rows[("b", "compute")]["recall_text"] == "0.0 (0/1)"
    assert rows[("b", "compute")]["localisation_text"] == "not attributed"


def _one_match(label: dict, detected_target: str, detected_cause: str) -> dict:
    """Score one detection of one label (both over 0-10 s)."""
    names = ["job", "episode", "fail_slow", "t_start_ns", "t_end_ns", "start_iteration",
             *label]
    labels = schema.conform("labels", pl.DataFrame(
        [("j", 0, True, 0, 10 * S, 0, *label.values())],
        schema=[(n, schema.LABELS.schema[n]) for n in names], orient="row"))
    episodes = schema.conform("episodes", pl.DataFrame(
        [("d", "j", 0, 0, 10 * S, 0, detected_cause, detected_target)],
        schema=[(n, schema.EPISODES.schema[n]) for n in (
            "detector", "job", "episode", "t_start_ns", "t_end_ns", "start_iteration", "cause",
            "target")], orient="row"))
    return episode_matches(labels, episodes).row(0, named=True)


COMPOUND = {"cause": "network-congestion+gpu-thermal", "target": "link:gpu01-gpu02+rank:1",
            "target_rank": 1, "target_host": "gpu01", "target_gpu": 1,
            "target_link": "gpu01-gpu02"}


@pytest.mark.parametrize(("detected", "right"), [
    ("link:gpu01-gpu02+rank:1", True),
    ("rank:1+link:gpu01-gpu02", True),  # attribution found the parts in the other order
    ("rank:1+link:gpu02-gpu01", True),  # and the link from its other end
    ("gpu:gpu01/1+link:gpu02-gpu01", True),  # the culprit GPU spelled by host and index
    ("rank:1", False),  # half a compound culprit is not the culprit
    ("link:gpu01-gpu02", False),
    ("rank:2+link:gpu01-gpu02", False),
    ("rank:1+link:gpu01-gpu02+rank:3", False),
])
def test_compound_culprit_compared_as_a_set(detected, right):
    assert _one_match(COMPOUND, detected, "gpu-thermal+network-congestion")[
        "target_correct"] is right


HYPHENATED = {"cause": "network-congestion", "target": "link:rack1-n2<->rack2-n1",
              "target_link": "rack1-n2<->rack2-n1"}


@pytest.mark.parametrize(("detected", "right"), [
    ("link:rack1-n2<->rack2-n1", True),
    ("link:rack2-n1<->rack1-n2", True),  # the link from its other end
    ("link:rack1-n1<->rack2-n2", False),  # the same four words, another link
    ("link:rack1-n2<->rack2-n2", False),
    ("link:rack1-n1-rack2-n2", False),  # the old spelling cannot be split: only itself
    ("link:rack1-n2-rack2-n1", False),
])
def test_hyphenated_hosts_tell_links_apart(detected, right):
    """Host names hold ``-``: sorting a link's ``-``-separated words made these two links one
    (a wrong link scored right); ``<->`` keeps the hosts whole."""
    assert _one_match(HYPHENATED, detected, "network-congestion")["target_correct"] is right


def test_old_single_dash_links_still_score():
    """Committed corpora label links ``link:gpu01-gpu02``; one ``-`` splits one way."""
    old = {"cause": "network-congestion", "target": "link:gpu02-gpu01",
           "target_link": "gpu02-gpu01"}
    assert _one_match(old, "link:gpu01<->gpu02", "network-congestion")["target_correct"] is True
    assert _one_match(old, "link:gpu01<->gpu03", "network-congestion")["target_correct"] is False


def test_compound_cause_compared_as_a_set():
    assert _one_match(COMPOUND, "rank:1", "gpu-thermal + network-congestion")[
        "cause_correct"] is True
    assert _one_match(COMPOUND, "rank:1", "gpu-thermal")["cause_correct"] is False


def test_single_culprit_any_spelling():
    gpu = {"cause": "gpu-thermal", "target": "gpu:b07/5", "target_rank": 13,
           "target_host": "b07", "target_gpu": 5}
    assert _one_match(gpu, "rank:13", "gpu-thermal")["target_correct"] is True
    assert _one_match(gpu, "gpu:b07/5", "gpu-thermal")["target_correct"] is True
    assert _one_match(gpu, "gpu:b07/4", "gpu-thermal")["target_correct"] is False
    untargeted = {"cause": "gpu-thermal", "target": None, "target_rank": 13}
    assert _one_match(untargeted, "rank:13", "gpu-thermal")["target_correct"] is True


@pytest.fixture
def corpus_dir(tmp_path):
    corpus = tmp_path / "tiny"
    corpus.mkdir()
    (corpus / "corpus.csv").write_text("job,category\nc1,compute\n")
    return corpus


def test_regression_detects_a_weakened_detector(tmp_path, evaluation, corpus_dir):
    path = tmp_path / "baselines" / "accuracy.json"
    write_baseline(path, evaluation.metrics(), corpus_dir)
    baseline = read_baseline(path)
    assert baseline["metrics"]["job"]["a"]["all"]["tp"] == 2
    assert baseline["metrics"]["episode"]["a"]["all"]["correct_targets"] == 2
    assert regressions(evaluation.metrics(), baseline) == []
    weakened = evaluate(JOBS, _labels(), _episodes().filter(
        ~((pl.col("detector") == "a") & (pl.col("job") == "c1"))))
    found = {(r.where, r.metric) for r in regressions(weakened.metrics(), baseline)}
    assert ("job a/compute", "accuracy") in found
    assert ("job a/compute", "fnr") in found
    assert ("job a/all", "fnr") in found
    assert ("episode a/compute", "recall") in found
    assert ("episode a/all", "recall") in found
    assert not any(" b/" in where for where, _ in found)


def test_regression_detects_lost_attribution(tmp_path, evaluation, corpus_dir):
    path = tmp_path / "accuracy.json"
    write_baseline(path, evaluation.metrics(), corpus_dir)
    unattributed = evaluate(JOBS, _labels(), _episodes().with_columns(
        cause=pl.lit(None, pl.String), target=pl.lit(None, pl.String)))
    found = {(r.where, r.metric) for r in regressions(unattributed.metrics(),
                                                       read_baseline(path))}
    assert ("episode a/all", "localisation") in found
    assert ("episode a/all", "cause_accuracy") in found
    assert not any(metric in ("recall", "precision", "fnr") for _, metric in found)


def test_improvement_is_reported_not_a_regression(tmp_path, evaluation, corpus_dir):
    path = tmp_path / "accuracy.json"
    weaker = evaluate(JOBS, _labels(), _episodes().filter(pl.col("job") != "n3"),
                      detectors=["a", "b"])
    write_baseline(path, weaker.metrics(), corpus_dir)  # a's false alarm on n3 is new
    baseline = read_baseline(path)
    assert {(c.where, c.metric) for c in regressions(evaluation.metrics(), baseline)} == {
        ("job a/communication", "accuracy"), ("job a/communication", "fpr"),
        ("job a/all", "accuracy"), ("job a/all", "fpr"),
        ("episode a/communication", "precision"), ("episode a/all", "precision")}
    better = {(c.where, c.metric) for c in improvements(weaker.metrics(),
                                                         read_baseline(path))}
    assert better == set()
    write_baseline(path, evaluation.metrics(), corpus_dir)
    better = {(c.where, c.metric) for c in improvements(weaker.metrics(), read_baseline(path))}
    assert ("job a/all", "fpr") in better and ("episode a/all", "precision") in better
    assert regressions(weaker.metrics(), read_baseline(path)) == []


def test_baseline_knows_its_corpus(tmp_path, evaluation, corpus_dir):
    path = tmp_path / "accuracy.json"
    write_baseline(path, evaluation.metrics(), corpus_dir)
    baseline = read_baseline(path)
    assert corpus_changed(baseline, corpus_dir) is None
    (corpus_dir / "corpus.csv").write_text("job,category\nc1,compute\nc2,clean\n")
    assert "--update-baseline" in corpus_changed(baseline, corpus_dir)


def test_old_baseline_format_is_a_clear_error(tmp_path):
    path = tmp_path / "accuracy.json"
    path.write_text('{"metrics": {"job": {}, "episode": {}}}')
    with pytest.raises(InputError, match="re-measure"):
        read_baseline(path)


def test_missing_baseline_is_a_clear_error(tmp_path):
    with pytest.raises(InputError, match="--update-baseline"):
        read_baseline(tmp_path / "none.json")


def test_metric_change_reads_plainly():
    assert str(MetricChange("episode a/all", "localisation", 100.0, None, 2.0)) == (
        "episode a/all localisation: not measured vs baseline 100 (tolerance 2)")
    assert str(MetricChange("job a/all", "fnr", 0.0, 33.333, 2.0)) == (
        "job a/all fnr: 33.333 vs baseline 0 (tolerance 2)")



def test_alarm_delay_from_the_online_report():
    """Alarms at hand-set iterations and times: an alarm before the onset counts as zero; an
    episode without an alarm has none, and episodes without alarm columns give null."""
    alarms = _episodes().with_columns(
        alarm_iteration=pl.Series([19, 24, None, 10, 11, 12], dtype=pl.Int64),
        alarm_ns=pl.Series([230, 130, None, 45, 75, 78], dtype=pl.Int64) * S)
    result = evaluate(JOBS, _labels(), alarms)
    detected = result.matches.filter(pl.col("detected"))
    assert detected.select("detector", "job", "label_episode",
                           "alarm_delay_iterations").rows() == [
        ("a", "c1", 0, 9), ("a", "n1", 0, 4), ("a", "n1", 1, None), ("b", "n2", 0, 6)]
    assert detected["alarm_delay_s"].to_list() == pytest.approx([130.0, 30.0, None, 25.0])
    everything = result.episode_table.filter(pl.col("category") == "all")
    assert everything["alarm_delay_iterations_median"].to_list() == [6.5, 6.0]
    assert everything["alarm_delay_s_median"].to_list() == pytest.approx([80.0, 25.0])
    silent = evaluate(JOBS, _labels(), _episodes()).episode_table
    assert silent["alarm_delay_iterations_median"].null_count() == silent.height


@pytest.mark.parametrize(("detected", "right"), [
    ("rank:1+link:gpu02-gpu01", [True, True]),
    ("rank:1", [False, True]),
    ("rank:1+link:gpu01-gpu02+rank:3", [False, False]),  # rank 3 is healthy
])
def test_a_compound_labeled_as_two_episodes_is_named_by_one_verdict(detected, right):
    """Labeled dumps keep each half of a compound fail-slow as its own episode (congestion on
    a link, a thermal GPU): one verdict naming both parts is right for each half."""
    names = ["job", "episode", "fail_slow", "t_start_ns", "t_end_ns", "start_iteration",
             "cause", "target", "target_rank", "target_host", "target_gpu", "target_link"]
    labels = schema.conform("labels", pl.DataFrame(
        [("j", 1, True, 0, 10 * S, 0, "network-congestion", "link:gpu01-gpu02", None, None,
          None, "gpu01-gpu02"),
         ("j", 2, True, 2 * S, 12 * S, 2, "gpu-thermal", "rank:1", 1, "gpu01", 1, None)],
        schema=[(n, schema.LABELS.schema[n]) for n in names], orient="row"))
    episodes = schema.conform("episodes", pl.DataFrame(
        [("d", "j", 0, 0, 12 * S, 0, "gpu-thermal+network-congestion", detected)],
        schema=[(n, schema.EPISODES.schema[n]) for n in (
            "detector", "job", "episode", "t_start_ns", "t_end_ns", "start_iteration", "cause",
            "target")], orient="row"))
    matches = episode_matches(labels, episodes)
    assert matches["target_correct"].to_list() == right
    assert matches["cause_correct"].to_list() == [True, True]


def test_cause_accuracy_counts_missed_and_unattributed_as_wrong():
    matches = pl.DataFrame({
        "detector": ["d"] * 4, "cause": ["gpu-thermal", "gpu-thermal", "gpu-thermal",
                                         "cpu-contention"],
        "detected": [True, True, False, True],
        "target_correct": [True, None, None, False], "cause_correct": [True, None, None, True]})
    from tracekit.evaluate.scoring import cause_accuracy
    rows = cause_accuracy(matches).select("cause", "recall_text", "culprit_text",
                                          "cause_right_text").rows()
    assert rows == [("cpu-contention", "100.0 (1/1)", "0.0 (0/1)", "100.0 (1/1)"),
                    ("gpu-thermal", "66.7 (2/3)", "33.3 (1/3)", "33.3 (1/3)")]


def test_the_tables_as_json_hold_numbers_and_rate_objects(evaluation):
    """``tracekit eval --json``: what the printed tables show as ``33.3 (1/3)``."""
    document = json.loads(json.dumps(evaluation.as_json()))
    rows = {(r["detector"], r["category"]): r for r in document["job_level"]}
    assert rows[("a", "communication")] == {
        "detector": "a", "category": "communication", "jobs": 3, "tp": 1, "fp": 1, "tn": 0,
        "fn": 1, "accuracy": {"percent": 33.333, "count": 1, "of": 3},
        "fpr": {"percent": 100.0, "count": 1, "of": 1},
        "fnr": {"percent": 50.0, "count": 1, "of": 2},
        "localisation": {"percent": 100.0, "count": 1, "of": 1},
        "cause_accuracy": {"percent": 100.0, "count": 1, "of": 1}}
    episode = {(r["detector"], r["category"]): r for r in document["episode_level"]}[("a", "all")]
    assert (episode["precision"], episode["localisation"], episode["delay_s_max"]) == (
        {"percent": 75.0, "count": 3, "of": 4}, {"percent": 100.0, "count": 2, "of": 2}, 3.0)
    assert rows[("a", "all")]["localisation"] == episode["localisation"]
    assert {r["detector"] for r in document["by_cause"]} == {"a", "b"}
    assert all(isinstance(r["recall"]["of"], int) for r in document["by_cause"])

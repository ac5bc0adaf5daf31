"""Exports against the formats their readers expect: the Chrome trace event format (what
Perfetto's and chrome://tracing's JSON loaders read), CSV / Parquet tables and the summary."""

from __future__ import annotations

import json

import jsonschema
import polars as pl

from tracekit.evaluate.scoring import evaluate, load_corpus
from tracekit.report.export import chrome_trace, evidence_table, export_corpus, export_job

# The JSON object form of the Trace Event Format (Google's "Trace Event Format" document):
# complete events (X) need ts and dur in microseconds, instants (i) a scope, metadata (M) one
# of the naming records; every event names its process and thread.
_NUMBER = {"type": "number", "minimum": 0}
TRACE_SCHEMA = {
    "type": "object",
    "required": ["traceEvents"],
    "properties": {
        "displayTimeUnit": {"enum": ["ms", "ns"]},
        "traceEvents": {"type": "array", "items": {
            "type": "object",
            "required": ["ph", "pid", "tid", "name"],
            "properties": {"ph": {"enum": ["X", "i", "M"]}, "pid": {"type": "integer"},
                           "tid": {"type": "integer"}, "name": {"type": "string"},
                           "cat": {"type": "string"}, "args": {"type": "object"}},
            "allOf": [
                {"if": {"properties": {"ph": {"const": "X"}}},
                 "then": {"required": ["ts", "dur"],
                          "properties": {"ts": _NUMBER, "dur": _NUMBER}}},
                {"if": {"properties": {"ph": {"const": "i"}}},
                 "then": {"required": ["ts", "s"],
                          "properties": {"ts": _NUMBER, "s": {"enum": ["g", "p", "t"]}}}},
                {"if": {"properties": {"ph": {"const": "M"}}},
                 "then": {"required": ["args"], "properties": {"name": {"enum": [
                     "process_name", "thread_name", "thread_sort_index"]}}}},
            ]}},
    },
}


def test_chrome_trace_has_a_track_per_rank_and_the_episode(job_dataset):
    from tracekit.detect.verdict import shown_episodes

    _, episodes = shown_episodes(job_dataset.table("episodes").collect())
    trace = chrome_trace(job_dataset.table("iterations").collect(), episodes, "j1")
    jsonschema.validate(json.loads(json.dumps(trace)), TRACE_SCHEMA)
    events = trace["traceEvents"]
    threads = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert threads == {"rank 0", "rank 1", "rank 2", "rank 3", "verdict"}
    iterations = [e for e in events if e.get("cat") == "iteration"]
    assert len(iterations) == 4 * 120
    # iteration 60 is the first slow one: 60 s after the start, 1.5 s long, in microseconds
    sixty = next(e for e in iterations if e["tid"] == 2 and e["name"] == "iteration 60")
    assert (sixty["ts"], sixty["dur"]) == (60e6, 1.5e6)
    (episode,) = [e for e in events if e["pid"] == 2 and e["ph"] == "X"]
    assert episode["name"] == "#1 gpu-thermal"
    assert (episode["ts"], episode["dur"]) == (63e6, 42e6)
    assert episode["args"]["culprit"] == "rank:2"
    assert episode["args"]["evidence"] == ["SM clock of gpu h0/2 1410 -> 990 MHz"]
    (culprit,) = [e for e in events if e["ph"] == "i"]
    assert (culprit["tid"], culprit["ts"], culprit["s"]) == (2, 63e6, "t")


def test_job_export_files(job_dataset, tmp_path):
    exported = export_job(job_dataset, tmp_path / "export")
    assert sorted(p.name for p in exported.files) == [
        "episodes.csv", "episodes.parquet", "evidence.csv", "evidence.parquet", "summary.json",
        "trace.json"]
    jsonschema.validate(json.loads((tmp_path / "export" / "trace.json").read_text()),
                        TRACE_SCHEMA)
    summary = json.loads((tmp_path / "export" / "summary.json").read_text())
    assert (summary["job"], summary["iterations"], summary["ranks"], summary["span_s"]) == (
        "j1", 120, 4, 135.0)
    assert summary["lost_s"] == 14.0 and summary["episodes"][0]["target"] == "rank:2"
    assert summary["verdict"][0].startswith("The job ran 50 % slower for 42 s")
    csv = pl.read_csv(tmp_path / "export" / "episodes.csv")
    assert csv["cause"].to_list() == ["gpu-thermal"]
    parquet = pl.read_parquet(tmp_path / "export" / "episodes.parquet")
    assert parquet.select("episode", "target", "lost_s").rows() == [(1, "rank:2", 14.0)]
    assert pl.read_parquet(tmp_path / "export" / "evidence.parquet").rows() == [
        ("j1", 1, 1, "SM clock of gpu h0/2 1410 -> 990 MHz")]


def test_evidence_table_splits_clauses():
    episodes = pl.DataFrame({"job": ["a", "a"], "episode": [1, 2],
                             "evidence": ["x -> y; z held", None]})
    assert evidence_table(episodes).rows() == [("a", 1, 1, "x -> y"), ("a", 1, 2, "z held")]


def test_corpus_export_tables_and_summaries(corpus_datasets, tmp_path):
    corpus = load_corpus(corpus_datasets)
    evaluation = evaluate(corpus.jobs, corpus.labels, corpus.episodes)
    exported = export_corpus(corpus, evaluation, tmp_path / "export")
    names = sorted(p.relative_to(tmp_path / "export").as_posix() for p in exported.files)
    assert [n for n in names if n.endswith(".csv")] == [
        "cause_accuracy.csv", "episode_accuracy.csv", "episodes.csv", "evidence.csv",
        "job_accuracy.csv", "jobs.csv"]
    assert [n for n in names if n.startswith("summaries/")] == [
        "summaries/c1.json", "summaries/c2.json", "summaries/n1.json"]
    accuracy = pl.read_parquet(tmp_path / "export" / "job_accuracy.parquet").filter(
        pl.col("category") == "compute")
    assert accuracy.select("detector", "accuracy_text").sort("detector").rows() == [
        ("bocd+b", "100.0 (2/2)"), ("bocd+b+peers", "100.0 (2/2)")]
    healthy = json.loads((tmp_path / "export" / "summaries" / "c2.json").read_text())
    assert healthy["verdict"] == ["No fail-slow: the job ran at its own pace (median iteration "
                                  "1.000 s)."]

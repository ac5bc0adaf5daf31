"""Detectors against the labels of seeded synthesized jobs (the fast form of `tracekit eval`:
the simulator's true job-level iteration times instead of the ACF reconstruction)."""

import polars as pl
import pytest

from tracekit.core import schema
from tracekit.detect import make_detector
from tracekit.detect.episodes import find_episodes
from tracekit.evaluate.scoring import evaluate
from tracekit.synth.corpus import generate_corpus, job_spec
from tracekit.synth.job import generate_job

DETECTORS = ["window", "bocd", "bocd+v", "bocd+b"]


def evaluate_jobs(folders: dict[str, object], category: str):
    labels, episodes = [], []
    for job, folder in folders.items():
        truth = pl.read_parquet(folder / "truth.parquet")
        labels.append(pl.read_parquet(folder / "labels.parquet"))
        for name in DETECTORS:
            found = make_detector(name).detect(truth["duration_s"].to_numpy())
            episodes.append(find_episodes(job, name, truth, found, 0.05))
    jobs = pl.DataFrame({"job": list(folders), "category": category})
    return evaluate(jobs, pl.concat(labels), pl.concat([schema.table("episodes").empty(),
                                                        *episodes]), DETECTORS)


@pytest.fixture(scope="module")
def probing_corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("corpus")
    summary = generate_corpus(out, "probing-1node", 4, seed=4, iterations=600, collectives="none")
    return evaluate_jobs({job: out / job for job in summary["job"]}, "compute")


def test_job_level_counts_on_a_seeded_probing_corpus(probing_corpus):
    """Two clean jobs, a CPU contention (x2.56) and a 10.3 % GPU degradation: the window misses
    the 10.3 % slowdown, BOCD, BOCD+V and BOCD+B get every job right (the segments BOCD alone
    cuts around GC pauses are shorter than a fail-slow: no episode)."""
    table = probing_corpus.job_table.filter(pl.col("category") == "compute")
    counts = {row["detector"]: (row["tp"], row["fp"], row["tn"], row["fn"])
              for row in table.iter_rows(named=True)}
    assert counts == {"bocd": (2, 0, 2, 0), "bocd+b": (2, 0, 2, 0), "bocd+v": (2, 0, 2, 0),
                      "window": (1, 0, 2, 1)}
    matched = probing_corpus.matches.filter(pl.col("detector").is_in(["bocd+v", "bocd+b"]))
    assert matched["detected"].all()
    assert matched["delay_iterations"].to_list() == [0, 0, 0, 0]


def ramp_job(out, severity: float):
    """One GPU slowing in 4 equal steps (each under 10 % at job level) on [200, 600)."""
    spec = job_spec(layout="tp2-dp1-pp2", iterations=800,
                    inject=[f"gpu:rank=1@200+400x{severity}~4"],
                    scenario=None, model="gpt2-probe", hardware="h800", gpus_per_host=4,
                    sequence_parallel=False, distributed_optimizer=True, collectives="none",
                    monitoring=False, seed=1, job=f"ramp-{severity}")
    generate_job(out, spec)
    return out


def test_gradual_degradation_in_sub_10_percent_steps(tmp_path):
    """Job slowdowns of +3.8/8.7/13.4/17.3 % (a fail-slow: 10.8 % on average) and +2.6/6.2/
    9.5/12.3 % (labeled healthy: 7.6 % on average). BOCD+V never sees a 10 % step: it learns
    of the fail-slow only at its recovery; BOCD+B dates it at its first step while it lasts and
    leaves the other."""
    folders = {f"ramp-{s}": ramp_job(tmp_path / str(s), s) for s in (1.35, 1.25)}
    result = evaluate_jobs(folders, "compute")
    outcome = {(row["detector"], row["job"]): row["outcome"]
               for row in result.outcomes.iter_rows(named=True)}
    assert outcome[("bocd+b", "ramp-1.35")] == "tp"
    assert outcome[("bocd+b", "ramp-1.25")] == "tn"
    match = result.matches.filter(pl.col("detector") == "bocd+b").row(0, named=True)
    assert match["label_start_iteration"] == 201  # Megatron numbers iterations from 1
    assert match["delay_iterations"] == 0
    truth = pl.read_parquet(folders["ramp-1.35"] / "truth.parquet")["duration_s"].to_numpy()
    assert make_detector("bocd+b").detect(truth).tolist() == [3, 200, 600]  # 3: warm-up
    found, reported = make_detector("bocd+v").confirm(truth)
    assert found.tolist() == [3, 200, 600]
    assert reported[1:].min() >= 600  # BOCD+V knows only at the recovery

"""The four notebooks execute top to bottom (nbclient) and print the library's numbers.

Each notebook's last cell prints one JSON line of its key outputs; the tests recompute them
with the library and compare. Corpus notebooks use the committed corpus when it exists, else a
small corpus generated from a fixed seed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tracekit.characterise.faults import fault_intervals, recurrence_per_node, relapse_share
from tracekit.ingest.fault_trace import load_fault_trace

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
TIMEOUT_S = 120


def run_notebook(name: str, env: dict[str, str], tmp_path: Path) -> dict:
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    old = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        NotebookClient(notebook, timeout=TIMEOUT_S, kernel_name="python3",
                       resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    last = notebook.cells[-1]["outputs"]
    text = "".join(o.get("text", "") for o in last if o["output_type"] == "stream")
    return json.loads(text)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    committed = REPO / "datasets" / "corpus"
    if committed.is_dir():
        return committed
    from tracekit.synth.corpus import generate_corpus

    out = tmp_path_factory.mktemp("corpus") / "tiny"
    generate_corpus(out, "probing-1node", jobs=4, seed=0, iterations=300)
    return out


def test_fault_trace_notebook(real_dir, tmp_path):
    trace = real_dir / "infinitehbd-faults" / "fault_trace.json"
    shown = run_notebook("04_fault_trace.ipynb", {"TRACEKIT_FAULT_TRACE": str(trace)}, tmp_path)
    intervals = fault_intervals(load_fault_trace(trace))
    assert shown["faults"] == intervals.height == 584
    assert shown["nodes"] == recurrence_per_node(intervals).height == 231
    assert shown["relapse_7d"] == pytest.approx(relapse_share(intervals, 7.0))
    assert shown["median_h"][0]["fault_class"] == "GPU"
    assert shown["median_h"][0]["median_h"] == pytest.approx(16.7892)


def test_characterise_and_compare_notebooks(corpus, tmp_path):
    """The notebooks analyse the corpus into ``work``; the library side reads those datasets
    back instead of analysing the corpus again."""
    from tracekit.characterise.jobs import cause_table, job_summary_from_labels
    from tracekit.evaluate.scoring import evaluate, load_corpus

    work = tmp_path / "work"
    env = {"TRACEKIT_CORPUS": str(corpus), "TRACEKIT_WORK": str(work)}
    shown = run_notebook("01_characterise_corpus.ipynb", env, tmp_path)
    loaded = load_corpus(sorted(p for p in work.iterdir() if p.is_dir()))
    assert shown["jobs"] == loaded.jobs.height == len(
        [p for p in corpus.iterdir() if p.is_dir()])
    assert shown["causes"] == cause_table(
        job_summary_from_labels(loaded.jobs, loaded.labels)).to_dicts()
    shown = run_notebook("02_compare_detectors.ipynb", env, tmp_path)
    loaded = load_corpus(sorted(p for p in work.iterdir() if p.is_dir()))
    assert shown == json.loads(json.dumps(
        evaluate(loaded.jobs, loaded.labels, loaded.episodes).metrics()))


def test_investigate_job_notebook(tmp_path):
    env = {"TRACEKIT_DUMP": str(REPO / "datasets" / "sample"),
           "TRACEKIT_DATASET": str(tmp_path / "job")}
    shown = run_notebook("03_investigate_job.ipynb", env, tmp_path)
    assert shown["stages"]["ingest"] == "done"
    assert (tmp_path / "job" / "manifest.json").is_file()


def test_fault_trace_notebook_without_the_public_trace(tmp_path):
    """A clone without ``../shared`` runs the notebook: each cell says why it is skipped."""
    missing = tmp_path / "fault_trace.json"
    notebook = nbformat.read(NOTEBOOKS / "04_fault_trace.ipynb", as_version=4)
    NotebookClient(notebook, timeout=TIMEOUT_S, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOKS)}}).execute(
        env={**os.environ, "TRACEKIT_FAULT_TRACE": str(missing)})
    skipped = [cell for cell in notebook.cells[2:]
               if "".join(o.get("text", "") for o in cell["outputs"]).strip()
               == f"skipped: the InfiniteHBD fault trace is not at {missing} (it sits in "
                  "../shared/real/)"]
    assert len(skipped) == len(notebook.cells) - 2 == 5

"""Dependencies run one way: the import graph of ``tracekit/``, read from its own source (every
import counts, those inside functions and under ``TYPE_CHECKING`` too), has no cycle, and no
module imports one of a higher layer (docs/design.md draws the same layers)."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tracekit"

LAYERS = (
    ("foundations", ("tracekit", "tracekit.core")),
    ("stages", ("tracekit.ingest", "tracekit.iterations", "tracekit.detect",
                "tracekit.attribute", "tracekit.validate")),
    ("evaluation", ("tracekit.evaluate", "tracekit.characterise", "tracekit.synth")),
    ("reports", ("tracekit.report",)),
    ("pipeline", ("tracekit.pipeline",)),
    ("cli", ("tracekit.cli", "tracekit.__main__")),
)
"""Lowest first: a module imports its own layer or lower ones. ``tracekit`` is the package's
front door (``open_dataset``), which only hands on foundations; ``tracekit.__main__`` (``python -m
tracekit``) is the command line."""

INDEPENDENT = ("stages",)
"""Layers whose packages do not import each other: stages hand data on through the dataset's
tables, not through imports."""


def module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path) -> dict[str, set[str]]:
    """Every module of ``package`` and the package modules it imports, wherever the import
    stands in the file."""
    files = {module_name(path, package): path for path in package.rglob("*.py")}

    def known(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for module, path in files.items():
        is_package = path.name == "__init__.py"
        imported = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                imported.update(known(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = module.split(".")[:len(module.split(".")) - (not is_package)]
                    base = ".".join(here[:len(here) - node.level + 1] + ([base] if base else []))
                imported.update(known(f"{base}.{alias.name}") or known(base)
                                for alias in node.names)
        graph[module] = {name for name in imported if name and name != module}
    return graph


def layer_of(module: str) -> tuple[int, str]:
    """The layer's index and the package (``tracekit.X``) a module belongs to."""
    package = ".".join(module.split(".")[:2])
    for index, (_, packages) in enumerate(LAYERS):
        if package in packages:
            return index, package
    raise AssertionError(f"{module} is in no layer: add its package to LAYERS")


def cycle(graph: dict[str, set[str]]) -> list[str]:
    """One circle of imports (empty when there is none)."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as error:
        return error.args[1]
    return []


def wrong_way(graph: dict[str, set[str]]) -> list[str]:
    """Imports of a higher layer, or of a sibling package in an independent layer."""
    found = []
    for module, imported in sorted(graph.items()):
        layer, package = layer_of(module)
        for name in sorted(imported):
            other_layer, other_package = layer_of(name)
            sibling = (other_layer == layer and other_package != package
                       and LAYERS[layer][0] in INDEPENDENT)
            if other_layer > layer or sibling:
                found.append(f"{module} ({LAYERS[layer][0]}) imports {name} "
                             f"({LAYERS[other_layer][0]})")
    return found


def test_no_circle_of_imports():
    assert cycle(import_graph(PACKAGE)) == []


def test_every_import_runs_down_the_layers():
    assert wrong_way(import_graph(PACKAGE)) == []


def test_the_pipeline_imports_its_stages_directly():
    graph = import_graph(PACKAGE)
    assert {"tracekit.ingest.pipeline", "tracekit.iterations", "tracekit.detect",
            "tracekit.attribute"} <= graph["tracekit.pipeline.analyze"]


def _write(package: Path, files: dict[str, str]) -> Path:
    for name, source in files.items():
        path = package.parent / (name.replace(".", "/") + ".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return package


@pytest.fixture
def old_package(tmp_path) -> Path:
    """The two circles of imports the layout used to have, as they were written: one through
    an import inside a function, one under ``TYPE_CHECKING``."""
    return _write(tmp_path / "tracekit", {
        "tracekit.__init__": "",
        "tracekit.pipeline.__init__": "",
        "tracekit.pipeline.analyze": "from tracekit.report.job import job_report\n",
        "tracekit.report.__init__": "",
        "tracekit.report.job": "from tracekit.evaluate.scoring import episode_matches\n",
        "tracekit.evaluate.__init__": "",
        "tracekit.evaluate.scoring": ("def evaluate_corpus():\n"
                                      "    from tracekit.pipeline.analyze import analyze\n"),
        "tracekit.synth.__init__": "",
        "tracekit.synth.job": "from .labels import label_frame\n",
        "tracekit.synth.labels": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                  "    from tracekit.synth.job import JobRun\n"),
    })


def test_the_old_circles_are_caught(old_package):
    graph = import_graph(old_package)
    assert graph["tracekit.evaluate.scoring"] == {"tracekit.pipeline.analyze"}
    assert graph["tracekit.synth.job"] == {"tracekit.synth.labels"}
    assert cycle(graph)
    del graph["tracekit.evaluate.scoring"]
    assert sorted(cycle(graph)[1:]) == ["tracekit.synth.job", "tracekit.synth.labels"]
    assert wrong_way(import_graph(old_package)) == [
        "tracekit.evaluate.scoring (evaluation) imports tracekit.pipeline.analyze (pipeline)"]


def test_a_stage_importing_another_is_caught(tmp_path):
    package = _write(tmp_path / "tracekit", {
        "tracekit.__init__": "",
        "tracekit.detect.__init__": "",
        "tracekit.detect.peers": "from tracekit.attribute.stages import COMPUTE_OPS\n",
        "tracekit.attribute.__init__": "",
        "tracekit.attribute.stages": "COMPUTE_OPS = ()\n",
    })
    assert wrong_way(import_graph(package)) == [
        "tracekit.detect.peers (stages) imports tracekit.attribute.stages (stages)"]

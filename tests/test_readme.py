"""Every command block of the README and of ``docs/`` runs as written and exits 0, in order,
from a folder that sees the repository's ``datasets/`` as the repository root does.

``tracekit`` is this checkout's ``python -m tracekit``. ``make`` lines are not run here: they set
up the venv and run this very suite (``make demo`` is the tour's ``tracekit analyze``).

A block fenced as ``sh`` is an example that runs (in the README, a ``python`` block too); a
block without a language is a template (``tracekit detect DATASET``) and is not run, as are
the cluster scripts fenced ``bash``, ``python`` or ``yaml`` in the docs (they need a cluster).
A template whose ``tracekit`` lines name no placeholder could run, so it must be an ``sh``
block, unless it regenerates the committed data (writes under ``datasets/``) or needs the
hardware it checks (``validate``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

BLOCK = re.compile(r"^```(sh|python)\n(.*?)^```", re.MULTILINE | re.DOTALL)
TEMPLATE = re.compile(r"^```\n(.*?)^```", re.MULTILINE | re.DOTALL)
PLACEHOLDER = re.compile(r"\b[A-Z][A-Z_]*\b")
"""A word in capitals stands for the reader's own value (``DATASET``, ``OUT``, ``N``)."""
TIMEOUT_S = 600
DOCS = sorted((REPO / "docs").glob("*.md"))


def readme_blocks() -> list[tuple[str, str]]:
    return BLOCK.findall((REPO / "README.md").read_text())


def docs_blocks() -> list[tuple[str, str, str]]:
    """``(page, kind, block)`` of every runnable (``sh``) block of the pages under ``docs/``."""
    return [(page.name, kind, block) for page in DOCS
            for kind, block in BLOCK.findall(page.read_text()) if kind == "sh"]


def _tour_folder(tmp_path: Path) -> dict[str, str]:
    """``tmp_path`` set up as the repository root for the blocks; their environment."""
    (tmp_path / "datasets").symlink_to(REPO / "datasets")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "tracekit").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m tracekit "$@"\n')
    (bin_dir / "tracekit").chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                        os.environ.get("PYTHONPATH")]))}


def shell_commands(block: str) -> list[str]:
    """The block's commands: continuation lines joined, comments and ``make`` left out."""
    commands = block.replace("\\\n", " ").splitlines()
    return [c for c in commands if c.strip() and not c.lstrip().startswith(("#", "make "))]


def test_readme_has_the_tour_python_and_synth_blocks():
    kinds = [kind for kind, _ in readme_blocks()]
    assert kinds.count("sh") >= 3 and kinds.count("python") == 1
    assert sum(len(shell_commands(b)) for k, b in readme_blocks() if k == "sh") == 11


def test_every_readme_block_runs_as_written(tmp_path):
    env = _tour_folder(tmp_path)
    for kind, block in readme_blocks():
        commands = [block] if kind == "python" else shell_commands(block)
        for command in commands:
            argv = [sys.executable, "-c", command] if kind == "python" else [
                "bash", "-c", command]
            done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                                  timeout=TIMEOUT_S, check=False)
            assert done.returncode == 0, f"{command}\n{done.stderr[-2000:]}"
    verdict = json.loads((tmp_path / "build" / "job42.json").read_text())
    assert [(e["target"], e["cause"]) for e in verdict["episodes"]] == [
        ("link:gpu01<->gpu02", "network-congestion")]
    assert Path(verdict["report"]).name == "index.html"


@pytest.mark.parametrize("page", sorted({page for page, _, _ in docs_blocks()}))
def test_every_docs_block_runs_as_written(page, tmp_path):
    """Each ``sh`` block of a page runs as one script (a heredoc spans lines), stopping at
    its first failing command, in order."""
    env = _tour_folder(tmp_path)
    printed = []
    for _, _, block in (b for b in docs_blocks() if b[0] == page):
        done = subprocess.run(["bash", "-e", "-c", "\n".join(shell_commands_of_script(block))],
                              cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=TIMEOUT_S, check=False)
        assert done.returncode == 0, f"{page}:\n{block}\n{done.stderr[-2000:]}"
        printed += done.stdout.splitlines()
    if page == "labels.md":  # the worked example scores both incidents right, as it says
        assert "  bocd+b+peers: category all, jobs 2, accuracy 100.0 (2/2), FPR 0.0 (0/1), " \
               "FNR 0.0 (0/1), culprit 100.0 (1/1), cause 100.0 (1/1)" in printed
        assert "  network-congestion: fail-slows 1, found 100.0 % (1/1), culprit right " \
               "100.0 % (1/1), cause right 100.0 % (1/1)" in printed


def shell_commands_of_script(block: str) -> list[str]:
    """A block's lines without its ``make`` lines (the rest, heredocs included, as written)."""
    return [line for line in block.splitlines() if not line.lstrip().startswith("make ")]


def test_a_template_that_could_run_is_run():
    """Unlabeled blocks are templates: each ``tracekit`` line names a placeholder, or
    regenerates the committed data, or checks hardware."""
    for page in [REPO / "README.md", *DOCS]:
        for block in TEMPLATE.findall(page.read_text()):
            for line in block.replace("\\\n", " ").splitlines():
                command = line.split("#")[0].strip()
                if not command.startswith("tracekit "):
                    continue
                exempt = " datasets/" in command or command.startswith("tracekit validate")
                assert exempt or PLACEHOLDER.search(command.removeprefix("tracekit ")), \
                    f"{page.name}: {command!r} could run: fence its block as sh"

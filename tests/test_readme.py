"""Every command block of the README runs as written and exits 0, in order, from a folder that
sees the repository's ``datasets/`` as the repository root does.

``tracekit`` is this checkout's ``python -m tracekit``. ``make`` lines are not run here: they set
up the venv and run this very suite (``make demo`` is the tour's ``tracekit analyze``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

BLOCK = re.compile(r"^```(sh|python)\n(.*?)^```", re.MULTILINE | re.DOTALL)
TIMEOUT_S = 600


def readme_blocks() -> list[tuple[str, str]]:
    return BLOCK.findall((REPO / "README.md").read_text())


def shell_commands(block: str) -> list[str]:
    """The block's commands: continuation lines joined, comments and ``make`` left out."""
    commands = block.replace("\\\n", " ").splitlines()
    return [c for c in commands if c.strip() and not c.lstrip().startswith(("#", "make "))]


def test_readme_has_the_tour_python_and_synth_blocks():
    kinds = [kind for kind, _ in readme_blocks()]
    assert kinds.count("sh") >= 3 and kinds.count("python") == 1
    assert sum(len(shell_commands(b)) for k, b in readme_blocks() if k == "sh") == 11


def test_every_readme_block_runs_as_written(tmp_path):
    (tmp_path / "datasets").symlink_to(REPO / "datasets")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "tracekit").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m tracekit "$@"\n')
    (bin_dir / "tracekit").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                       os.environ.get("PYTHONPATH")]))}
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

"""Shared fixtures: where the format samples and the public datasets live.

The format samples were made for this project and are copied into ``tests/data/formats``, so a
clone tests on its own. The public datasets (``real``, ``devset``) are never copied into the
repository: they sit in ``../shared/`` beside the checkout (developer machines, CI), and the
tests that need them are skipped with a one-line reason where it is absent.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings

# Property tests assert properties, never speed: a loaded CI machine must not fail them on time.
settings.register_profile("tracekit", deadline=None)
settings.load_profile("tracekit")

REPO = Path(__file__).resolve().parents[1]
FORMATS = REPO / "tests" / "data" / "formats"
SHARED = REPO.parent / "shared"
REAL = SHARED / "real"
DEVSET = SHARED / "devset"


@pytest.fixture(scope="session")
def formats_dir() -> Path:
    return FORMATS


@pytest.fixture(scope="session")
def real_dir() -> Path:
    """The public real datasets (never copied into the repository)."""
    if not REAL.is_dir():
        pytest.skip(f"public datasets not found at {REAL} (they sit in ../shared/)")
    return REAL


@pytest.fixture(scope="session")
def devset_dir() -> Path:
    """The independent labeled dumps (public data: never copied into the repository)."""
    if not (DEVSET / "dumps").is_dir():
        pytest.skip(f"labeled devset dumps not found at {DEVSET} (they sit in ../shared/)")
    return DEVSET

"""Shared fixtures: where the real format samples and public datasets live.

``../shared/`` sits beside the checkout on developer machines and in CI.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings

# Property tests assert properties, never speed: a loaded CI machine must not fail them on time.
settings.register_profile("tracekit", deadline=None)
settings.load_profile("tracekit")

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
FORMATS = SHARED / "formats"
REAL = SHARED / "real"
DEVSET = SHARED / "devset"


@pytest.fixture(scope="session")
def formats_dir() -> Path:
    if not FORMATS.is_dir():
        pytest.fail(f"format samples not found at {FORMATS}")
    return FORMATS


@pytest.fixture(scope="session")
def real_dir() -> Path:
    if not REAL.is_dir():
        pytest.fail(f"real datasets not found at {REAL}")
    return REAL


@pytest.fixture(scope="session")
def devset_dir() -> Path:
    """The independent labeled dumps (public data: never copied into the repository)."""
    if not (DEVSET / "dumps").is_dir():
        pytest.skip(f"labeled devset dumps not found at {DEVSET} (they sit in ../shared/)")
    return DEVSET

"""tracekit: find, measure and explain fail-slows in large hybrid-parallel training jobs."""

from tracekit import core
from tracekit.core.dataset import Dataset, create_dataset, open_dataset

__all__ = ["Dataset", "__version__", "create_dataset", "open_dataset"]


def __getattr__(name: str) -> str:
    """``__version__``, which :mod:`tracekit.core` looks up only when asked for."""
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return core.__version__

"""tracekit: find, measure and explain fail-slows in large hybrid-parallel training jobs."""

from tracekit.core import __version__
from tracekit.core.dataset import Dataset, create_dataset, open_dataset

__all__ = ["Dataset", "__version__", "create_dataset", "open_dataset"]

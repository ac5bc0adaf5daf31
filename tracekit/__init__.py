"""tracekit: find, measure and explain fail-slows in large hybrid-parallel training jobs."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("tracekit")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"

from tracekit.dataset import Dataset, create_dataset, open_dataset  # noqa: E402

__all__ = ["Dataset", "__version__", "create_dataset", "open_dataset"]

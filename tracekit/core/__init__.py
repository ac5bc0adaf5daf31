"""Foundations every layer stands on: errors, the canonical schema, the dataset folder, host and
rank identity, compiled kernels, counter rates and parallel execution. Nothing here imports a
stage, a report or the pipeline."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("tracekit")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"

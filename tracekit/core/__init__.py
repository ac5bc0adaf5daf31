"""Foundations every layer stands on: errors, the canonical schema, the dataset folder, host and
rank identity, compiled kernels, counter rates and parallel execution. Nothing here imports a
stage, a report or the pipeline."""


def __getattr__(name: str) -> str:
    """``__version__``, looked up when first asked for: finding the installed distribution
    searches every path entry (2.3-3.3 ms of CPU), which an ingest or a Dask worker never needs."""
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("tracekit")
    except PackageNotFoundError:  # running from a source tree that was never installed
        found = "0.0.0+source"
    globals()["__version__"] = found
    return found

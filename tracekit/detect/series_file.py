"""Read a numeric series from a file for ``tracekit changepoints``: CSV, Parquet, a JSON list
(of numbers, or of rows of numbers) or a TCPD dataset (JSON with ``series[i].raw``), whatever
it measures. Every numeric column is a dimension of the series unless one is picked."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl

from tracekit.core.errors import InputError, TracekitError
from tracekit.detect.base import Detector
from tracekit.detect.ruptures_baselines import robust_standardise


def read_series(path: str | Path, column: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The series as points x columns (every numeric column, or the one named) and each point's
    0-based row in the file: rows with a missing value are skipped, so change points can be
    reported in the file's own row numbers."""
    path = Path(path)
    if not path.is_file():
        raise InputError("no such file", str(path))
    suffix = path.suffix.lower()
    try:
        if suffix == ".json":
            columns = _json_columns(path, column)
        else:
            frame = pl.read_parquet(path) if suffix in (".parquet", ".pq") else _read_csv(path)
            columns = _frame_columns(frame, column, path)
        matrix = np.column_stack([np.asarray(c, dtype=np.float64) for c in columns])
    except (OSError, ValueError, TypeError, pl.exceptions.PolarsError) as error:
        raise InputError(f"cannot read a series: {error}", str(path)) from None
    positions = np.flatnonzero(np.isfinite(matrix).all(axis=1))
    if positions.size < 2:
        raise InputError("fewer than two rows with every value numeric", str(path))
    return matrix[positions], positions


def _read_csv(path: Path) -> pl.DataFrame:
    """A CSV with or without a header: a first line of numbers only is the first row, not
    column names (which would shift every change point by one)."""
    frame = pl.read_csv(path, infer_schema_length=10_000)
    if frame.columns and all(_is_number(name) for name in frame.columns):
        frame = pl.read_csv(path, has_header=False, infer_schema_length=10_000)
    return frame


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


ITERATION_TIME_DETECTORS = frozenset({"window", "bocd", "bocd+v", "bocd+b"})
"""Detectors that judge a change relative to the level (10 % of an iteration time)."""

ASSUMED_RELATIVE_NOISE = 0.01
"""A series with values <= 0 reaches the iteration-time detectors at level 1 with this relative
noise, the 1 % jitter of healthy iteration times, so their 10 % is ten noise deviations."""


def file_changepoints(path: str | Path, detector: Detector, column: str | None = None) -> list[int]:
    """Change points of the series in ``path`` as row numbers of the file."""
    values, positions = read_series(path, column)
    try:
        return positions[series_changepoints(values, detector)].tolist()
    except TracekitError as error:
        raise InputError(str(error), str(path)) from None


def series_changepoints(values: np.ndarray, detector: Detector) -> np.ndarray:
    """Change points of a points x columns series, whatever it measures. Several columns go
    to the detector together when it models them (independent dimensions, costs summed)."""
    if values.shape[1] > 1:
        if not getattr(detector, "multivariate", False):
            raise TracekitError(f"{values.shape[1]} numeric columns but detector "
                                f"{detector.name!r} reads one series; pick one with --column "
                                "or use a detector that reads several (pelt, binseg)")
        return detector.detect(values)
    series = values[:, 0]
    if detector.name in ITERATION_TIME_DETECTORS and not series.min() > 0:
        series = 1.0 + ASSUMED_RELATIVE_NOISE * robust_standardise(series)
    return detector.detect(series)


def _frame_columns(frame: pl.DataFrame, column: str | None, path: Path) -> list[list]:
    if column is not None:
        if column not in frame.columns:
            raise InputError(f"no column {column!r}; columns: {', '.join(frame.columns)}",
                             str(path))
        return [frame[column].cast(pl.Float64, strict=False).to_list()]
    numeric = [name for name, dtype in frame.schema.items() if dtype.is_numeric()]
    if not numeric:
        raise InputError(f"no numeric column; columns: {', '.join(frame.columns)}", str(path))
    return [frame[name].cast(pl.Float64).to_list() for name in numeric]


def _json_columns(path: Path, column: str | None) -> list[list]:
    document = json.loads(path.read_text())
    if isinstance(document, dict) and "series" in document:
        return _tcpd_columns(document["series"], column, path)
    if isinstance(document, list) and document and all(isinstance(r, list) for r in document):
        width = len(document[0])
        if any(len(row) != width for row in document):
            raise InputError("rows of the JSON list have different lengths", str(path))
        columns = [[_number(row[i]) for row in document] for i in range(width)]
        return columns if column is None else [columns[_column_index(column, width, path)]]
    if not isinstance(document, list):
        raise InputError("expected a JSON list of numbers, a list of rows, or a TCPD dataset "
                         "(an object whose series is a list of {label, raw})", str(path))
    return [[_number(v) for v in document]]


def _tcpd_columns(series, column: str | None, path: Path) -> list[list]:
    if not isinstance(series, list) or not all(
            isinstance(s, dict) and isinstance(s.get("raw"), list) for s in series) or not series:
        raise InputError("expected series to be a list of {label, raw} objects (TCPD layout)",
                         str(path))
    names = [str(s.get("label", i)) for i, s in enumerate(series)]
    if column is not None:
        if column not in names:
            raise InputError(f"no series {column!r}; series: {', '.join(names)}", str(path))
        series = [series[names.index(column)]]
    if len({len(s["raw"]) for s in series}) > 1:
        raise InputError("the TCPD series have different lengths", str(path))
    return [[_number(v) for v in s["raw"]] for s in series]


def _column_index(column: str, width: int, path: Path) -> int:
    if not column.isdigit() or int(column) >= width:
        raise InputError(f"no column {column!r}; the rows have columns 0 to {width - 1}",
                         str(path))
    return int(column)


def _number(value) -> float | None:
    """A JSON value as a number, or missing (null, text, booleans)."""
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None

"""Read one numeric series from a file for ``tracekit changepoints``: CSV, Parquet, a JSON list,
or a TCPD dataset (JSON with ``series[i].raw``), whatever it measures."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl

from tracekit.errors import InputError


def read_series(path: str | Path, column: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The finite values of the series and their 0-based positions in the file (missing values
    are skipped, so change points can be reported in the file's own row numbers)."""
    path = Path(path)
    if not path.is_file():
        raise InputError("no such file", str(path))
    suffix = path.suffix.lower()
    try:
        if suffix == ".json":
            values = _json_values(path, column)
        else:
            frame = pl.read_parquet(path) if suffix in (".parquet", ".pq") else \
                pl.read_csv(path, infer_schema_length=10_000)
            values = _frame_column(frame, column, path)
    except (OSError, ValueError, pl.exceptions.PolarsError) as error:
        raise InputError(f"cannot read a series: {error}", str(path)) from None
    series = np.asarray(values, dtype=np.float64)
    positions = np.flatnonzero(np.isfinite(series))
    if positions.size < 2:
        raise InputError("fewer than two numeric values in the series", str(path))
    return series[positions], positions


def _frame_column(frame: pl.DataFrame, column: str | None, path: Path) -> list:
    numeric = [name for name, dtype in frame.schema.items() if dtype.is_numeric()]
    if column is None:
        if len(numeric) != 1:
            raise InputError(f"pick the series with --column; numeric columns: "
                             f"{', '.join(numeric) or 'none'}", str(path))
        column = numeric[0]
    if column not in frame.columns:
        raise InputError(f"no column {column!r}; columns: {', '.join(frame.columns)}", str(path))
    return frame[column].cast(pl.Float64, strict=False).to_list()


def _json_values(path: Path, column: str | None) -> list:
    document = json.loads(path.read_text())
    if isinstance(document, dict) and "series" in document:  # TCPD dataset layout
        series = document["series"]
        names = [s.get("label", str(i)) for i, s in enumerate(series)]
        index = 0 if column is None else (names.index(column) if column in names else -1)
        if index < 0:
            raise InputError(f"no series {column!r}; series: {', '.join(names)}", str(path))
        document = series[index]["raw"]
    if not isinstance(document, list):
        raise InputError("expected a JSON list of numbers or a TCPD dataset", str(path))
    return [v if isinstance(v, int | float) and not isinstance(v, bool) else None
            for v in document]

"""Change-point accuracy on real annotated series: F1 (5-point margin) and covering as the TCPD
benchmark defines them (``tracekit.detect.metrics``), every detector with its defaults.

Series: Nile (statsmodels; the Aswan dam's change, first lower year 1899, index 28) always; a
TCPD checkout (``datasets/*/*.json`` and ``annotations.json``) when ``TRACEKIT_TCPD`` names one or
``../shared/tcpd`` holds one. Each series is read as ``tracekit changepoints`` reads it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from tracekit.detect import make_detector
from tracekit.detect.metrics import covering, f1_score
from tracekit.detect.series_file import read_series, series_changepoints

DETECTORS = ("consensus", "bocd-map", "pelt", "binseg", "rpt-window", "bocd", "window")
NILE_CHANGE = 28
"""1899, the first year after the change Cobb (1978) dates at 1898 (statsmodels' Nile docs)."""


def tcpd_series(root: Path):
    """(name, values, row numbers, points, annotations) of each TCPD dataset under ``root``."""
    annotations = json.loads((root / "annotations.json").read_text())
    for path in sorted(root.glob("datasets/*/*.json")):
        if path.stem in annotations:
            values, positions = read_series(path)
            points = json.loads(path.read_text())["n_obs"]
            yield path.stem, values, positions, points, annotations[path.stem]


def nile_series():
    from statsmodels.datasets import nile

    values = nile.load().data["volume"].to_numpy(dtype=np.float64)
    return "nile (statsmodels)", values[:, None], np.arange(values.size), values.size, \
        {"cobb": [NILE_CHANGE]}


def scores(series, names=DETECTORS) -> dict[str, list[tuple[float, float]]]:
    """Per detector, the (F1, cover) of each series."""
    found: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    for _, values, positions, points, annotated in series:
        for name in names:
            detector = make_detector(name)
            multivariate = getattr(detector, "multivariate", False)
            columns = values if multivariate else values[:, :1]  # else the first, as TCPD
            rows = positions[series_changepoints(columns, detector)].tolist()
            found[name].append((f1_score(annotated, rows)[0], covering(annotated, rows, points)))
    return found


def _report(title: str, results: dict[str, list[tuple[float, float]]]) -> None:
    print(title)
    print(f"  {'detector':12s} {'F1':>6s} {'Cover':>6s}")
    for name, pairs in results.items():
        f1, cover = np.mean(pairs, axis=0)
        print(f"  {name:12s} {f1:6.3f} {cover:6.3f}")


def main() -> None:
    _report("nile (statsmodels), one annotation", scores([nile_series()]))
    root = Path(os.environ.get("TRACEKIT_TCPD", Path(__file__).resolve().parents[2] / "shared"
                               / "tcpd"))
    if not (root / "annotations.json").is_file():
        print(f"no TCPD checkout at {root} (set TRACEKIT_TCPD): Nile only")
        return
    series = list(tcpd_series(root))
    _report(f"TCPD, {len(series)} series at {root}, mean over series", scores(series))

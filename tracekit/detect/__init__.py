"""Change-point detectors behind one interface (:class:`~tracekit.detect.base.Detector`), a
registry by name, and episode extraction over a dataset's iterations.

``make_detector("bocd+v", min_change="0.15").detect(series)`` on any series;
``detect_dataset(dataset)`` for a job's events and episodes.
"""

from __future__ import annotations

from tracekit.detect.base import Detector
from tracekit.detect.episodes import detect_dataset
from tracekit.detect.registry import DETECTORS, make_detector

__all__ = ["DETECTORS", "Detector", "detect_dataset", "make_detector"]

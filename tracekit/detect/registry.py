"""The detectors by name.

``make_detector("bocd+v", min_change="0.15")`` builds one from the command line's strings.
"""

from __future__ import annotations

import dataclasses

from tracekit.core.errors import TracekitError
from tracekit.detect.base import Detector
from tracekit.detect.bocd import Bocd
from tracekit.detect.bocd_baseline import BocdBaseline
from tracekit.detect.bocd_map import BocdMap
from tracekit.detect.bocd_verify import BocdVerify
from tracekit.detect.consensus import Consensus
from tracekit.detect.penalised import BinarySegmentation, Pelt
from tracekit.detect.ruptures_baselines import TwoWindow
from tracekit.detect.window import SlidingWindow

DETECTORS: dict[str, type[Detector]] = {
    d.name: d
    for d in (SlidingWindow, Bocd, BocdVerify, BocdBaseline, BocdMap, Pelt, BinarySegmentation,
              TwoWindow, Consensus)
}

_PARSERS = {"float": float, "int": int, "str": str}


def make_detector(name: str, **params) -> Detector:
    """The detector called ``name`` with ``params`` (strings are converted to the field type)."""
    try:
        kind = DETECTORS[name]
    except KeyError:
        raise TracekitError(f"unknown detector {name!r}; known: {', '.join(DETECTORS)}") from None
    fields = {f.name: f for f in dataclasses.fields(kind)}
    values = {}
    for key, value in params.items():
        if key not in fields:
            raise TracekitError(f"detector {name!r} has no parameter {key!r}; parameters: "
                                f"{', '.join(fields) or 'none'}")
        parse = _PARSERS[str(fields[key].type)]
        try:
            values[key] = parse(value)
        except ValueError:
            raise TracekitError(f"parameter {key}={value!r} of {name!r} is not "
                                f"{fields[key].type}") from None
    return kind(**values)


"""Node fault traces of a training cluster, as the InfiniteHBD trace keeps them
(stepfun-ai/InfiniteHBD-Trace, ``fault_trace.json``): a JSON list of ``{node_id, event_time
(days), event_type: fault_start | fault_end, fault_type: {Level, Class, Desc}}`` events.
:mod:`tracekit.characterise.faults` turns the events into faults and their statistics.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from tracekit.core.errors import InputError


def load_fault_trace(path: str | Path) -> pl.DataFrame:
    """The trace's events, one row each, in file order; a clear error for a file that is not
    such a trace."""
    path = Path(path)
    try:
        records = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError("no such fault trace", str(path)) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InputError(f"not a JSON fault trace: {error}", str(path)) from None
    if not isinstance(records, list):
        raise InputError("expected a JSON list of fault events", str(path))
    try:
        frame = pl.DataFrame(records).unnest("fault_type")
        events = frame.select(
            pl.col("node_id").cast(pl.String).alias("node"),
            pl.col("event_time").cast(pl.Float64).alias("t_day"),
            pl.col("event_type").cast(pl.String).alias("event"),
            pl.col("Level").cast(pl.String).alias("level"),
            pl.col("Class").cast(pl.String).alias("fault_class"),
            pl.col("Desc").cast(pl.String).alias("desc"),
        )
    except (pl.exceptions.PolarsError, TypeError, ValueError) as error:
        raise InputError(f"fault events need node_id, event_time, event_type and fault_type "
                         f"{{Level, Class, Desc}}: {error}", str(path)) from None
    unknown = events.filter(~pl.col("event").is_in(["fault_start", "fault_end"]))
    if unknown.height:
        raise InputError(f"unknown event_type {unknown['event'][0]!r} (expected fault_start or "
                         "fault_end)", str(path))
    return events

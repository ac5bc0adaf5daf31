"""The InfiniteHBD node fault trace format: events read in file order, clear errors otherwise."""

from __future__ import annotations

import pytest

from tracekit.core.errors import InputError
from tracekit.ingest.fault_trace import load_fault_trace


def test_events_are_read_in_file_order(real_dir):
    events = load_fault_trace(real_dir / "infinitehbd-faults" / "fault_trace.json")
    assert events.height == 1168
    assert events.columns == ["node", "t_day", "event", "level", "fault_class", "desc"]
    assert events["event"].value_counts().sort("event")["count"].to_list() == [584, 584]


def test_bad_trace_is_a_clear_error(tmp_path):
    bad = tmp_path / "trace.json"
    bad.write_text('{"not": "a list"}')
    with pytest.raises(InputError, match="JSON list"):
        load_fault_trace(bad)
    bad.write_text('[{"node_id": "n", "event_time": 1.0, "event_type": "boom", "fault_type": '
                   '{"Level": "a", "Class": "b", "Desc": "c"}}]')
    with pytest.raises(InputError, match="unknown event_type 'boom'"):
        load_fault_trace(bad)
    with pytest.raises(InputError, match="no such fault trace"):
        load_fault_trace(tmp_path / "missing.json")

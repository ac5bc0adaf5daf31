"""Monitoring as collectors leave it on disk: one file per scrape, named by exporter, host and
time (``dcgm.<host>.<unix_s>.prom``, ``node.<host>.<unix_s>.prom``, ``hwc.<host>.<unix_s>.txt``),
with no sample timestamps and no host inside but for the labels the exporter itself writes
(dcgm-exporter's ``Hostname``).

The monitoring writers make one series file per exporter and host, with a ``# ts=... host=...``
marker (or sample timestamps) per scrape; :func:`split_into_scrapes` turns such a file into the
per-scrape files, so that tracekit's own jobs exercise what real dumps need: the time and host
from the file name, identical bytes of two scrapes kept apart.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

SCRAPE_NAMES = {
    "dcgm_exporter.prom": ("dcgm", "prom"),
    "node_exporter.prom": ("node", "prom"),
    "mlx5_hw_counters.txt": ("hwc", "txt"),
}
"""Series files split into scrapes, and the exporter word and extension of their scrape files;
ipmitool snapshots stay one file (their collectors log by hand, with ``# ts=`` lines)."""

_MARKER = re.compile(r"^# ts=(\d+)")
_SAMPLE_MS = re.compile(r"^([^#].*\S)\s+(\d{13})$")


def split_into_scrapes(path: Path, host: str,
                       target: Callable[[str, int, str], Path] | None = None) -> list[Path]:
    """Replace the series file ``path`` by one file per scrape beside it (or where ``target``
    of exporter word, scrape time and extension says); return them.

    A scrape starts at a ``# ts=`` marker, or, in files without markers (dcgm-exporter's, with
    sample timestamps), where the first metric family's ``# HELP`` line comes round again; its
    time is the marker's, else its first sample's."""
    exporter, extension = SCRAPE_NAMES[path.name]
    lines = path.read_text().splitlines()
    marked = any(_MARKER.match(line) for line in lines)
    first_help = next((line for line in lines if line.startswith("# HELP ")), None)
    scrapes: list[tuple[int | None, list[str]]] = []
    for line in lines:
        if (marker := _MARKER.match(line)) is not None:
            scrapes.append((int(marker.group(1)), []))
            continue
        if not marked and line == first_help:
            scrapes.append((None, []))
        ts, kept = scrapes[-1]
        if (sample := _SAMPLE_MS.match(line)) is not None:
            line = sample.group(1)
            if ts is None:
                scrapes[-1] = (int(sample.group(2)) // 1000, kept)
        kept.append(line)
    written = []
    for ts, kept in scrapes:
        scrape = (path.with_name(f"{exporter}.{host}.{ts}.{extension}") if target is None
                  else target(exporter, ts, extension))
        scrape.parent.mkdir(parents=True, exist_ok=True)
        scrape.write_text("\n".join(kept) + "\n")
        written.append(scrape)
    path.unlink()
    return written

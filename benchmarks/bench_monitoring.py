"""Prometheus exposition parsing: tracekit's vectorised parser vs a per-line Python parser
(the baseline every ad-hoc script writes: regex per line, dict of labels), same input, same run."""

from __future__ import annotations

import re
import time

import polars as pl

from tracekit.ingest.prometheus import parse_exposition

SAMPLE_LINES = 200_000
_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\}\s+(\S+)(?:\s+(\d+))?$')
_PAIR = re.compile(r'([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"')


def _lines() -> list[str]:
    return [
        f'DCGM_FI_DEV_GPU_TEMP{{gpu="{i % 8}",UUID="GPU-{i % 8:08x}",pci_bus_id="00000000:18:00.0",'
        f'Hostname="gpu-{i % 97}",modelName="NVIDIA H100 80GB HBM3"}} {40 + i % 50} '
        f'{1760433600000 + i}'
        for i in range(SAMPLE_LINES)
    ]


def _python_baseline(lines: list[str]) -> list[tuple]:
    out = []
    for line in lines:
        match = _LINE.match(line)
        if match:
            labels = dict(_PAIR.findall(match.group(2)))
            out.append((match.group(1), labels, float(match.group(3)), match.group(4)))
    return out


def main() -> None:
    lines = _lines()
    frame = pl.DataFrame({"line": lines}).with_row_index("line_no")
    start = time.perf_counter()
    parsed = parse_exposition(frame)
    vectorised_s = time.perf_counter() - start
    start = time.perf_counter()
    baseline = _python_baseline(lines)
    baseline_s = time.perf_counter() - start
    assert parsed.samples.height == len(baseline) == SAMPLE_LINES
    print(f"parse_exposition: {SAMPLE_LINES:,} lines in {vectorised_s:.2f} s; per-line Python "
          f"regex baseline {baseline_s:.2f} s; speed-up x{baseline_s / vectorised_s:.1f}")


if __name__ == "__main__":
    main()

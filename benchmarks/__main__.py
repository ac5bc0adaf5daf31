"""Run every benchmark (``python -m benchmarks``) or those named (``... benchmarks ingest``)."""

from __future__ import annotations

import importlib
import pkgutil
import sys

import benchmarks


def main(selected: list[str]) -> None:
    names = sorted(m.name for m in pkgutil.iter_modules(benchmarks.__path__)
                   if m.name.startswith("bench_"))
    for name in names:
        if selected and name.removeprefix("bench_") not in selected:
            continue
        print(f"== {name}", flush=True)
        importlib.import_module(f"benchmarks.{name}").main()


if __name__ == "__main__":
    main(sys.argv[1:])

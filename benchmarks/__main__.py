"""Run the benchmarks (``python -m benchmarks``) or those named (``... benchmarks ingest``).

A module that sets ``RUN_BY_DEFAULT = False`` (hours-long, cluster-sized) runs only when named.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import benchmarks


def main(selected: list[str]) -> None:
    if "--help" in selected or "-h" in selected:
        print(__doc__)
        for name in (n for n in selected if not n.startswith("-")):
            print(f"== bench_{name}\n{importlib.import_module(f'benchmarks.bench_{name}').__doc__}")
        return
    names = sorted(m.name for m in pkgutil.iter_modules(benchmarks.__path__)
                   if m.name.startswith("bench_"))
    for name in names:
        if selected and name.removeprefix("bench_") not in selected:
            continue
        module = importlib.import_module(f"benchmarks.{name}")
        if not selected and not getattr(module, "RUN_BY_DEFAULT", True):
            continue
        print(f"== {name}", flush=True)
        module.main()


if __name__ == "__main__":
    main(sys.argv[1:])

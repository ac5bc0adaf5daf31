"""Speed and memory benchmarks; each ``bench_*.py`` module has a ``main()``."""

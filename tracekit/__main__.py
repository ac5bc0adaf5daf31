"""``python -m tracekit``: the same command line as the ``tracekit`` script."""

from tracekit.cli import app

app(prog_name="tracekit")

"""The command line: the main app (:mod:`~tracekit.cli.main`), its ``synth`` and ``validate``
sub-apps, and what they share (:mod:`~tracekit.cli.support`)."""

from tracekit.cli.main import app

__all__ = ["app"]

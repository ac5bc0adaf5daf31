"""What every tracekit command shares: consoles, the error wrapper, option and time formatting.

Kept apart from :mod:`tracekit.cli` so sub-apps (``synth``, ``validate``) can use it without an
import cycle through the main app.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime

import typer
from rich.console import Console
from rich.markup import escape

from tracekit.core.errors import TracekitError

console = Console()
errors = Console(stderr=True)
state = {"debug": False}
"""Set by the main app's ``--debug``: re-raise errors instead of printing one line."""


def command(on: typer.Typer, *args, **kwargs):
    """Register a command on ``on`` whose TracekitErrors print as one line and exit with
    status 2."""

    def decorate(function):
        @functools.wraps(function)
        def wrapper(*a, **kw):
            try:
                return function(*a, **kw)
            except TracekitError as error:
                if state["debug"]:
                    raise
                print_error(str(error))
                raise typer.Exit(2) from None

        return on.command(*args, **kwargs)(wrapper)

    return decorate


def print_error(message: str) -> None:
    """One red line on stderr; the message is escaped so ``tracekit[gpu]`` stays visible."""
    errors.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)


def parse_options(pairs: list[str] | None) -> dict[str, str]:
    """``["k=v", ...]`` to a dict; a clear error for a pair without ``=``."""
    options = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise TracekitError(f"option {pair!r} is not KEY=VALUE")
        options[key.strip()] = value
    return options


def format_ns(ns: int | None) -> str:
    if ns is None:
        return "-"
    return datetime.fromtimestamp(ns / 1e9, UTC).strftime("%Y-%m-%d %H:%M:%S")


def format_span(t_min_ns: int | None, t_max_ns: int | None) -> str:
    if t_min_ns is None or t_max_ns is None:
        return "no timestamps"
    return f"{format_ns(t_min_ns)} .. {format_ns(t_max_ns)} ({(t_max_ns - t_min_ns) / 1e9:.0f} s)"

"""Errors a user can act on. The CLI prints them as one line; library code never prints."""

from __future__ import annotations


class TracekitError(Exception):
    """Base of every error tracekit raises on purpose (bad input, bad arguments)."""


class SchemaError(TracekitError):
    """A frame does not match its canonical table; the message names table and column."""


class InputError(TracekitError):
    """An input cannot be used; the message names the file (and line) and how to fix it."""

    def __init__(self, message: str, path: str | None = None, line: int | None = None):
        self.path = path
        self.line = line
        where = path if line is None else f"{path}:{line}"
        super().__init__(f"{where}: {message}" if where else message)

"""Find every format reader and choose one per source by sniffing its content.

Each module of ``tracekit.ingest`` that reads a format exposes ``READERS``, a list of reader
instances; the registry imports the modules and collects them, so adding a format is adding a
module, with no central list to edit.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

import tracekit.ingest as package
from tracekit.core.errors import InputError
from tracekit.ingest.base import Reader, Source


@cache
def readers() -> tuple[Reader, ...]:
    """All readers, in sniffing order (lower priority first, then by format name)."""
    found: list[Reader] = []
    for module_info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{module_info.name}")
        found.extend(getattr(module, "READERS", ()))
    return tuple(sorted(found, key=lambda r: (r.priority, r.format)))


def formats() -> list[str]:
    return [r.format for r in readers()]


def reader_for_format(name: str) -> Reader:
    """The reader called ``name``; a clear error listing the known formats otherwise."""
    for reader in readers():
        if reader.format == name:
            return reader
    raise InputError(f"unknown format {name!r}; known formats: {', '.join(formats())}")


def sniff(source: Source) -> Reader:
    """The first reader that recognises ``source``."""
    for reader in readers():
        if reader.sniff(source):
            return reader
    raise InputError(
        "cannot tell the format of this file; force one with --format "
        f"(known: {', '.join(formats())})",
        source.name,
    )

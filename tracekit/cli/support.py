"""What every tracekit command shares: consoles, the error wrapper, option and time formatting.

Kept apart from :mod:`tracekit.cli` so sub-apps (``synth``, ``validate``) can use it without an
import cycle through the main app.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from tracekit.core.errors import TracekitError

console = Console()
errors = Console(stderr=True)
state = {"debug": False}
"""Set by the main app's ``--debug``: re-raise errors instead of printing one line."""


def command(on: typer.Typer, *args, **kwargs):
    """Register a command on ``on`` whose TracekitErrors print as one line and exit with
    status 2, as do an OSError naming a file and a damaged Parquet part."""

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
            except OSError as error:  # a read-only or full target, a folder that is a file
                if state["debug"] or error.filename is None:
                    raise
                print_error(f"{error.filename}: {error.strerror or error}")
                raise typer.Exit(2) from None
            except Exception as error:
                damaged = damaged_parquet(error, [*a, *kw.values()])
                if damaged is None or state["debug"]:
                    raise
                print_error(damaged)
                raise typer.Exit(2) from None

        return on.command(*args, **kwargs)(wrapper)

    return decorate


PARQUET_MAGIC = b"PAR1"
"""How every Parquet file ends; a truncated or overwritten part does not."""


def damaged_parquet(error: Exception, arguments: Iterable[object]) -> str | None:
    """The line for polars' error on a damaged Parquet part met while a command scanned a
    table (None for any other error). Polars names no file, so the parts under the command's
    folder arguments that do not end as Parquet does are named."""
    reason = str(error).splitlines()[0] if str(error) else ""
    if type(error).__name__ != "ComputeError" or not reason.startswith("parquet:"):
        return None
    folders = [Path(a) for a in arguments if isinstance(a, Path) and a.is_dir()]
    damaged = [part for folder in folders for part in sorted(folder.rglob("*.parquet"))
               if not _ends_as_parquet(part)]
    where = f"{damaged[0]}: damaged Parquet part" if damaged else \
        f"{', '.join(map(str, folders)) or 'the dataset'}: a damaged Parquet part"
    return f"{where} ({reason}); remove it and ingest its source again"


def _ends_as_parquet(part: Path) -> bool:
    with part.open("rb") as stream:
        stream.seek(max(part.stat().st_size - len(PARQUET_MAGIC), 0))
        return stream.read() == PARQUET_MAGIC


JsonOption = Annotated[bool, typer.Option(
    "--json", help="Print one JSON document on stdout instead of tables (for scripts and CI).")]


def print_json(document: Any) -> None:
    """One JSON document on plain stdout: rich would wrap it at the terminal width (80 columns
    in a pipe), which breaks the document."""
    print(json.dumps(document, default=str))


UNBOUNDED_WIDTH = 100_000
"""Width a table is measured within to learn how wide it wants to be uncut."""


def show_table(title: str, columns: Sequence[str], rows: Iterable[Sequence[str]],
               right: Iterable[str] = ()) -> None:
    """A table where it fits the terminal; otherwise (a narrow terminal, a pipe, a CI log) one
    line per row, ``first: column value, column value, ...``, that the terminal may wrap but
    never cuts: no name or figure is lost."""
    rows = [["-" if value is None else str(value) for value in row] for row in rows]
    table = Table(title=title)
    for column in columns:
        table.add_column(column, justify="right" if column in set(right) else "left")
    for row in rows:
        table.add_row(*row)
    unbounded = console.options.update_width(UNBOUNDED_WIDTH)  # a table measures within its bound
    if console.is_terminal and Measurement.get(console, unbounded, table).maximum <= console.width:
        console.print(table)
        return
    print(title)
    for first, *rest in rows:
        print(f"  {first}: " + ", ".join(f"{column} {value}" for column, value in
                                         zip(columns[1:], rest, strict=True)))


def working(what: str):
    """A spinner on stderr while a stage without its own progress runs (attribution takes ~20 s
    on a large job); nothing in a pipe."""
    return errors.status(f"{what}...")


def say(text: str) -> None:
    """A result line on stdout with rich markup, wrapped by the terminal rather than cut."""
    console.print(text, highlight=False, soft_wrap=True)


def grouped_messages(messages: Iterable[tuple[str, str]], examples: int = 3
                     ) -> list[tuple[str, int, list[str]]]:
    """``(path, message)`` pairs as each distinct message once: its count and a few of the paths
    it came from, most frequent first (a 300-file dump repeats one note 300 times)."""
    paths: dict[str, list[str]] = {}
    for path, message in messages:
        paths.setdefault(message.removeprefix(f"{path}: "), []).append(path)
    return sorted(((message, len(where), where[:examples]) for message, where in paths.items()),
                  key=lambda group: -group[1])


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


def plural(count: int, noun: str) -> str:
    """``1 episode``, ``2 episodes``."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def format_ns(ns: int | None) -> str:
    if ns is None:
        return "-"
    return datetime.fromtimestamp(ns / 1e9, UTC).strftime("%Y-%m-%d %H:%M:%S")


def format_span(t_min_ns: int | None, t_max_ns: int | None) -> str:
    if t_min_ns is None or t_max_ns is None:
        return "no timestamps"
    return f"{format_ns(t_min_ns)} .. {format_ns(t_max_ns)} ({(t_max_ns - t_min_ns) / 1e9:.0f} s)"


class _NoticeHandler(logging.Handler):
    """Prints tracekit's notices (a kernel built once) as one dim line on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        errors.print(f"[dim]note: {record.getMessage()}[/]", highlight=False, soft_wrap=True)


def show_build_notices() -> None:
    """Say on stderr when a compiled kernel is built: the first run pauses for tens of
    seconds, and a silent pause reads as a hang."""
    logger = logging.getLogger("tracekit.core.compiled")
    if not any(isinstance(h, _NoticeHandler) for h in logger.handlers):
        logger.addHandler(_NoticeHandler())
        logger.setLevel(logging.INFO)

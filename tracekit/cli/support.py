"""What every tracekit command shares: consoles, the error wrapper, option and time formatting.

Kept apart from :mod:`tracekit.cli` so sub-apps (``synth``, ``validate``) can use it without an
import cycle through the main app.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import shutil
import textwrap
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table
from typer.core import TyperArgument, TyperCommand, TyperGroup

from tracekit.core.errors import InputError, TracekitError

console = Console()
errors = Console(stderr=True)
state = {"debug": False}
"""Set by the main app's ``--debug``: re-raise errors instead of printing one line."""


METAVARS = {"Path": "PATH", "str": "TEXT", "int": "N", "float": "NUMBER"}
"""Help placeholders by value type (typer's own are ``<str>``, ``<list[Path]>``)."""

NAMED_METAVARS = {"option": "K=V", "param": "K=V", "cluster": "SPEC", "format": "FORMAT",
                  "detector": "NAME", "job": "ID", "job_id": "ID"}
"""Placeholders of options whose value is not just a type (``--option K=V``)."""


def _metavar(param: Any) -> str:
    """What the help shows for a parameter's value: the argument's name in capitals
    (``DATASET``, ``DUMP...``), ``K=V`` for reader and detector options, else its type."""
    if isinstance(param, TyperArgument):
        return param.name.upper() + ("..." if param.nargs == -1 else "")
    if param.name in NAMED_METAVARS:
        return NAMED_METAVARS[param.name]
    value_type = param.bare_type().removeprefix("list[").removesuffix("]")
    return METAVARS.get(value_type, value_type.upper())


def _one_paragraph(text: str | None) -> str | None:
    """A docstring's first paragraph as one line, for the verb list."""
    if not text:
        return None
    return " ".join(inspect.cleandoc(text).split("\n\n", 1)[0].split())


HELP_WIDTH = 80
"""``--help`` is wrapped at the terminal's width, at most this."""

TERM_COLUMN = 30
"""Widest first column of the options and verbs lists; a longer term gets its own line."""


def _wrap(text: str, width: int, indent: str = "") -> list[str]:
    """Lines of ``text`` within ``width``, broken between words only (a path such as
    ``docs/scale-out.md`` or a syntax such as ``CAUSE[:TARGET]@START`` stays whole)."""
    return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent,
                         break_on_hyphens=False, break_long_words=False) or [indent]


def _definitions(rows: list[tuple[str, str]], width: int) -> list[str]:
    """Terms and their help as two columns; the help wraps in its column."""
    column = min(max((len(term) for term, _ in rows), default=0), TERM_COLUMN)
    lines = []
    for term, text in rows:
        wrapped = _wrap(text, width - column - 4) if text else []
        if len(term) > column:
            lines.append(f"  {term}")
        else:
            lines.append(f"  {term:<{column}}  {wrapped.pop(0) if wrapped else ''}".rstrip())
        lines += [" " * (column + 4) + line for line in wrapped]
    return lines


def _help_page(command: Any, ctx: Any, sections: list[tuple[str, list[tuple[str, str]]]]
               ) -> str:
    """A whole ``--help`` page: usage, the description's paragraphs, then ``sections``."""
    width = min(shutil.get_terminal_size((HELP_WIDTH, 24)).columns, HELP_WIDTH)
    usage = f"{ctx.command_path} {' '.join(command.collect_usage_pieces(ctx))}"
    lines = _wrap(usage, width, "") and [f"Usage: {line}" if i == 0 else f"  {line}"
                                         for i, line in enumerate(_wrap(usage, width - 7))]
    for paragraph in inspect.cleandoc(command.help or "").split("\n\n"):
        if paragraph.strip():
            lines += ["", *_wrap(" ".join(paragraph.split()), width - 2, "  ")]
    for title, rows in sections:
        if rows:
            lines += ["", f"{title}:", *_definitions(rows, width)]
    return "\n".join(lines) + "\n"


def _option_rows(command: Any, ctx: Any) -> list[tuple[str, str]]:
    return [record for param in command.get_params(ctx)
            if not isinstance(param, TyperArgument)
            and (record := param.get_help_record(ctx)) is not None]


class HelpCommand(TyperCommand):
    """A command whose ``--help`` is written for people: placeholders such as ``PATH``,
    ``K=V`` and ``DUMP...`` (not typer's ``<list[Path]>``), wrapped between words at the
    terminal's width (80 columns at most), never cut."""

    def __init__(self, *args, **kwargs):
        kwargs["rich_markup_mode"] = None
        kwargs["short_help"] = kwargs.get("short_help") or _one_paragraph(kwargs.get("help"))
        super().__init__(*args, **kwargs)
        for param in self.params:
            if param.metavar is None and not getattr(param, "is_flag", False):
                param.metavar = _metavar(param)

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        arguments = [p.metavar for p in self.params if isinstance(p, TyperArgument)]
        return [self.options_metavar, *arguments]

    def format_help(self, ctx: Any, formatter: Any) -> None:
        arguments = [(p.metavar, p.help or "") for p in self.params
                     if isinstance(p, TyperArgument)]
        formatter.write(_help_page(self, ctx, [("Arguments", arguments),
                                               ("Options", _option_rows(self, ctx))]))


class HelpGroup(TyperGroup):
    """The main app and its sub-apps, with :class:`HelpCommand`'s help layout; the verb list
    shows each verb's first docstring paragraph whole."""

    def __init__(self, *args, **kwargs):
        kwargs["rich_markup_mode"] = None
        super().__init__(*args, **kwargs)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        verbs = [(name, _one_paragraph(verb.help) or "") for name in self.list_commands(ctx)
                 if (verb := self.get_command(ctx, name)) is not None and not verb.hidden]
        formatter.write(_help_page(self, ctx, [("Options", _option_rows(self, ctx)),
                                               ("Commands", verbs)]))


def new_app(**settings) -> typer.Typer:
    """A typer app (the main one or a sub-app) with tracekit's help layout."""
    return typer.Typer(cls=HelpGroup, rich_markup_mode=None, pretty_exceptions_enable=False,
                       **settings)


def command(on: typer.Typer, *args, **kwargs):
    """Register a command on ``on`` whose TracekitErrors print as one line and exit with
    status 2, as do an OSError naming a file and a damaged Parquet part. Under ``--json`` the
    error is also one JSON object on stdout: ``{"error": message, "exit_status": 2}``."""

    def decorate(function):
        @functools.wraps(function)
        def wrapper(*a, **kw):
            try:
                return function(*a, **kw)
            except TracekitError as error:
                if state["debug"]:
                    raise
                fail(_naming_the_input(error, kw), kw.get("as_json", False))
            except OSError as error:  # a read-only or full target, a folder that is a file
                if state["debug"] or error.filename is None:
                    raise
                fail(f"{error.filename}: {error.strerror or error}", kw.get("as_json", False))
            except Exception as error:
                damaged = damaged_parquet(error, [*a, *kw.values()])
                if damaged is None or state["debug"]:
                    raise
                fail(damaged, kw.get("as_json", False))

        return on.command(*args, cls=HelpCommand, **kwargs)(wrapper)

    return decorate


DATASET_ARGUMENTS = ("dataset", "corpus")
"""A command's parameters that name the dataset (or corpus) it reads."""


def _naming_the_input(error: TracekitError, arguments: dict[str, Any]) -> str:
    """The one-line error, with the dataset the command read where an input error names no
    file (a stage that finds a table empty knows its rows, not its folder)."""
    given = next((arguments[name] for name in DATASET_ARGUMENTS
                  if arguments.get(name) is not None), None)
    if isinstance(error, InputError) and error.path is None and given is not None:
        return f"{given}: {error}"
    return str(error)


ERROR_STATUS = 2
"""Exit status of a command refused or stopped by an error tracekit raised on purpose."""


def fail(message: str, as_json: bool = False, status: int = ERROR_STATUS):
    """Stop the command: the message as one line on stderr (and, under ``--json``, as
    ``{"error", "exit_status"}`` on stdout, so a script reads a document either way)."""
    if as_json:
        print_json({"error": message, "exit_status": status})
    print_error(message)
    raise typer.Exit(status) from None


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
    in a pipe), which breaks the document. A table inside it (a polars frame) is a list of
    rows, not its printed form."""
    print(json.dumps(document, default=_json_value))


def _json_value(value: Any) -> Any:
    """What ``json`` cannot encode itself: tables as rows, anything else (paths, times) as
    its text."""
    to_dicts = getattr(value, "to_dicts", None)
    return to_dicts() if callable(to_dicts) else str(value)


UNBOUNDED_WIDTH = 100_000
"""Width a table is measured within to learn how wide it wants to be uncut."""


def show_table(title: str, columns: Sequence[str], rows: Iterable[Sequence[str]],
               right: Iterable[str] = ()) -> None:
    """A table where it fits the terminal; otherwise (a narrow terminal, a pipe, a CI log) one
    line per row, ``first: column value, column value, ...``, that the terminal may wrap but
    never cuts: no name or figure is lost."""
    rows = [["-" if value is None or value == "" else str(value) for value in row] for row in rows]
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

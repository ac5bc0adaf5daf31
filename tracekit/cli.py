"""The ``tracekit`` command line: one thin command per verb.

Each command parses its arguments, calls one library function and prints the result. Errors
tracekit raises on purpose become one line on stderr and exit status 2; ``--debug`` shows the
traceback instead.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from tracekit import __version__
from tracekit.errors import TracekitError

app = typer.Typer(
    name="tracekit",
    help="Find, measure and explain fail-slows in large hybrid-parallel training jobs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
errors = Console(stderr=True)
_state = {"debug": False}


def command(*args, **kwargs):
    """Register a command whose TracekitErrors print as one line and exit with status 2."""

    def decorate(function):
        @functools.wraps(function)
        def wrapper(*a, **kw):
            try:
                return function(*a, **kw)
            except TracekitError as error:
                if _state["debug"]:
                    raise
                errors.print(f"[bold red]error:[/] {error}", highlight=False, soft_wrap=True)
                raise typer.Exit(2) from None

        return app.command(*args, **kwargs)(wrapper)

    return decorate


def _version(value: bool) -> None:
    if value:
        console.print(f"tracekit {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
) -> None:
    _state["debug"] = debug


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


@command()
def info(dataset: Annotated[Path, typer.Argument(help="Dataset folder.")]) -> None:
    """Summarise a dataset: its tables, rows, time span, ranks, hosts and sources."""
    from tracekit.dataset import open_dataset

    opened = open_dataset(dataset)
    manifest = opened.manifest
    table = Table(title=f"dataset {dataset} — job {opened.job}")
    for column in ("table", "rows", "time span", "ranks", "hosts"):
        numeric = column in ("rows", "ranks", "hosts")
        table.add_column(column, justify="right" if numeric else "left")
    for name, stats in manifest["tables"].items():
        span = format_span(stats["t_min_ns"], stats["t_max_ns"]) if "t_min_ns" in stats else ""
        table.add_row(name, f"{stats['rows']:,}", span, str(stats.get("ranks", "")),
                      str(stats.get("hosts", "")))
    console.print(table)
    sources = manifest["sources"]
    quarantined = sum(s["quarantined"] for s in sources)
    skipped = sum(s["skipped"] for s in sources)
    console.print(f"{len(sources)} sources, {quarantined:,} quarantined lines, "
                  f"{skipped:,} skipped lines; tracekit {manifest.get('tracekit_version')}")


@command()
def ingest(
    sources: Annotated[list[Path], typer.Argument(help="Files, folders or .tar(.gz) archives.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Dataset folder to write.")],
    job: Annotated[str | None, typer.Option(help="Job id (default: the dataset folder name).")]
    = None,
    format: Annotated[str | None, typer.Option("--format", help="Force a format instead of "
                                               "sniffing; see `tracekit formats`.")] = None,
    option: Annotated[list[str] | None, typer.Option("--option", help="Reader option KEY=VALUE "
                                                     "(repeatable).")] = None,
) -> None:
    """Normalise cluster dumps into a Parquet dataset (re-running is idempotent)."""
    from tracekit.ingest.pipeline import ingest as run_ingest

    options = parse_options(option)
    with Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), DownloadColumn(),
        TransferSpeedColumn(), TextColumn("{task.fields[rows]:,} rows"), TimeRemainingColumn(),
        console=errors, transient=True,
    ) as progress:
        task = progress.add_task("ingest", total=None, rows=0)

        def advance(name: str, bytes_done: int, rows: int) -> None:
            progress.update(task, description=Path(name.split("!")[-1]).name,
                            advance=bytes_done, rows=progress.tasks[task].fields["rows"] + rows)

        summary = run_ingest(sources, output, job=job, format=format, options=options,
                             progress=advance)
    table = Table(title=f"ingested into {summary.dataset}")
    for column in ("source", "format", "rows", "skipped", "quarantined", "ranks", "time span",
                   "status"):
        table.add_column(column)
    for s in summary.sources:
        table.add_row(s.path, s.format or "?", f"{s.total_rows:,}", f"{s.skipped:,}",
                      f"{s.quarantined:,}", str(s.ranks or ""), format_span(s.t_min_ns, s.t_max_ns)
                      if s.status == "ingested" else "", s.status)
    console.print(table)
    for s in summary.sources:
        for note in s.notes:
            console.print(f"[yellow]note:[/] {s.path}: {note}", highlight=False)
    for s in summary.failed:
        errors.print(f"[bold red]error:[/] {s.error}", highlight=False, soft_wrap=True)
    if summary.failed:
        raise typer.Exit(1)


@command()
def formats() -> None:
    """List the input formats tracekit reads."""
    from tracekit.ingest.registry import readers

    table = Table(title="input formats")
    table.add_column("format")
    table.add_column("tables")
    table.add_column("description")
    for reader in readers():
        table.add_row(reader.format, ", ".join(reader.tables), reader.description)
    console.print(table)

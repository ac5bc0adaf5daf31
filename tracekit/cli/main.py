"""The ``tracekit`` command line: one thin command per verb.

Each command parses its arguments, calls one library function and prints the result. Errors
tracekit raises on purpose become one line on stderr and exit status 2; ``--debug`` shows the
traceback instead.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated

import typer
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
from tracekit.cli.support import command as command_on
from tracekit.cli.support import (
    console,
    errors,
    format_ns,
    format_span,
    parse_options,
    print_error,
    state,
)

app = typer.Typer(
    name="tracekit",
    help="Find, measure and explain fail-slows in large hybrid-parallel training jobs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
command = functools.partial(command_on, app)
"""Register a top-level command (see :func:`tracekit.cli.support.command`)."""


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
    state["debug"] = debug


@command()
def info(dataset: Annotated[Path, typer.Argument(help="Dataset folder.")]) -> None:
    """Summarise a dataset: its tables, rows, time span, ranks, hosts and sources."""
    from tracekit.core.dataset import open_dataset

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
    _print_rank_gpus(opened)


RANK_ROWS_SHOWN = 16
"""``tracekit info`` lists each rank's GPU up to this many ranks, and summarises beyond."""


def _print_rank_gpus(opened) -> None:
    """Which physical GPU each rank runs on (NCCL Init lines matched to DCGM by bus id)."""
    from tracekit.core.identity import rank_gpus

    ranks = rank_gpus(opened.table("comms").collect(), opened.table("gpu_metrics"))
    if ranks.is_empty():
        return
    if ranks.height > RANK_ROWS_SHOWN:
        origin = ", ".join(f"{n} by {how}" for how, n in
                           ranks.group_by("gpu_from").len().sort("gpu_from").iter_rows()
                           if how is not None)
        console.print(f"GPUs of {ranks.height} ranks on {ranks['host'].n_unique()} hosts: "
                      f"{origin or 'not named by NCCL Init lines'}")
        return
    table = Table(title="ranks")
    for column in ("rank", "host", "GPU", "bus id", "UUID", "GPU from"):
        table.add_column(column, justify="right" if column in ("rank", "GPU") else "left")
    for row in ranks.iter_rows(named=True):
        table.add_row(*("" if v is None else str(v) for v in row.values()))
    console.print(table)


ClusterOption = Annotated[str | None, typer.Option(
    "--cluster", help="Run partitions on Dask: local, local:N (N workers) or tcp://HOST:PORT "
    "(a running scheduler); see docs/scale-out.md.")]


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
    cluster: ClusterOption = None,
) -> None:
    """Normalise cluster dumps into a Parquet dataset (re-running is idempotent)."""
    from tracekit.core.parallel import open_executor
    from tracekit.ingest.pipeline import ingest as run_ingest

    options = parse_options(option)
    with open_executor(cluster) as executor, Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), DownloadColumn(),
        TransferSpeedColumn(), TextColumn("{task.fields[rows]:,} rows"), TimeRemainingColumn(),
        console=errors, transient=True,
    ) as progress:
        task = progress.add_task("ingest", total=None, rows=0)

        def advance(name: str, bytes_done: int, rows: int) -> None:
            progress.update(task, description=Path(name.split("!")[-1]).name,
                            advance=bytes_done, rows=progress.tasks[task].fields["rows"] + rows)

        summary = run_ingest(sources, output, job=job, format=format, options=options,
                             progress=advance, executor=executor)
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
        print_error(s.error)
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


@command()
def iterations(
    dataset: Annotated[Path, typer.Argument(help="Dataset folder with a collectives table.")],
    compare: Annotated[str, typer.Option(
        "--compare", help="Iterations source to measure against; the framework's own times "
        "are compared whenever the dataset has them.")] = "framework",
    threshold: Annotated[float, typer.Option(help="ACF threshold M of the published baseline "
                                             "(reported when it disagrees with the period).")]
    = 0.95,
    cluster: ClusterOption = None,
) -> None:
    """Reconstruct per-rank iteration times from collective calls (source acf) and print a
    summary of the job."""
    from tracekit.core.dataset import open_dataset
    from tracekit.core.parallel import open_executor
    from tracekit.iterations import compare_dataset, reconstruct_dataset

    opened = open_dataset(dataset)
    with open_executor(cluster) as executor:
        result = reconstruct_dataset(opened, threshold, executor)
    ranks = result.ranks
    timed = [r for r in ranks if r.iterations]
    periods = ", ".join(f"{calls:,} calls on {count} rank{'s' if count > 1 else ''}"
                        for calls, count in result.periods.items()) or "none found"
    say = functools.partial(console.print, highlight=False, soft_wrap=True)
    say(f"job {opened.job}: {len(ranks)} rank{'s' if len(ranks) > 1 else ''}; period {periods}")
    if timed:
        counts = sorted(r.iterations for r in timed)
        recovered = sum(r.recovered for r in timed) / sum(counts)
        means = [r.mean_s for r in timed if r.mean_s is not None]
        say(
            f"iterations per rank {counts[0]:,}" + (f"..{counts[-1]:,}" if counts[-1] != counts[0]
                                                   else "")
            + f", {recovered:.1%} with times"
            + (f", mean {sum(means) / len(means):.4f} s" if means else ""))
        say(f"pattern (rank {timed[0].rank}): {timed[0].pattern}")
    if result.baseline_note:
        say(f"note: {result.baseline_note}")
    for warning in result.warnings:
        say(f"[yellow]warning:[/] {warning}")
    comparison = compare_dataset(opened, compare, missing_ok=compare == "framework")
    if comparison is None:
        return
    median, p99 = comparison.rel_error_quantile(0.5), comparison.rel_error_quantile(0.99)
    say(f"vs {compare}: {comparison.matched:,} matched, {comparison.missed:,} missed, "
        f"{comparison.extra:,} extra; median relative error {median:.4%}, p99 {p99:.4%}"
        if median is not None else f"vs {compare}: no iterations could be paired")


@command("export-whatif")
def export_whatif(
    dataset: Annotated[Path, typer.Argument(help="Dataset folder with op_traces.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Folder to write into.")],
    trial: Annotated[str | None, typer.Option(help="Trial name in the file names (default: the "
                                              "ingested meta's, else the job id).")] = None,
) -> None:
    """Write op traces as the ByteDance what-if analyser's trace-*.parquet and meta-*.yaml."""
    from tracekit.ingest.whatif import export_whatif as run_export

    for path in run_export(dataset, output, trial=trial):
        console.print(f"wrote {path}", highlight=False)


def _episode_summary(episodes, title: str) -> Table:
    """Episodes as the terminal shows them: times, slowdown, culprit, cause."""
    table = Table(title=title)
    for column in ("#", "start (UTC)", "duration", "slowdown", "JCT", "culprit", "cause"):
        table.add_column(column, justify="right" if column in ("#", "duration", "slowdown",
                                                                "JCT") else "left")
    for row in episodes.iter_rows(named=True):
        table.add_row(str(row["episode"]), format_ns(row["t_start_ns"]),
                      "-" if row["duration_s"] is None else f"{row['duration_s']:.0f} s",
                      "-" if row["slowdown"] is None else f"x{row['slowdown']:.2f}",
                      "-" if row["jct_slowdown"] is None else f"{row['jct_slowdown']:.2%}",
                      row["target"] or "-", row["cause"] or "not attributed")
    return table


def _frame_table(frame, title: str) -> Table:
    table = Table(title=title)
    for column in frame.columns:
        table.add_column(column)
    for row in frame.iter_rows():
        table.add_row(*("-" if v is None else str(v) for v in row))
    return table


@command()
def analyze(
    dump: Annotated[list[Path], typer.Argument(help="Files, folders or .tar(.gz) archives of "
                                               "one job.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Dataset folder to write.")],
    job: Annotated[str | None, typer.Option(help="Job id (default: the dataset folder name).")]
    = None,
    report: Annotated[Path | None, typer.Option(help="Report folder (default: OUTPUT/report).")]
    = None,
    detector: Annotated[str | None, typer.Option(help="Detector whose episodes to show "
                                                 "(default: the job verdict, bocd+b+peers).")]
    = None,
    cluster: ClusterOption = None,
) -> None:
    """Ingest, reconstruct iterations, detect, attribute and report in one go."""
    from tracekit.core.parallel import open_executor
    from tracekit.pipeline.analyze import STAGES
    from tracekit.pipeline.analyze import analyze as run_analyze

    with open_executor(cluster) as executor, Progress(
            TextColumn("[bold]{task.description:<10}"), BarColumn(),
            TextColumn("{task.fields[detail]}"), console=errors) as progress:
        tasks = {s: progress.add_task(s, total=1, detail="waiting") for s in STAGES}

        def advance(stage: str, event: str, info: dict) -> None:
            if event == "start":
                progress.update(tasks[stage], total=None, detail="running")
            elif event == "advance":
                progress.update(tasks[stage], detail=f"{Path(info['source']).name}")
            else:
                progress.update(tasks[stage], total=1, completed=1,
                                detail=f"{info['status']}: {info['detail']}")

        result = run_analyze(dump, output, job=job, report_dir=report, detector=detector,
                             progress=advance, executor=executor)
    for failure in result.failed_sources:
        errors.print(f"[yellow]skipped source:[/] {failure}", highlight=False, soft_wrap=True)
    if not any(s.name == "detect" and s.status == "done" for s in result.stages):
        console.print("detection did not run: no verdict")
    elif result.episodes.height == 0:
        console.print(f"verdict ({result.detector}): none")
    else:
        console.print(_episode_summary(result.episodes, f"fail-slow episodes ({result.detector})"))
    console.print(f"dataset: {result.dataset}\nreport:  {result.report_html}", highlight=False,
                  soft_wrap=True)


@command()
def report(
    source: Annotated[Path, typer.Argument(help="A dataset folder, or a corpus folder of jobs.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Report folder to write.")],
    detector: Annotated[str | None, typer.Option(help="Detector whose episodes to show "
                                                 "(default: the job verdict, bocd+b+peers).")]
    = None,
    work: Annotated[Path | None, typer.Option(help="Where raw corpus jobs are analysed "
                                              "(default: build/corpus/NAME).")] = None,
    export: Annotated[bool, typer.Option(help="Also write OUTPUT/export/: a Perfetto / Chrome "
                                         "trace, episode, evidence and accuracy tables as CSV "
                                         "and Parquet, one JSON summary per job.")] = True,
) -> None:
    """Write an HTML page and a Markdown report with figures for a job or a corpus."""
    from tracekit.pipeline.corpus import build_report

    written = build_report(source, output, detector=detector, work=work, export=export)
    console.print(f"report: {written.html}\nmarkdown: {written.markdown} "
                  f"({len(written.figures)} figure files)", highlight=False, soft_wrap=True)
    if export:
        console.print(f"exports: {written.folder / 'export'}", highlight=False, soft_wrap=True)


@command("eval")
def eval_command(
    corpus: Annotated[Path, typer.Argument(help="Labeled corpus: a folder of jobs.")],
    work: Annotated[Path | None, typer.Option(help="Where raw jobs are analysed "
                                              "(default: build/corpus/NAME).")] = None,
    baseline: Annotated[Path | None, typer.Option(help="Fail (exit 1) when a metric is worse "
                                                  "than this baseline beyond its tolerance.")]
    = None,
    update_baseline: Annotated[Path | None, typer.Option(
        "--update-baseline", help="Write the measured metrics as the new baseline file.")] = None,
    attribute: Annotated[bool, typer.Option(help="Attribute episodes (culprit and cause "
                                            "accuracy).")] = True,
) -> None:
    """Accuracy, FPR, FNR, culprit and cause accuracy per category and detector; episode
    precision, recall, delay."""
    from tracekit.detect.verdict import VERDICT_DETECTOR
    from tracekit.evaluate.scoring import (
        corpus_changed,
        improvements,
        read_baseline,
        regressions,
        write_baseline,
    )
    from tracekit.pipeline.corpus import evaluate_corpus
    from tracekit.report.tables import (
        cause_accuracy_table,
        episode_accuracy_table,
        job_level_table,
    )

    work = work or Path("build") / "corpus" / corpus.name
    expected = read_baseline(baseline) if baseline else None
    _, result = evaluate_corpus(corpus, work, include_detectors=list(
        expected["metrics"]["job"]) if expected else None, attribute=attribute)
    console.print(_frame_table(job_level_table(result.job_table, result.episode_table),
                               "job level"))
    console.print(_frame_table(episode_accuracy_table(result.episode_table), "episode level"))
    console.print(_frame_table(cause_accuracy_table(result.cause_table, VERDICT_DETECTOR),
                               f"by labeled cause ({VERDICT_DETECTOR})"))
    if update_baseline:
        write_baseline(update_baseline, result.metrics(), corpus)
        console.print(f"baseline written: {update_baseline}", highlight=False, soft_wrap=True)
    if expected:
        changed = corpus_changed(expected, corpus)
        if changed:
            errors.print(f"[yellow]warning:[/] {changed}", highlight=False, soft_wrap=True)
        for better in improvements(result.metrics(), expected):
            console.print(f"[green]improved:[/] {better} (lock it in with --update-baseline)",
                          highlight=False, soft_wrap=True)
        worse = regressions(result.metrics(), expected)
        for regression in worse:
            errors.print(f"[bold red]regression:[/] {regression}", highlight=False,
                         soft_wrap=True)
        if worse:
            raise typer.Exit(1)
        console.print(f"no regression against {baseline}", highlight=False, soft_wrap=True)


@command()
def detect(
    dataset: Annotated[Path, typer.Argument(help="Dataset folder with an iterations table.")],
    detector: Annotated[list[str] | None, typer.Option(
        "--detector", help="Detector (repeatable; default: window, bocd, bocd+v, bocd+b, "
        "peers).")]
    = None,
    param: Annotated[list[str] | None, typer.Option(
        "--param", help="Detector parameter KEY=VALUE (repeatable).")] = None,
    cluster: ClusterOption = None,
) -> None:
    """Find change points and fail-slow episodes; writes the events and episodes tables."""
    import polars as pl

    from tracekit.core.parallel import open_executor
    from tracekit.detect import detect_dataset

    with open_executor(cluster) as executor:
        found = detect_dataset(dataset, detector, parse_options(param), executor=executor)
    for name in found.episodes["detector"].unique(maintain_order=True).to_list():
        console.print(_episode_summary(found.episodes.filter(pl.col("detector") == name),
                                       f"fail-slow episodes ({name})"))
    console.print(f"{found.events.height} change events, {found.episodes.height} episodes "
                  f"written to {dataset}", highlight=False)
    if detector is None:
        from tracekit.detect.verdict import shown_episodes

        name, verdict = shown_episodes(found.episodes)
        console.print(f"verdict ({name}): {verdict.height or 'none'} "
                      f"{'episode(s)' if verdict.height else ''}".rstrip(), highlight=False)


@command()
def changepoints(
    file: Annotated[Path, typer.Argument(help="CSV, Parquet, JSON list or TCPD JSON file.")],
    column: Annotated[str | None, typer.Option(help="Column (or TCPD series label).")] = None,
    detector: Annotated[str, typer.Option(
        help="Detector name (`consensus`: PELT and BOCD agree; `bocd-map` is TCPD's BOCPD).")]
    = "consensus",
    param: Annotated[list[str] | None, typer.Option(
        "--param", help="Detector parameter KEY=VALUE (repeatable).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
) -> None:
    """Print the change points (0-based row indices) of any numeric series; several numeric
    columns are one multivariate series unless --column picks one."""
    import json

    from tracekit.detect import make_detector
    from tracekit.detect.series_file import file_changepoints

    found = file_changepoints(file, make_detector(detector, **parse_options(param)), column)
    # plain stdout: rich wraps long lines at the terminal width (80 columns in a pipe)
    print(json.dumps(found) if as_json else "\n".join(map(str, found)))


from tracekit.cli.synth import synth_app  # noqa: E402  (sub-app: tracekit synth job|corpus)

app.add_typer(synth_app, name="synth")

from tracekit.cli.validate import validate_app  # noqa: E402  (sub-app: tracekit validate gemm|p2p)

app.add_typer(validate_app, name="validate")


@command()
def attribute(
    dataset: Annotated[Path, typer.Argument(help="Dataset folder with episodes (tracekit detect) "
                                            "or op traces.")],
    cluster: ClusterOption = None,
) -> None:
    """Name each episode's culprit (rank, GPU, host, link) and cause, with the evidence."""
    from tracekit.attribute import attribute_dataset
    from tracekit.core.parallel import open_executor

    with open_executor(cluster) as executor:
        result = attribute_dataset(dataset, executor)
    for row in result.episodes.iter_rows(named=True):
        console.print(f"[bold]{row['detector']} episode {row['episode']}[/]: {row['kind']}, "
                      f"{row['cause']}, {row['target'] or 'no culprit'} (confidence "
                      f"{row['confidence']:.2f}, JCT +{row['jct_slowdown'] or 0:.1%})\n  "
                      f"{row['evidence']}", highlight=False, soft_wrap=True)
    if result.stages is not None:
        console.print(f"[bold]pipeline stages[/]: {result.stages.cause}, "
                      f"{result.stages.target or 'no culprit'}\n  {result.stages.evidence}",
                      highlight=False, soft_wrap=True)
    if result.episodes.is_empty() and result.stages is None:
        console.print("no episodes to attribute (run `tracekit detect` first)")

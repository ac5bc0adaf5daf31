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

from tracekit import __version__
from tracekit.cli.support import (
    JsonOption,
    console,
    errors,
    fail,
    format_ns,
    format_span,
    grouped_messages,
    new_app,
    parse_options,
    plural,
    print_error,
    print_json,
    say,
    show_build_notices,
    show_table,
    state,
    working,
)
from tracekit.cli.support import command as command_on

app = new_app(
    name="tracekit",
    help="Find, measure and explain fail-slows in large hybrid-parallel training jobs.",
    no_args_is_help=True,
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
    show_build_notices()


@command()
def info(dataset: Annotated[Path, typer.Argument(help="Dataset folder.")],
         as_json: JsonOption = False) -> None:
    """Summarise a dataset: its tables, rows, time span, ranks, hosts and sources."""
    from tracekit.core.dataset import open_dataset, stale_stages
    from tracekit.core.identity import rank_gpus
    from tracekit.ingest.hosts import hosts_without_ranks

    opened = open_dataset(dataset)
    stale = stale_stages(opened)
    manifest = opened.manifest
    sources = manifest["sources"]
    quarantined = sum(s["quarantined"] for s in sources)
    skipped = sum(s["skipped"] for s in sources)
    ranks = rank_gpus(opened.table("comms").collect(), opened.table("gpu_metrics"))
    warnings = hosts_without_ranks(opened)
    if as_json:
        print_json({"dataset": str(dataset), "job": opened.job, "tables": manifest["tables"],
                    "sources": len(sources), "quarantined_lines": quarantined,
                    "skipped_lines": skipped, "tracekit_version": manifest.get("tracekit_version"),
                    "ranks": ranks.to_dicts(), "stale": stale, "warnings": warnings})
        return
    show_table(f"dataset {dataset} — job {opened.job}",
               ("table", "rows", "time span", "ranks", "hosts"),
               ([name, f"{stats['rows']:,}",
                 format_span(stats["t_min_ns"], stats["t_max_ns"]) if "t_min_ns" in stats else "-",
                 stats.get("ranks") or "-", stats.get("hosts") or "-"]
                for name, stats in manifest["tables"].items()),
               right=("rows", "ranks", "hosts"))
    say(f"{plural(len(sources), 'source')}, {plural(quarantined, 'quarantined line')}, "
        f"{plural(skipped, 'skipped line')}; tracekit {manifest.get('tracekit_version')}"
        + (" (`tracekit quarantine` lists them)" if quarantined else ""))
    for stage, why in stale.items():
        say(f"[yellow]stale:[/] {stage}: {why}")
    _print_rank_gpus(ranks)
    for warning in warnings:
        say(f"[yellow]warning:[/] {warning}")


RANK_ROWS_SHOWN = 16
"""``tracekit info`` lists each rank's GPU up to this many ranks, and summarises beyond."""


def _print_rank_gpus(ranks) -> None:
    """Which physical GPU each rank runs on (NCCL Init lines matched to DCGM by bus id)."""
    if ranks.is_empty():
        return
    if ranks.height > RANK_ROWS_SHOWN:
        origin = ", ".join(f"{n} by {how}" for how, n in
                           ranks.group_by("gpu_from").len().sort("gpu_from").iter_rows()
                           if how is not None)
        say(f"GPUs of {ranks.height} ranks on {ranks['host'].n_unique()} hosts: "
            f"{origin or 'not named by NCCL Init lines'}")
        return
    show_table("ranks", ("rank", "host", "GPU", "bus id", "UUID", "GPU from"), ranks.iter_rows(),
               right=("rank", "GPU"))


QUARANTINE_SHOWN = 50
"""``tracekit quarantine`` prints this many bad lines unless ``--all`` (JSON has them all)."""


@command()
def quarantine(
    dataset: Annotated[Path, typer.Argument(help="Dataset folder.")],
    show_all: Annotated[bool, typer.Option("--all", help="Every line, not only the first "
                                           f"{QUARANTINE_SHOWN}.")] = False,
    as_json: JsonOption = False,
) -> None:
    """List the input lines ingest could not parse, with file, line number and reason."""
    import polars as pl

    from tracekit.core.dataset import open_dataset

    lines = open_dataset(dataset).table("quarantine").sort("source", "line_no").collect()
    if as_json:
        print_json(lines.to_dicts())
        return
    shown = lines if show_all else lines.head(QUARANTINE_SHOWN)
    for row in shown.with_columns(pl.col("raw").str.slice(0, 120)).iter_rows(named=True):
        print(f"{row['source']}:{row['line_no']}: {row['reason']}: {row['raw']}")
    say(f"{plural(lines.height, 'quarantined line')}"
        + (f" ({shown.height} shown; --all for every one)" if shown.height < lines.height
           else ""))


ClusterOption = Annotated[str | None, typer.Option(
    "--cluster", help="Run partitions on Dask: local, local:N (N workers) or tcp://HOST:PORT "
    "(a running scheduler); see docs/scale-out.md.")]


AllDetectorsOption = Annotated[bool, typer.Option(
    "--all-detectors", help="Also show each detector's episodes, to compare them with the "
    "verdict's.")]

FormatOption = Annotated[str | None, typer.Option(
    "--format", help="Force a format instead of sniffing; see `tracekit formats`.")]

ReaderOptions = Annotated[list[str] | None, typer.Option(
    "--option", help="Reader option KEY=VALUE (repeatable).")]


@command()
def ingest(
    sources: Annotated[list[Path], typer.Argument(help="Files, folders or .tar(.gz) archives.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Dataset folder to write.")],
    job: Annotated[str | None, typer.Option(help="Job id (default: the dataset folder name); "
                                            "picks one job of a dump that holds several.")]
    = None,
    format: FormatOption = None,
    option: ReaderOptions = None,
    cluster: ClusterOption = None,
    as_json: JsonOption = False,
) -> None:
    """Normalise cluster dumps into a Parquet dataset (re-running is idempotent)."""
    from tracekit.core.dataset import MANIFEST
    from tracekit.core.parallel import open_executor
    from tracekit.ingest.pipeline import ingest as run_ingest

    options = parse_options(option)
    _check_options(options, format)
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
    try:
        _print_ingest(summary, format, as_json)
    finally:  # a re-ingest leaves an analysed dataset's results out of date
        if (summary.dataset / MANIFEST).is_file():
            _say_stale(summary.dataset)


def _check_options(options: dict[str, str], forced: str | None) -> None:
    """Refuse an ``--option`` key that the forced format (or, sniffing, every format) ignores:
    a misspelt key would otherwise be dropped silently. The limits of
    :class:`~tracekit.ingest.limits.Limits` apply to every format."""
    from dataclasses import fields

    from tracekit.core.errors import TracekitError
    from tracekit.ingest.limits import Limits
    from tracekit.ingest.registry import reader_for_format, readers

    candidates = [reader_for_format(forced)] if forced else readers()
    limits = {field.name for field in fields(Limits)}
    accepted = {key for reader in candidates for key in reader.options} | limits
    for key in options:
        if key not in accepted:
            readers_of = [r.format for r in readers() if key in r.options]
            raise TracekitError(
                f"--option {key}: " + (f"format {forced} does not use it" if forced else
                                        "no format uses it")
                + (f" (used by {', '.join(readers_of)})" if readers_of else "")
                + f"; accepted keys: {', '.join(sorted(accepted - limits)) or 'none'}, and the "
                "limits (docs/collective-formats.md)")


def _print_ingest(summary, forced: str | None, as_json: bool) -> None:
    """The ingest summary by format, each note and error once; exit 1 when some sources failed,
    2 when nothing was ingested (a run that read nothing is not a success)."""
    import dataclasses

    empty = [s for s in summary.sources if s.status == "ingested" and not s.total_rows]
    if forced:
        for s in empty:
            s.notes.append(f"--format {forced} read no rows from it: is it a {forced} file? "
                           "(leave --format out to sniff the format)")
    read = [s for s in summary.sources if s.status != "failed" and s not in empty]
    if as_json:
        print_json({"dataset": str(summary.dataset),
                    "sources": [dataclasses.asdict(s) for s in summary.sources]})
    else:
        _print_ingest_table(summary)
    _print_source_messages(summary)
    if not read:
        found = (f"none of its {plural(len(summary.sources), 'source')} held rows"
                 if summary.sources else "no files under the given paths")
        print_error(f"{summary.dataset}: nothing was ingested ({found}); check the dump holds "
                    "files tracekit reads (`tracekit formats`)")
        raise typer.Exit(2)
    mixed = _mixed_jobs(summary.dataset)
    if mixed:
        print_error(mixed)
        raise typer.Exit(2)
    if summary.failed or (forced and empty):
        raise typer.Exit(1)


def _print_source_messages(summary) -> None:
    """Ingest's notes and per-source errors on stderr, each distinct message once with a count
    (``ingest`` and ``analyze`` both show them)."""
    for message, count, paths in grouped_messages((s.path, note) for s in summary.sources
                                                  for note in s.notes):
        errors.print(f"[yellow]note:[/] {_grouped(message, count, paths)}", highlight=False,
                     soft_wrap=True)
    for message, count, paths in grouped_messages((s.path, s.error) for s in summary.failed):
        print_error(_grouped(message, count, paths))


def _mixed_jobs(path: Path) -> str | None:
    """Why the dataset looks like two jobs merged: one rank's calls from two sources of one
    format at overlapping times (a restarted job's logs follow each other; two jobs' overlap),
    which would otherwise show up later as a spurious imbalance. None when it does not."""
    import polars as pl

    from tracekit.core.dataset import open_dataset, source_record_key

    opened = open_dataset(path)
    by_key = {source_record_key(s): s for s in opened.manifest["sources"]}
    listed = opened.manifest["parts"].get("collectives", {})
    parts = pl.DataFrame({"part": [str(opened.path / "collectives" / f) for f in listed],
                          "owner": list(listed.values())},
                         schema={"part": pl.String, "owner": pl.String})
    parts = parts.with_columns(rank=pl.col("part").str.extract(r"rank=(-?\d+)"))
    for (rank,), group in parts.group_by("rank", maintain_order=True):
        if group["owner"].n_unique() < 2:
            continue
        spans = {}
        for owner, files in group.group_by("owner").agg("part").iter_rows():
            source = by_key.get(owner)
            span = pl.scan_parquet(files).select(
                pl.col("t_start_ns").min().alias("lo"), pl.col("t_start_ns").max().alias("hi")
            ).collect().row(0)
            if source is not None and None not in span:
                spans.setdefault(source["format"], []).append((span, source["path"]))
        for runs in spans.values():
            runs.sort()
            for (first, a), (second, b) in zip(runs, runs[1:], strict=False):
                if second[0] <= first[1]:
                    return (f"{path}: rank {rank} has calls from {a} and {b} at the same time: "
                            "they look like two jobs; ingest each job into its own dataset "
                            "(-o), after removing this one")
    return None


def _grouped(message: str, count: int, paths: list[str]) -> str:
    if count == 1:
        return f"{paths[0]}: {message}"
    return f"{message} ({count} sources, e.g. {', '.join(paths)})"


def _print_ingest_table(summary) -> None:
    """One row per format (a 300-file dump is a few lines) and a total."""
    import polars as pl

    frame = pl.DataFrame(
        [{"format": s.format or "?", "status": s.status, "rows": s.total_rows,
          "skipped": s.skipped, "quarantined": s.quarantined, "t_min_ns": s.t_min_ns,
          "t_max_ns": s.t_max_ns} for s in summary.sources],
        schema={"format": pl.String, "status": pl.String, "rows": pl.Int64,
                "skipped": pl.Int64, "quarantined": pl.Int64, "t_min_ns": pl.Int64,
                "t_max_ns": pl.Int64})
    sums = [pl.len().alias("sources"), pl.col("rows", "skipped", "quarantined").sum(),
            pl.col("t_min_ns").min(), pl.col("t_max_ns").max(),
            *(pl.col("status").filter(pl.col("status") == status).len().alias(status)
              for status in ("ingested", "unchanged", "failed"))]
    groups = frame.group_by("format").agg(sums).sort("format")
    total = frame.select(pl.lit("total").alias("format"), *sums)
    show_table(f"ingested into {summary.dataset}",
               ("format", "sources", "unchanged", "failed", "rows", "skipped", "quarantined",
                "time span"),
               ([row["format"], f"{row['sources']:,}", f"{row['unchanged']:,}",
                 f"{row['failed']:,}", f"{row['rows']:,}", f"{row['skipped']:,}",
                 f"{row['quarantined']:,}", format_span(row["t_min_ns"], row["t_max_ns"])
                 if row["ingested"] else "-"]
                for row in pl.concat([groups, total]).iter_rows(named=True)),
               right=("sources", "unchanged", "failed", "rows", "skipped", "quarantined"))


@command()
def formats(as_json: JsonOption = False) -> None:
    """List the input formats tracekit reads."""
    from tracekit.ingest.registry import readers

    found = [{"format": r.format, "tables": list(r.tables), "description": r.description}
             for r in readers()]
    if as_json:
        print_json(found)
        return
    show_table("input formats", ("format", "tables", "description"),
               ([f["format"], " + ".join(f["tables"]), f["description"]] for f in found))


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
    as_json: JsonOption = False,
) -> None:
    """Reconstruct per-rank iteration times from collective calls (source acf) and print a
    summary of the job."""
    import dataclasses

    from tracekit.core.dataset import open_dataset
    from tracekit.core.parallel import open_executor
    from tracekit.iterations import compare_dataset, reconstruct_dataset

    opened = open_dataset(dataset)
    with open_executor(cluster) as executor, working("reconstructing iterations"):
        result = reconstruct_dataset(opened, threshold, executor)
    reconstructed = result.iterations.height > 0
    comparison = compare_dataset(opened, compare, missing_ok=compare == "framework") \
        if reconstructed else None
    ranks = result.ranks
    if as_json:
        print_json({"job": opened.job, "periods": result.periods, "warnings": result.warnings,
                    "baseline_note": result.baseline_note,
                    "ranks": [dataclasses.asdict(r) for r in ranks],
                    "comparison": None if comparison is None else {
                        "reference": compare, "matched": comparison.matched,
                        "missed": comparison.missed, "extra": comparison.extra,
                        "median_rel_error": comparison.rel_error_quantile(0.5),
                        "p99_rel_error": comparison.rel_error_quantile(0.99)}})
        return
    timed = [r for r in ranks if r.iterations]
    periods = ", ".join(f"{calls:,} calls on {plural(count, 'rank')}"
                        for calls, count in result.periods.items()) or "none found"
    say(f"job {opened.job}: {plural(len(ranks), 'rank')}; period {periods}")
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
    if not reconstructed:
        say(f"[yellow]no iterations reconstructed:[/] no rank of {dataset} repeats a pattern of "
            "collective calls; `tracekit detect` uses the framework's own iteration times "
            "instead if a Megatron or MLPerf log was ingested")
    _say_stale(dataset)
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
    as_json: JsonOption = False,
) -> None:
    """Write op traces as the ByteDance what-if analyser's trace-*.parquet and meta-*.yaml."""
    from tracekit.ingest.whatif import export_whatif as run_export

    written = [str(path) for path in run_export(dataset, output, trial=trial)]
    if as_json:
        print_json({"written": written})
        return
    for path in written:
        say(f"wrote {path}")


def _culprit_cell(row: dict) -> str:
    """The attributed culprit, else the ranks a peer comparison found (its own culprit; its
    episodes, also as the verdict's, are those with ``persistent`` set)."""
    from tracekit.detect.peers import NAME as PEER_DETECTOR

    if row["target"]:
        return row["target"]
    by_peers = row["detector"] == PEER_DETECTOR or row.get("persistent") is not None
    return f"rank(s) {row['ranks']}" if by_peers and row["ranks"] else "-"


def _axis(dataset: Path):
    """How the dataset's iterations are told (:mod:`tracekit.report.series`): read once per
    command, whatever number of episode tables it shows."""
    from tracekit.core.dataset import open_dataset
    from tracekit.report.series import dataset_axis

    return dataset_axis(open_dataset(dataset))


def _show_episodes(episodes, title: str, axis) -> None:
    """Episodes as the terminal shows them: times, slowdown, culprit, cause (never cut); by
    iteration, without seconds or a JCT share, where the series has no clock, no unit or gaps
    (``axis``, from :func:`_axis`)."""
    start = "start (UTC)" if axis.clock else "start"
    show_table(title, ("#", start, "duration", "slowdown", "JCT", "culprit", "cause"),
               ([row["episode"], format_ns(row["t_start_ns"]) if row["t_start_ns"] is not None
                 else axis.at(row["start_iteration"], None),
                 f"{axis.counted(row)} {axis.noun()}s" if row["duration_s"] is None
                 or not axis.whole_job else f"{row['duration_s']:.0f} s",
                 "-" if row["slowdown"] is None else f"x{row['slowdown']:.2f}",
                 "-" if row["jct_slowdown"] is None or not axis.whole_job
                 else f"{row['jct_slowdown']:.2%}",
                 _culprit_cell(row), row["cause"] or "not attributed"]
                for row in episodes.iter_rows(named=True)),
               right=("#", "duration", "slowdown", "JCT"))


def _show_frame(frame, title: str) -> None:
    show_table(title, frame.columns, frame.iter_rows())


def _say_time_split(verdict) -> None:
    """The job verdict of a profiler trace's time split (analyze and attribute print it)."""
    if verdict is not None:
        say(f"[bold]time split[/]: {verdict.cause}, {verdict.target or 'no culprit'}\n  "
            f"{verdict.evidence}")


def _time_split_json(verdict) -> dict | None:
    return None if verdict is None else {
        k: getattr(verdict, k) for k in ("kind", "cause", "target", "confidence", "evidence")}


@command()
def analyze(
    dump: Annotated[list[Path], typer.Argument(help="Files, folders or .tar(.gz) archives of "
                                               "one job.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Dataset folder to write.")],
    job: Annotated[str | None, typer.Option(help="Job id (default: the dataset folder name); "
                                            "picks one job of a dump that holds several.")]
    = None,
    report: Annotated[Path | None, typer.Option(help="Report folder (default: OUTPUT/report).")]
    = None,
    detector: Annotated[str | None, typer.Option(help="Detector whose episodes to show "
                                                 "(default: the job verdict, bocd+b+peers).")]
    = None,
    format: FormatOption = None,
    option: ReaderOptions = None,
    all_detectors: AllDetectorsOption = False,
    cluster: ClusterOption = None,
    as_json: JsonOption = False,
) -> None:
    """Ingest, reconstruct iterations, detect, attribute and report in one go."""
    import dataclasses

    from tracekit.core.parallel import open_executor
    from tracekit.pipeline.analyze import STAGES, NothingIngested
    from tracekit.pipeline.analyze import analyze as run_analyze

    options = parse_options(option)
    _check_options(options, format)
    nothing = None
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

        try:
            result = run_analyze(dump, output, job=job, report_dir=report, detector=detector,
                                 progress=advance, executor=executor, format=format,
                                 options=options)
        except NothingIngested as error:
            progress.live.transient = True  # no stages left "waiting" above the error
            nothing = error
    if nothing is not None:
        _print_source_messages(nothing.summary)
        raise nothing
    _print_source_messages(result.ingest)
    detected = any(s.name == "detect" and s.status == "done" for s in result.stages)
    if as_json:
        print_json({"dataset": str(result.dataset), "report": result.report_html,
                    "stages": [dataclasses.asdict(s) for s in result.stages],
                    "failed_sources": result.failed_sources, "detector": result.detector,
                    "notes": [{"source": s.path, "note": note} for s in result.ingest.sources
                              for note in s.notes],
                    "episodes": result.episodes.to_dicts() if detected else None,
                    "time_split": _time_split_json(result.time_split)})
    elif not detected:
        detect_stage = next(s for s in result.stages if s.name == "detect")
        say(f"no verdict: detection did not run ({detect_stage.detail}); "
            f"`tracekit info {result.dataset}` shows what was ingested")
    else:
        axis = _axis(result.dataset)
        if all_detectors:
            _show_every_detector(result.dataset, axis)
        _show_verdict(result.episodes, result.detector, axis)
    if not as_json:
        _say_time_split(result.time_split)
        say(f"dataset: {result.dataset}\nreport:  {result.report_html}")
    mixed = _mixed_jobs(result.dataset)
    if mixed:
        fail(mixed, as_json)
    failed = [s for s in result.stages if s.status == "failed"]
    for stage in failed:
        print_error(f"stage {stage.name} failed: {stage.detail}")
    if failed or result.failed_sources:
        raise typer.Exit(1)


def _show_verdict(episodes, name: str, axis) -> None:
    """The episodes of the verdict (or of the detector asked for), or one line saying none."""
    if episodes.is_empty():
        say(f"verdict ({name}): none")
    else:
        _show_episodes(episodes.sort("start_iteration"), f"fail-slow episodes ({name})",
                       axis)


def _show_every_detector(dataset: Path, axis) -> None:
    """Each detector's episodes, one table each, for ``--all-detectors``."""
    import polars as pl

    from tracekit.core.dataset import open_dataset

    episodes = open_dataset(dataset).table("episodes").collect()
    for name in episodes["detector"].unique(maintain_order=True).to_list():
        _show_episodes(episodes.filter(pl.col("detector") == name),
                       f"fail-slow episodes ({name})", axis)


@command()
def report(
    source: Annotated[Path, typer.Argument(help="A dataset folder, or a corpus folder of jobs.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Report folder to write.")],
    detector: Annotated[str | None, typer.Option(help="Detector whose episodes to show "
                                                 "(default: the job verdict, bocd+b+peers).")]
    = None,
    work: Annotated[Path | None, typer.Option(help="Where raw corpus jobs are analysed "
                                              "(default: build/corpus/NAME).")] = None,
    as_json: JsonOption = False,
    export: Annotated[bool, typer.Option(help="Also write OUTPUT/export/: a Perfetto / Chrome "
                                         "trace, episode, evidence and accuracy tables as CSV "
                                         "and Parquet, one JSON summary per job.")] = True,
) -> None:
    """Write an HTML page and a Markdown report with figures for a job or a corpus."""
    from tracekit.core.errors import InputError
    from tracekit.pipeline.corpus import build_report

    if not source.is_dir():
        raise InputError("no such dataset or corpus folder", str(source))
    with working("writing the report"):
        written = build_report(source, output, detector=detector, work=work, export=export)
    exports = written.folder / "export" if export else None
    if as_json:
        print_json({"html": written.html, "markdown": written.markdown,
                    "figures": [str(f) for f in written.figures],
                    "export": None if exports is None else str(exports)})
        return
    say(f"report: {written.html}\nmarkdown: {written.markdown} "
        f"({plural(len(written.figures), 'figure file')})"
        + (f"\nexports: {exports}" if exports is not None else ""))


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
    all_detectors: AllDetectorsOption = False,
    as_json: JsonOption = False,
) -> None:
    """Accuracy, FPR, FNR, culprit and cause accuracy per category and detector; episode
    precision, recall, delay.

    Shows the verdict's rows; --all-detectors (and --json) every detector's. The label format:
    docs/labels.md."""
    import polars as pl

    from tracekit.core.errors import InputError
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

    if not corpus.is_dir():
        raise InputError("no such corpus folder", str(corpus))
    work = work or Path("build") / "corpus" / corpus.name
    expected = read_baseline(baseline) if baseline else None
    # the verdict always has rows: a corpus where nothing was detected scores it as missing
    # every labeled fail-slow instead of printing empty tables
    scored = [VERDICT_DETECTOR, *(expected["metrics"]["job"] if expected else [])]
    with working(f"analysing and scoring the jobs of {corpus}"):
        loaded, result = evaluate_corpus(corpus, work, include_detectors=scored,
                                         attribute=attribute)
    if loaded.episodes.is_empty():
        errors.print(f"[yellow]warning:[/] no detector found an episode in any of the "
                     f"{plural(loaded.jobs.height, 'job')} of {corpus}: every labeled "
                     "fail-slow counts as missed (`tracekit info` on a job's dataset under "
                     f"{work} shows whether it has iterations to detect on)",
                     highlight=False, soft_wrap=True)
    if update_baseline:
        write_baseline(update_baseline, result.metrics(), corpus)
    better = improvements(result.metrics(), expected) if expected else []
    worse = regressions(result.metrics(), expected) if expected else []
    if as_json:
        print_json({**result.as_json(), "metrics": result.metrics(),
                    "improvements": better, "regressions": worse})
    else:
        shown = pl.lit(True) if all_detectors else pl.col("detector") == VERDICT_DETECTOR
        _show_frame(job_level_table(result.job_table, result.episode_table).filter(shown),
                    "job level")
        _show_frame(episode_accuracy_table(result.episode_table).filter(shown), "episode level")
        _show_frame(cause_accuracy_table(result.cause_table, VERDICT_DETECTOR),
                    f"by labeled cause ({VERDICT_DETECTOR})")
        if update_baseline:
            say(f"baseline written: {update_baseline}")
        for improved in better:
            say(f"[green]improved:[/] {improved} (lock it in with --update-baseline)")
    if expected:
        changed = corpus_changed(expected, corpus)
        if changed:
            errors.print(f"[yellow]warning:[/] {changed}", highlight=False, soft_wrap=True)
        for regression in worse:
            errors.print(f"[bold red]regression:[/] {regression}", highlight=False,
                         soft_wrap=True)
        if worse:
            raise typer.Exit(1)
        if not as_json:
            say(f"no regression against {baseline}")


@command()
def detect(
    dataset: Annotated[Path, typer.Argument(help="Dataset folder with an iterations table.")],
    detector: Annotated[list[str] | None, typer.Option(
        "--detector", help="Detector (repeatable; default: window, bocd, bocd+v, bocd+b, "
        "peers).")]
    = None,
    param: Annotated[list[str] | None, typer.Option(
        "--param", help="Detector parameter KEY=VALUE (repeatable).")] = None,
    all_detectors: AllDetectorsOption = False,
    cluster: ClusterOption = None,
    as_json: JsonOption = False,
) -> None:
    """Find change points and fail-slow episodes; writes the events and episodes tables.

    Shows the job's verdict; --all-detectors (or --detector) shows each detector's episodes."""
    import polars as pl

    from tracekit.core.parallel import open_executor
    from tracekit.detect import detect_dataset
    from tracekit.detect.verdict import shown_episodes

    with open_executor(cluster) as executor, working("detecting change points"):
        found = detect_dataset(dataset, detector, parse_options(param), executor=executor)
    name, verdict = shown_episodes(found.episodes) if detector is None else (None, None)
    if as_json:
        print_json({"dataset": str(dataset), "events": found.events.height,
                    "episodes": found.episodes.to_dicts(), "verdict_detector": name,
                    "verdict": None if verdict is None else verdict.to_dicts(),
                    "notes": found.notes})
        return
    for note in found.notes:
        errors.print(f"[dim]note: {note}[/]", highlight=False, soft_wrap=True)
    ran = found.episodes["detector"].unique(maintain_order=True).to_list()
    axis = _axis(dataset)
    if all_detectors or verdict is None:
        for shown in ran:
            _show_episodes(found.episodes.filter(pl.col("detector") == shown),
                           f"fail-slow episodes ({shown})", axis)
    if verdict is not None:
        _show_verdict(verdict, name, axis)
    compared = "" if all_detectors or verdict is None else " (--all-detectors compares them)"
    say(f"written to {dataset}: {plural(found.events.height, 'change event')} and "
        f"{plural(found.episodes.height, 'episode')} of "
        f"{'every detector' if detector is None else ', '.join(detector)}{compared}")
    _say_stale(dataset)


def _say_stale(dataset: Path) -> None:
    """One line per later stage this run left out of date (its results no longer match)."""
    from tracekit.core.dataset import open_dataset, stale_stages

    for stage, why in stale_stages(open_dataset(dataset)).items():
        errors.print(f"[yellow]stale:[/] {stage}: {why}", highlight=False, soft_wrap=True)


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
    all_detectors: AllDetectorsOption = False,
    cluster: ClusterOption = None,
    as_json: JsonOption = False,
) -> None:
    """Name each episode's culprit (rank, GPU, host, link) and cause, with the evidence.

    Shows the verdict's episodes; --all-detectors shows every detector's."""
    import dataclasses

    import polars as pl

    from tracekit.attribute import attribute_dataset
    from tracekit.core.parallel import open_executor
    from tracekit.detect.verdict import VERDICT_DETECTOR, with_verdict

    with open_executor(cluster) as executor, working("attributing episodes"):
        result = attribute_dataset(dataset, executor)
    episodes = with_verdict(result.episodes)
    verdict = episodes.filter(pl.col("detector") == VERDICT_DETECTOR)
    if as_json:
        print_json({"episodes": result.episodes.to_dicts(), "verdict": verdict.to_dicts(),
                    "stages": None if result.stages is None
                    else dataclasses.asdict(result.stages),
                    "time_split": _time_split_json(result.time_split)})
        return
    shown = episodes if all_detectors else verdict
    if shown.height:
        axis = _axis(dataset)
    for row in shown.iter_rows(named=True):
        share = "JCT" if axis.whole_job else "share of logged time"
        say(f"[bold]{row['detector']} episode {row['episode']}[/]: {row['kind']}, "
            f"{row['cause']}, {row['target'] or 'no culprit'} (confidence "
            f"{row['confidence']:.2f}, {share} +{row['jct_slowdown'] or 0:.1%})\n  "
            f"{row['evidence']}")
    if result.stages is not None:
        say(f"[bold]pipeline stages[/]: {result.stages.cause}, "
            f"{result.stages.target or 'no culprit'}\n  {result.stages.evidence}")
    _say_time_split(result.time_split)
    if result.episodes.is_empty() and result.stages is None:
        from tracekit.core.dataset import open_dataset

        detected = "detect" in open_dataset(dataset).manifest.get("build", {})
        say("no episodes to attribute: " + (
            "detection found no fail-slow" if detected else
            f"detection has not run; run `tracekit detect {dataset}`, then this again"))
    elif verdict.is_empty() and not all_detectors and not result.episodes.is_empty():
        say(f"verdict ({VERDICT_DETECTOR}): none; {plural(result.episodes.height, 'episode')} "
            "of other detectors attributed (--all-detectors shows them)")

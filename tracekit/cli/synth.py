"""``tracekit synth job|corpus``: thin commands over tracekit.synth."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated

import typer

from tracekit.cli import support as cli_support

synth_app = cli_support.new_app(name="synth", no_args_is_help=True,
                                help="Generate labeled synthetic jobs in the real raw formats.")


_command = functools.partial(cli_support.command, synth_app)
"""Register a ``synth`` sub-command with the main CLI's error handling."""

MonitoringFilesOption = Annotated[str, typer.Option(
    help="series (one file per exporter and host) or scrapes (one file per scrape named "
         "<exporter>.<host>.<unix_s>, as collectors leave them).")]
DumpLayoutOption = Annotated[str, typer.Option(
    help="Where monitoring files lie: per-host (monitoring/<host>/), flat, per-exporter, "
         "per-day, sysfs-names (hw_counters-<unix_s>.txt in per-host folders), site-names "
         "(a site's own collector names), prometheus-job (one range-query JSON) or federate "
         "(Prometheus /federate pulls per exporter and scrape); see "
         "docs/synth.md.")]
HostPrefixOption = Annotated[str, typer.Option(
    help="Host names are this prefix and a number (gpu01, ...; node- gives node-01).")]
"""Options ``synth job`` and ``synth corpus`` share."""


@_command("job")
def job(
    output: Annotated[Path, typer.Argument(help="Job folder to write (new, empty, or an "
                                                "earlier synthetic job).")],
    layout: Annotated[str, typer.Option(help="Parallel layout, e.g. tp2-dp4-pp1.")] = "tp2-dp2-pp1",
    iterations: Annotated[int, typer.Option(help="Training iterations.")] = 3000,
    inject: Annotated[list[str] | None, typer.Option(
        help="Fail-slow to inject (repeatable), written CAUSE[:TARGET]@START+DURATION and "
             "optionally xSEVERITY[~STEPS], e.g. congestion:link=0-1@900+600x1.4, "
             "thermal@20m+10mx1.3; decoy@300+200x2 is a benign CNP surge that does not slow "
             "the job.")] = None,
    scenario: Annotated[str | None, typer.Option(
        help="Preset scenario (see docs/synth.md): thermal, cpu, congestion, compound, "
             "gradual, blips, decoy, thermal-decoy, clean.")] = None,
    model: Annotated[str, typer.Option(help="Model preset: gpt-tiny, gpt2-7b, gpt2-11b, "
                                            "gpt-175b.")] = "gpt-tiny",
    hardware: Annotated[str, typer.Option(help="GPU and network: a100, h800.")] = "a100",
    gpus_per_host: Annotated[int, typer.Option(help="GPUs per host (4 or 8).")] = 8,
    sequence_parallel: Annotated[bool, typer.Option(help="Megatron --sequence-parallel.")] = False,
    distributed_optimizer: Annotated[bool, typer.Option(
        help="Megatron --use-distributed-optimizer.")] = True,
    collectives: Annotated[str, typer.Option(
        help="Collective log format: hook (tracekit hook CSV per rank), nccl (NCCL_DEBUG=INFO "
             "log per process) or none.")] = "hook",
    nccl_timestamps: Annotated[bool, typer.Option(
        help="NCCL 2.26+ timestamps on INFO lines (NCCL_DEBUG_TIMESTAMP_LEVELS=INFO); without "
             "them an NCCL log has no timing.")] = True,
    monitoring: Annotated[bool, typer.Option(help="Write DCGM, RNIC, IPMI and host CPU "
                                                  "exports.")] = True,
    monitoring_files: MonitoringFilesOption = "series",
    dump_layout: DumpLayoutOption = "per-host",
    host_prefix: HostPrefixOption = "gpu",
    seed: Annotated[int, typer.Option(help="Random seed (same seed, same bytes).")] = 0,
    pack: Annotated[bool, typer.Option(help="Store ranks/, megatron/ and monitoring/ as "
                                            ".tar.xz archives (ingest reads them).")] = False,
    job_id: Annotated[str | None, typer.Option("--job", help="Job id (default: folder name).")]
    = None,
) -> None:
    """Simulate one Megatron job with injected fail-slows and write it in raw formats."""
    import polars as pl
    from rich.console import Console

    from tracekit.synth.corpus import job_spec
    from tracekit.synth.job import generate_job

    spec = job_spec(layout=layout, iterations=iterations, inject=inject or [],
                    scenario=scenario, model=model, hardware=hardware,
                    gpus_per_host=gpus_per_host, sequence_parallel=sequence_parallel,
                    distributed_optimizer=distributed_optimizer, collectives=collectives,
                    nccl_timestamps=nccl_timestamps, monitoring=monitoring,
                    monitoring_files=monitoring_files, dump_layout=dump_layout,
                    host_prefix=host_prefix, seed=seed,
                    job=job_id or output.name)
    result = generate_job(output, spec, pack=pack)
    console = Console()
    truth, labels = result.truth, result.labels
    fail_slows = labels.filter("fail_slow")
    console.print(f"wrote {output}: {spec.layout.world} ranks on {spec.layout.hosts} hosts, "
                  f"{truth.height} iterations over {truth['duration_s'].sum() / 60:.1f} min, "
                  f"{fail_slows.height} fail-slow and {labels.height - fail_slows.height} "
                  "benign episodes", highlight=False)
    for row in labels.filter(pl.col("kind") != "noise").iter_rows(named=True):
        console.print(f"  episode {row['episode']}: {row['cause']} on {row['target']} "
                      f"iterations {row['start_iteration']}-{row['end_iteration']} "
                      f"x{row['severity']:.2f} -> "
                      f"{'fail-slow' if row['fail_slow'] else 'below the label policy'}",
                      highlight=False)


@_command("corpus")
def corpus(
    output: Annotated[Path, typer.Argument(help="Corpus folder (one job folder per job).")],
    preset: Annotated[str, typer.Option(help="probing-1node, probing-4node or large.")]
    = "probing-1node",
    jobs: Annotated[int, typer.Option(help="Number of jobs.")] = 8,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
    iterations: Annotated[int | None, typer.Option(help="Iterations per job (default: the "
                                                        "preset's).")] = None,
    collectives: Annotated[str, typer.Option(help="hook, nccl or none.")] = "hook",
    monitoring_files: MonitoringFilesOption = "series",
    dump_layout: DumpLayoutOption = "per-host",
    host_prefix: HostPrefixOption = "gpu",
    pack: Annotated[bool, typer.Option(help="Store each job's raw folders as .tar.xz "
                                            "archives.")] = False,
    decoys: Annotated[int | None, typer.Option(
        help="Benign CNP surges per job (links the job does not use, single NICs), labeled "
             "noise (default: the preset's, 0).")] = None,
) -> None:
    """Build a labeled corpus shaped like Greyhound's probing campaigns (Table 1 mix)."""
    from rich.console import Console

    from tracekit.synth.corpus import generate_corpus

    summary = generate_corpus(output, preset, jobs, seed, iterations=iterations,
                              collectives=collectives, pack=pack, decoys=decoys,
                              monitoring_files=monitoring_files, dump_layout=dump_layout,
                              host_prefix=host_prefix)
    Console().print(f"wrote {summary.height} jobs to {output}", highlight=False)
    for row in summary.group_by("category").len().sort("category").iter_rows():
        Console().print(f"  {row[0]}: {row[1]}", highlight=False)

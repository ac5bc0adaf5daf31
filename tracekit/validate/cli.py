"""``tracekit validate gemm|p2p``: thin commands over :mod:`tracekit.validate.replay`."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from tracekit import cli_support
from tracekit.errors import TracekitError

validate_app = typer.Typer(
    name="validate",
    help="Confirm suspects on hardware: GEMM and P2P micro-benchmarks shaped like the job.",
    no_args_is_help=True,
)

FromDataset = Annotated[Path | None, typer.Option("--from", help="Dataset folder: its "
                                                  "episodes, communicators and model.")]
Episode = Annotated[int | None, typer.Option(help="Episode whose suspects get a verdict "
                                             "(needs --from).")]
Repetitions = Annotated[int, typer.Option(help="Timed repetitions (mean and spread).")]
Threshold = Annotated[float, typer.Option(help="Slow when over the peers' median by more "
                                          "than this share.")]


command = functools.partial(cli_support.command, validate_app)
"""Register a ``validate`` sub-command with the main CLI's error handling."""


@command("gemm")
def gemm(
    dataset: FromDataset = None,
    episode: Episode = None,
    device: Annotated[list[str] | None, typer.Option(help="Device to test, repeatable "
                      "(cuda:0, or cpu:0 .. cpu:3 for logical CPU devices); default: every GPU, "
                      "else 4 logical CPU devices.")] = None,
    dtype: Annotated[list[str] | None, typer.Option(help="fp8, bf16, fp16 or fp32, repeatable; "
                     "default: all the device supports.")] = None,
    hidden_size: Annotated[int | None, typer.Option(help="Model hidden size (overrides the "
                           "dataset).")] = None,
    seq_length: Annotated[int | None, typer.Option(help="Sequence length.")] = None,
    micro_batch_size: Annotated[int | None, typer.Option(help="Micro-batch size.")] = None,
    tensor_parallel: Annotated[int | None, typer.Option(help="Tensor-parallel size.")] = None,
    repetitions: Repetitions = 3,
    threshold: Threshold = 0.10,
    host: Annotated[str | None, typer.Option(help="This machine's name as the trace spells "
                    "it (default: the host name).")] = None,
    slow_device: Annotated[list[str] | None, typer.Option(help="Self-test: DEVICE=FACTOR does "
                           "each product FACTOR times on DEVICE.")] = None,
) -> None:
    """Time matrix products on each GPU and flag the ones slower than their peers."""
    from tracekit.validate.gemm import GemmDevice
    from tracekit.validate.replay import validate_gemm

    factors = {k: int(v) for k, v in cli_support.parse_options(slow_device).items()}
    devices = [GemmDevice(d, factors.get(d, 1)) for d in device] if device else None
    if factors and not devices:
        raise TracekitError("--slow-device needs the devices listed with --device")
    model = {"hidden_size": hidden_size, "seq_length": seq_length,
             "micro_batch_size": micro_batch_size, "tensor_parallel": tensor_parallel}
    outcome = validate_gemm(dataset, episode=episode, devices=devices, dtypes=dtype,
                            model=model, repetitions=repetitions, threshold=threshold, host=host)
    report = outcome.report
    table = Table(title="GEMM check")
    for column in ("device", "dtype", "shape", "mean ms", "spread ms", "TFLOP/s", "x peers",
                   "slow"):
        table.add_column(column)
    for r in report.results.iter_rows(named=True):
        table.add_row(r["device"], r["dtype"], f"{r['shape']} {r['m']}x{r['n']}x{r['k']}",
                      f"{r['mean_s'] * 1e3:.3g}", f"{(r['std_s'] or 0) * 1e3:.2g}",
                      f"{r['tflops']:.3g}", _ratio(r["slowdown"]), _slow(r["slow"]))
    cli_support.console.print(table)
    _print_outcome(outcome)


@command("p2p")
def p2p(
    dataset: FromDataset = None,
    episode: Episode = None,
    group: Annotated[list[str] | None, typer.Option(help="Global ranks of one group in "
                     "communicator order, e.g. 0,1,2,3 (repeatable); default: the dataset's "
                     "communicators.")] = None,
    topology: Annotated[list[str] | None, typer.Option(help="ring or tree (repeatable); "
                        "default ring.")] = None,
    size_mb: Annotated[list[int] | None, typer.Option(help="Message size in MiB (repeatable); "
                       "default 16, 32, 64 on GPUs, 1, 2, 4 on CPUs.")] = None,
    repetitions: Repetitions = 3,
    threshold: Threshold = 0.10,
    nprocs: Annotated[int | None, typer.Option(help="Local ranks to spawn when not under "
                      "torchrun (default: the groups' world size).")] = None,
    backend: Annotated[str | None, typer.Option(help="nccl or gloo (default: nccl when GPUs "
                       "are visible).")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds before a silent rank is an "
                       "error.")] = 60.0,
    inject_delay: Annotated[list[str] | None, typer.Option(help="Self-test: SRC-DST=SECONDS "
                            "delays every transfer on that link.")] = None,
) -> None:
    """Measure every link of a ring or tree with the O(1) pass schedule; flag slow links."""
    from tracekit.validate.replay import validate_p2p

    groups = [_ranks(g) for g in group] if group else None
    delays = {}
    for link, seconds in cli_support.parse_options(inject_delay).items():
        src, _, dst = link.partition("-")
        delays[(_rank(src), _rank(dst))] = float(seconds)
    outcome = validate_p2p(dataset, episode=episode, groups=groups, topologies=topology,
                           sizes_bytes=tuple(s << 20 for s in size_mb) if size_mb else None,
                           repetitions=repetitions, threshold=threshold, nprocs=nprocs,
                           backend=backend, timeout_s=timeout, delays_s=delays)
    if outcome is None:
        return
    table = Table(title=f"P2P check ({outcome.report.backend})")
    for column in ("group", "topology", "pass", "link", "reach", "GB/s", "x peers", "slow"):
        table.add_column(column)
    for r in outcome.report.links.iter_rows(named=True):
        table.add_row(r["group"], r["topology"], str(r["pass"]),
                      f"{r['src_rank']} -> {r['dst_rank']}", r["reach"],
                      f"{r['bandwidth_gb_s']:.3g}", _ratio(r["slowdown"]), _slow(r["slow"]))
    cli_support.console.print(table)
    _print_outcome(outcome)


def _rank(text: str) -> int:
    if not text.strip().isdigit():
        raise TracekitError(f"{text!r} is not a rank number")
    return int(text)


def _ranks(text: str) -> tuple[int, ...]:
    return tuple(_rank(r) for r in text.split(","))


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _slow(value: bool | None) -> str:
    return {True: "[bold red]slow[/]", False: "ok"}.get(value, "no peers")


def _print_outcome(outcome) -> None:
    console = cli_support.console
    for line in outcome.report.environment:
        console.print(f"ran on {line}", highlight=False)
    for note in outcome.notes:
        console.print(f"[yellow]note:[/] {note}", highlight=False)
    shown = outcome.validations.filter(
        outcome.validations["suspect"] | outcome.validations["verdict"].is_in(["slow"]))
    for row in shown.iter_rows(named=True):
        console.print(f"{row['verdict']}: {row['target']} — {row['evidence']}", highlight=False)
    if outcome.dataset:
        console.print(f"recorded {outcome.validations.height} verdicts in "
                      f"{outcome.dataset}/validations", highlight=False)

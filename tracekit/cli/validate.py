"""``tracekit validate gemm|p2p``: thin commands over :mod:`tracekit.validate.replay`."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from tracekit.cli import support as cli_support
from tracekit.core.errors import TracekitError
from tracekit.validate.backend import require_torch

validate_app = cli_support.new_app(
    name="validate",
    help="Confirm suspects on hardware: GEMM and P2P micro-benchmarks shaped like the job.",
    no_args_is_help=True,
)

FromDataset = Annotated[Path | None, typer.Option("--from", help="Dataset folder: its "
                                                  "episodes, communicators and model.")]
Episode = Annotated[int | None, typer.Option(help="Episode whose suspects get a verdict "
                                             "(needs --from).")]
Budget = Annotated[float | None, typer.Option("--budget-s", help="Seconds of rounds at most; "
                                              "they stop earlier once every unit has a "
                                              "verdict (default 30, self-test 10).")]
SelfTestFlag = Annotated[bool, typer.Option("--self-test", help="Check the check on this "
                                            "machine: a run with nothing slowed, then one with "
                                            "a random unit slowed; exit 1 unless exactly it is "
                                            "named.")]
Seed = Annotated[int | None, typer.Option(help="Self-test: seed of the slowed unit's pick.")]
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
    budget_s: Budget = None,
    threshold: Threshold = 0.10,
    self_test: SelfTestFlag = False,
    seed: Seed = None,
    host: Annotated[str | None, typer.Option(help="This machine's name as the trace spells "
                    "it (default: the host name).")] = None,
    slow_device: Annotated[list[str] | None, typer.Option(help="By hand: DEVICE=FACTOR does "
                           "each product FACTOR times on DEVICE.")] = None,
) -> None:
    """Time matrix products on each GPU and flag the ones slower than their peers."""
    require_torch()  # first: the one-line install hint before anything heavy is imported
    from tracekit.validate.gemm import GemmDevice, default_devices
    from tracekit.validate.peers import BUDGET_S
    from tracekit.validate.replay import validate_gemm
    from tracekit.validate.selftest import SELF_TEST_BUDGET_S, gemm_self_test

    if self_test:
        result = gemm_self_test(budget_s=_or(budget_s, SELF_TEST_BUDGET_S), threshold=threshold,
                                seed=seed)
        _print_self_test(result, _gemm_table)
        return
    factors = {k: int(v) for k, v in cli_support.parse_options(slow_device).items()}
    labels = device or ([d.label for d in default_devices()] if factors else [])
    devices = [GemmDevice(label, factors.get(label, 1)) for label in labels] or None
    if devices and set(factors) - {d.label for d in devices}:
        raise TracekitError(f"--slow-device names {', '.join(sorted(factors))}; the devices "
                            f"tested are {', '.join(d.label for d in devices)}")
    model = {"hidden_size": hidden_size, "seq_length": seq_length,
             "micro_batch_size": micro_batch_size, "tensor_parallel": tensor_parallel}
    outcome = validate_gemm(dataset, episode=episode, devices=devices, dtypes=dtype,
                            model=model, budget_s=_or(budget_s, BUDGET_S), threshold=threshold,
                            host=host)
    cli_support.console.print(_gemm_table(outcome.report))
    _print_outcome(outcome)


def _gemm_table(report) -> Table:
    table = Table(title=f"GEMM check ({report.rounds} rounds, {report.elapsed_s:.1f} s)")
    for column in ("device", "dtype", "shape", "mean ms", "spread ms", "TFLOP/s", "x peers",
                   "device verdict"):
        table.add_column(column)
    verdicts = dict(report.devices.select("device", "verdict").rows())
    for r in report.results.iter_rows(named=True):
        table.add_row(r["device"], r["dtype"], f"{r['shape']} {r['m']}x{r['n']}x{r['k']}",
                      f"{r['mean_s'] * 1e3:.3g}", f"{(r['std_s'] or 0) * 1e3:.2g}",
                      f"{r['tflops']:.3g}", _ratio(r["slowdown"]),
                      _verdict(verdicts[r["device"]]))
    return table


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
                       "default 16, 32, 64 on GPUs, 4, 8, 16 on CPUs.")] = None,
    budget_s: Budget = None,
    threshold: Threshold = 0.10,
    self_test: SelfTestFlag = False,
    seed: Seed = None,
    nprocs: Annotated[int | None, typer.Option(help="Local ranks to spawn when not under "
                      "torchrun (default: the groups' world size); without --group or --from, "
                      "one ring over these ranks.")] = None,
    backend: Annotated[str | None, typer.Option(help="nccl or gloo (default: nccl when GPUs "
                       "are visible).")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds (beyond the budget) before a silent "
                       "rank is an error.")] = 60.0,
    inject_delay: Annotated[list[str] | None, typer.Option(help="By hand: SRC-DST=SECONDS "
                            "delays every transfer from SRC to DST.")] = None,
) -> None:
    """Measure every link of a ring or tree with the O(1) pass schedule; flag slow links."""
    require_torch()
    from tracekit.validate.peers import BUDGET_S
    from tracekit.validate.replay import validate_p2p
    from tracekit.validate.selftest import SELF_TEST_BUDGET_S, p2p_self_test

    if self_test:
        result = p2p_self_test(budget_s=_or(budget_s, SELF_TEST_BUDGET_S), threshold=threshold,
                               seed=seed, timeout_s=timeout)
        _print_self_test(result, _p2p_table)
        return
    groups = [_ranks(g) for g in group or []]
    if not groups and nprocs and dataset is None:
        groups = [tuple(range(nprocs))]
    delays = {}
    for link, seconds in cli_support.parse_options(inject_delay).items():
        src, _, dst = link.partition("-")
        delays[(_rank(src), _rank(dst))] = float(seconds)
    outcome = validate_p2p(dataset, episode=episode, groups=groups, topologies=topology,
                           sizes_bytes=tuple(s << 20 for s in size_mb) if size_mb else None,
                           budget_s=_or(budget_s, BUDGET_S), threshold=threshold, nprocs=nprocs,
                           backend=backend, timeout_s=timeout, delays_s=delays)
    if outcome is None:
        return
    cli_support.console.print(_p2p_table(outcome.report))
    _print_outcome(outcome)


def _p2p_table(report) -> Table:
    table = Table(title=f"P2P check ({report.backend}, {report.rounds} rounds)")
    for column in ("group", "topology", "pass", "link", "reach", "GB/s", "x peers", "verdict"):
        table.add_column(column)
    for r in report.links.iter_rows(named=True):
        table.add_row(r["group"], r["topology"], str(r["pass"]),
                      f"{r['src_rank']} -> {r['dst_rank']}", r["reach"],
                      f"{r['bandwidth_gb_s']:.3g}", _ratio(r["slowdown"]), _verdict(r["verdict"]))
    return table


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


def _rank(text: str) -> int:
    if not text.strip().isdigit():
        raise TracekitError(f"{text!r} is not a rank number")
    return int(text)


def _ranks(text: str) -> tuple[int, ...]:
    return tuple(_rank(r) for r in text.split(","))


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _verdict(value: str) -> str:
    return {"slow": "[bold red]slow[/]", "inconclusive": "[yellow]inconclusive[/]"}.get(
        value, value)


def _print_self_test(result, table) -> None:
    """Both runs' tables and the one-line outcome; exit status 1 when it failed."""
    for title, report in (("nothing slowed", result.control),
                          (f"{result.slowed} slowed", result.test)):
        shown = table(report)
        shown.title = f"{shown.title}: {title}"
        cli_support.console.print(shown)
    cli_support.console.print(result.summary(), highlight=False)
    if not result.passed:
        raise typer.Exit(1)


def _print_outcome(outcome) -> None:
    console = cli_support.console
    for line in outcome.report.environment:
        console.print(f"ran on {line}", highlight=False)
    for note in outcome.notes:
        console.print(f"[yellow]note:[/] {note}", highlight=False)
    shown = outcome.validations.filter(
        outcome.validations["suspect"]
        | outcome.validations["verdict"].is_in(["slow", "inconclusive"]))
    for row in shown.iter_rows(named=True):
        console.print(f"{row['verdict']}: {row['target']} — {row['evidence']}", highlight=False)
    if outcome.dataset:
        console.print(f"recorded {outcome.validations.height} verdicts in "
                      f"{outcome.dataset}/validations", highlight=False)

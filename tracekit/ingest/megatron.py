"""Megatron-LM and Megatron-DeepSpeed training logs (FORMATS.md section 2).

The log is the stdout of the last rank, possibly behind launcher prefixes and interleaved with
other ranks' lines and other subsystems (NCCL, Python warnings), which are counted as skipped.
What it holds, per log interval: the ``iteration N/ M | key: value |`` line (a mean over the
interval), the timer block (``--timing-log-option`` minmax, max or all), the ``--log-straggler``
report, plus the memory report, validation results and the parallel layout.

Every line is classified with polars expressions over the whole batch; timer blocks and straggler
reports are placed in time by the last iteration line printed before them (Megatron prints the
iteration line, then the memory report, the timers and the straggler report).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import polars as pl

from tracekit.core import schema
from tracekit.core.errors import InputError
from tracekit.ingest.base import Chunk, Reader, Source, iter_line_batches, quarantine_frame
from tracekit.ingest.mlperf import MLLOG_TAG
from tracekit.ingest.numbers import bad_number_note, finite_number, is_bad_number, json_objects

LAUNCHER = (
    r"(?:\[[A-Za-z_][\w-]*?\d+\]:"              # torchrun --tee: [<role><local rank>]:
    r"|\[\d+,\d+\]<std(?:out|err)>:"            # mpirun --tag-output
    r"|\s*\d+: "                                # srun --label
    r"|\((?:\w+ )?pid=\d+(?:, ip=[\d.]+)?\) "   # Ray workers
    r"|\d{4}-\d\d-\d\dT\S+ std(?:out|err) [FP] "  # Kubernetes CRI container logs
    r")"
)
LAUNCHER_PREFIX = rf"^{LAUNCHER}{{1,2}}"
"""Launcher prefixes seen in the wild in front of Megatron's own lines, up to two deep (``srun
-l`` around torchrun: ``3: [default1]:``). torchrun writes ``[{role}{local_rank}]:``
(``torch/distributed/elastic/multiprocessing/tail_log.py``): ``[default0]:`` with the default
role, ``[rank0]:`` with torchtitan's ``--role rank``."""

TIMESTAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?"
ITERATION = (rf"(?:\[(?P<ts>{TIMESTAMP})\]\s+)?(?P<nemo>Training epoch \d+, )?\biteration\s+"
             r"(?P<iteration>\d+)/\s*(?P<train_iters>\d+)\s*\|(?P<fields>.*)$")
"""Megatron's iteration line, and NeMo 2's (``nemo/lightning/pytorch/callbacks/
progress_printer.py`` ProgressPrinter: ``Training epoch {e}, iteration {n}/{total}`` then
``' | {metric}: {val}'`` per logged metric, with no closing ``|``)."""
VALIDATION = r"^\s*(?P<split>validation|test) loss at (?P<at>.*?) \|(?P<fields>.*)$"
STEP_TIMING = "train_step_timing in s="
PROGRESS_BAR = (r"\bEpoch (?P<epoch>\d+): (?::? *\d+%\|[^|]*\| | ?)(?P<n>\d+)/(?P<total>\d+)"
                r"(?P<rest>.*)$")
"""A NeMo 1 progress bar update (``MegatronProgressBar``, ``nemo/lightning/pytorch/callbacks/
progress_bar.py``): tqdm's ``bar_format`` ``"{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/
{total_fmt} [{elapsed}<{remaining}{postfix}]"`` (later ``"{desc} {n_fmt}/{total_fmt}{postfix}"``)
with ``desc`` ``Epoch {e}: `` and the postfix ``, key=value`` per logged metric (or
Lightning's own bar, ``{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}
{postfix}]``, whose rate is no metric), numbers in
Lightning's ``Tqdm.format_num`` (3 significant digits, padded: ``3.130``, ``99.00``). Only
updates holding NeMo's ``train_step_timing in s`` are read."""
TIMER_HEADERS = {
    "(min, max) time across ranks (ms):": "minmax",
    "max time across ranks (ms):": "max",
    "times across ranks (ms):": "all",
}
TIMER_HEADER = r"^(?:INFO:megatron\.core\.timers:)?\s*(\(min, max\) time across ranks \(ms\):|" \
    r"max time across ranks \(ms\):|times across ranks \(ms\):)\s*$"
TIMER_MINMAX = r"^ {2,}(?P<name>\S.*?) \.*: \((?P<min>[^,]+), (?P<max>[^)]+)\)\s*$"
TIMER_MAX = r"^ {2,}(?P<name>\S.*?) \.*: (?P<max>[^\s(]+)\s*$"
TIMER_LINE = r"^time \(ms\)(?P<fields>(?: \| [^|]*)+?)\s*$"
"""The one-line timers of Megatron-LM before core timers (``megatron/global_vars.py``
``Timers.log``, 2020-2022, still in Megatron-DeepSpeed): ``'time (ms)'`` then ``' | {}: {:.2f}'``
per timer, the printing rank's own per-iteration average."""
TIMER_ALL_NAME = r"^  (\S[^:]*):\s*$"
TIMER_ALL_RANK = r"^\s+rank\s+(?P<rank>\d+):\s+(?P<value>\S+)\s*$"
UTILS_LOGGER = r"^(?:INFO:megatron\.core\.utils:)?\s*"
STRAGGLER = rf"{UTILS_LOGGER}\[(?P<ts>{TIMESTAMP})\]\s*(?P<fields>\|\s*M[nx]\w+/Rnk:.*)$"
STRAGGLER_FIELD = (r"^(?P<stat>Mn|Mx)(?P<metric>\w+)/Rnk: (?P<value>[^/]*?)(?:ms|W|C|%|MHz|TF)?"
                   r"/(?P<rank>\d+)\s*$")
STRAGGLER_RANKS = (rf"{UTILS_LOGGER}\^\^\^\^ (?P<stat>Bottom|Top)\s+(?P<n>\d+) "
                   r"Ranks with (?:lowest|highest)\s+Etpt\(TF\):(?P<pairs>.*)$")
MEMORY = (r"\[Rank (\d+)\] \(after (\d+) iterations\) memory \(MB\) \| allocated: ([-+\w.]+) \| "
          r"max allocated: ([-+\w.]+) \| reserved: ([-+\w.]+) \| "
          r"max reserved: ([-+0-9.eE]+|nan|inf)")
MARKER = rf"^\[(?P<label>[^\]]+)\] datetime: (?P<ts>{TIMESTAMP})\s*$"
LAYOUT = r"^using world size: (\d+), "

STRAGGLER_METRICS = {"Rtt": "rtt_ms", "Pwr": "power_w", "Tmp": "temp_c", "Utl": "util_pct",
                     "Clk": "clock_mhz", "DRtt": "data_rtt_ms", "Etpt": "throughput_tflops"}
MILLIWATTS_PER_WATT = 1000.0
"""The straggler detector prints ``torch.cuda.power_draw()`` (NVML, milliwatts) labelled ``W``
(Megatron-LM ``megatron/core/utils.py`` StragglerDetector.report; FORMATS.md 2.3)."""

STEP_FIELDS: dict[str, tuple[str, float]] = {
    "consumed samples": ("consumed_samples", 1.0),
    "consumed tokens": ("consumed_tokens", 1.0),
    "elapsed time per iteration (ms)": ("elapsed_ms", 1.0),
    "elapsed time per iteration (s)": ("elapsed_ms", 1000.0),   # Megatron-DeepSpeed
    "throughput per GPU (TFLOP/s/GPU)": ("throughput_tflops", 1.0),
    "TFLOPs": ("throughput_tflops", 1.0),                       # Megatron-DeepSpeed, per GPU
    "learning rate": ("learning_rate", 1.0),
    "global batch size": ("global_batch_size", 1.0),
    "lm loss": ("lm_loss", 1.0),
    "loss scale": ("loss_scale", 1.0),
    "grad norm": ("grad_norm", 1.0),
    "num zeros": ("num_zeros", 1.0),
    "params norm": ("params_norm", 1.0),
    "number of skipped iterations": ("skipped_iters", 1.0),
    "number of nan iterations": ("nan_iters", 1.0),
    # NeMo 2 ProgressPrinter metrics (NeMo's own names)
    "train_step_timing in s": ("elapsed_ms", 1000.0),
    "reduced_train_loss": ("lm_loss", 1.0),
    "lr": ("learning_rate", 1.0),
    "global_batch_size": ("global_batch_size", 1.0),
    "consumed_samples": ("consumed_samples", 1.0),
}
"""Printed key -> (megatron_steps column, factor to its unit). Other keys go to extra_json."""
STEP_COLUMNS = sorted({column for column, _ in STEP_FIELDS.values()})

SNIFF_PATTERNS = re.compile(
    r"\biteration\s+\d+/\s*\d+\s*\|\s*(?:consumed samples|elapsed time per iteration \(ms\)):"
    r"|^using world size: \d+, data-parallel"
    r"|^-+ arguments -+$"
    r"|^(?:INFO:megatron\.core\.timers:)?\(min, max\) time across ranks \(ms\):"
    r"|\| MnRtt/Rnk: ",
    re.MULTILINE,
)
SNIFF_LITERALS = ("consumed samples:", "elapsed time per iteration (ms):", "using world size: ",
                  " arguments ", "time across ranks (ms):", "| MnRtt/Rnk: ")
"""A text of each :data:`SNIFF_PATTERNS` alternative: looking for them first costs microseconds
where the regex, tried at every position of the head, cost 3 ms on every file of any format."""
NEMO_SNIFF = re.compile(
    r"\bTraining epoch \d+, iteration \d+/\d+ \| \w"
    r"|\bEpoch \d+: .*\btrain_step_timing in s="
    r"|\[NeMo [DIWEC] \d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S+:\d+")
NEMO_LITERALS = ("Training epoch ", STEP_TIMING, "[NeMo ")
"""NeMo's step lines, and its logger's ``[NeMo I <time> <module>:<line>]``
(``nemo/utils/formatters/base.py``), since a NeMo log's first steps often come after the
sniffed head. A NeMo log holding MLLOG records is an MLPerf result (:mod:`mlperf`)."""


CONTEXT = ("line_no", "line", "body", "ctx_iteration", "ctx_interval")
"""Per-line columns every part of the parser sees: the line, its body without launcher prefix,
and the last iteration line at or before it."""


@dataclass
class _Carry:
    """What a batch hands to the next: the iteration context and an open timer block."""

    iteration: int | None = None
    interval: int | None = None
    log_interval: int | None = None
    timer_kind: str | None = None
    timer_name: str | None = None


class MegatronLogReader(Reader):
    format = "megatron-log"
    options = ("timezone", "log_interval")
    version = "1"
    tables = ("megatron_steps", "megatron_timers", "iterations", "straggler_reports",
              "training_events", "parallel_layout")
    priority = 20
    description = ("Megatron-LM / Megatron-DeepSpeed / NeMo 2 training log: iteration lines, "
                   "timers, straggler reports, memory, validation")

    def sniff(self, source: Source) -> bool:
        text = source.head_text
        if (any(literal in text for literal in SNIFF_LITERALS)
                and SNIFF_PATTERNS.search(text) is not None):
            return True
        return (any(literal in text for literal in NEMO_LITERALS) and MLLOG_TAG not in text
                and NEMO_SNIFF.search(text) is not None)

    def read(self, source: Source, options: dict[str, str]) -> Iterator[Chunk]:
        """Options: ``timezone`` (IANA name of the clock the log printed, default UTC) and
        ``log_interval`` (iterations per log line; default: the greatest common divisor
        of the iteration numbers, as Megatron logs when ``iteration % log_interval == 0``)."""
        timezone = options.get("timezone", "UTC")
        carry = _Carry(log_interval=_positive_int(options, "log_interval", source))
        for batch in iter_line_batches(source):
            yield _parse(source, batch.frame(), batch.bytes_read, carry, timezone)


def _positive_int(options: dict[str, str], key: str, source: Source) -> int | None:
    if key not in options:
        return None
    value = options[key]
    if not value.isdigit() or int(value) == 0:
        raise InputError(f"option {key}={value!r} must be a positive integer", source.name)
    return int(value)


def _epoch_ns(text: pl.Expr, timezone: str) -> pl.Expr:
    """A printed local wall-clock time as ns since the epoch, read in ``timezone``."""
    return (text.str.strptime(pl.Datetime("us"), "%Y-%m-%d %H:%M:%S%.f", strict=False)
            .dt.replace_time_zone(timezone, ambiguous="earliest", non_existent="null")
            .dt.epoch("ns"))


def _parse(source: Source, lines: pl.DataFrame, bytes_read: int, carry: _Carry,
           timezone: str) -> Chunk:
    frame = lines.with_columns(
        pl.col("line").str.replace(LAUNCHER_PREFIX, "").alias("body")
    ).with_columns(
        pl.col("body").str.extract_groups(ITERATION).alias("_it"),
    ).unnest("_it")
    _, misfits = _fitting(frame, (pl.col("iteration"), pl.Int64),
                          (pl.col("train_iters"), pl.Int64))
    misfit = pl.col("line_no").is_in(misfits["line_no"].implode())
    frame = frame.with_columns(
        pl.when(~misfit).then(pl.col(c).cast(pl.Int64, strict=False)).alias(c)
        for c in ("iteration", "train_iters"))
    frame = _with_iteration_context(frame, carry)
    bad_numbers: Counter[str] = Counter()
    quarantine: list[pl.DataFrame] = [_bad(frame.filter(misfit), OUT_OF_RANGE)]
    tables: dict[str, list[pl.DataFrame]] = {}
    used: list[pl.Series] = []

    for parse in (_steps, _progress_bar, _validation, _timers, _straggler, _memory, _markers,
                  _layout):
        produced, bad, consumed = parse(frame, carry, timezone, bad_numbers)
        for name, table in produced.items():
            tables.setdefault(name, []).append(table)
        quarantine.append(bad)
        used.append(consumed)

    bad = pl.concat(quarantine).sort("line_no")
    consumed = pl.concat(used).unique()
    # a line one parser consumed and another quarantined is not also skipped
    accounted = pl.concat([consumed, bad["line_no"].cast(consumed.dtype)]).n_unique()
    return Chunk(
        tables={name: pl.concat([schema.conform(name, part) for part in parts])
                for name, parts in tables.items()},
        quarantine=quarantine_frame(source, bad),
        lines=lines.height,
        skipped=lines.height - accounted,
        bytes_read=bytes_read,
        notes=bad_number_note(dict(bad_numbers)),
    )


def _with_iteration_context(frame: pl.DataFrame, carry: _Carry) -> pl.DataFrame:
    """Add ``interval_iters`` to iteration lines and, on every line, ``ctx_iteration`` /
    ``ctx_interval``: the last iteration line at or before it (torn ones included)."""
    iterations = frame.filter(pl.col("iteration").is_not_null())
    if carry.log_interval is None and iterations.height:
        # Megatron logs when iteration % log_interval == 0, so the interval divides them all.
        carry.log_interval = int(np.gcd.reduce(iterations["iteration"].to_numpy())) or None
    log_interval = pl.lit(carry.log_interval, dtype=pl.Int64)
    step = pl.col("iteration") - pl.col("iteration").shift(1, fill_value=carry.iteration)
    first = pl.min_horizontal(log_interval, pl.max_horizontal(pl.col("iteration"), 1))
    interval = (pl.when(step.is_null()).then(first)
                .when((step > 0) & (step < log_interval)).then(step)
                .otherwise(log_interval))
    iterations = iterations.select("line_no", interval.alias("interval_iters"))
    frame = frame.join(iterations, on="line_no", how="left", maintain_order="left")
    frame = frame.with_columns(
        pl.col("iteration").forward_fill().fill_null(pl.lit(carry.iteration, dtype=pl.Int64))
        .alias("ctx_iteration"),
        pl.when(pl.col("iteration").is_not_null()).then(pl.col("interval_iters"))
        .forward_fill().fill_null(pl.lit(carry.interval, dtype=pl.Int64)).alias("ctx_interval"),
    )
    if iterations.height:
        last = frame.filter(pl.col("iteration").is_not_null()).row(-1, named=True)
        carry.iteration, carry.interval = last["iteration"], last["interval_iters"]
    return frame


def _key_values(frame: pl.DataFrame, fields: str) -> pl.DataFrame:
    """``key: value |`` fields of each line as long rows: line_no, key, raw, value, ok
    (ok is false when a field has no ``key: value`` shape). Megatron-LM of 2019 printed some
    keys without the colon (``' learning rate {:.3E} |'``): a key then one number is read
    alike."""
    pairs = frame.select(
        "line_no",
        pl.col(fields).str.strip_chars().str.strip_chars_end("|").str.split("|").alias("_f"),
    ).explode("_f").filter(pl.col("_f").str.strip_chars() != "")
    colon = pl.col("_f").str.extract_groups(r"^\s*(?P<key>[^:]+?)\s*:\s*(?P<raw>.*?)\s*$")
    spaced = pl.col("_f").str.extract_groups(
        r"^\s*(?P<key>[A-Za-z][^:]*?)\s+(?P<raw>[-+]?(?:\d[\d.]*(?:[eE][-+]?\d+)?|nan|inf))\s*$")
    return pairs.with_columns(
        pl.when(colon.struct.field("key").is_not_null()).then(colon).otherwise(spaced)
        .alias("_kv")
    ).unnest("_kv").with_columns(
        finite_number(pl.col("raw")).alias("value"),
        pl.col("key").is_not_null().alias("ok"),
    )


def _complete(fields: str) -> pl.Expr:
    """Megatron ends every key-value line with ``|``; a line that does not was cut short."""
    return pl.col(fields).str.strip_chars_end().str.ends_with("|")


def _count_bad(pairs: pl.DataFrame, bad_numbers: Counter[str]) -> None:
    counts = pairs.filter(is_bad_number(pl.col("raw"))).group_by("key").len()
    bad_numbers.update(dict(counts.iter_rows()))


def _nothing() -> pl.DataFrame:
    return pl.DataFrame(schema={"line_no": pl.Int64, "line": pl.String, "reason": pl.String})


def _bad(frame: pl.DataFrame, reason: str | pl.Expr) -> pl.DataFrame:
    reason = pl.lit(reason) if isinstance(reason, str) else reason
    return frame.select("line_no", "line", reason.cast(pl.String).alias("reason"))


OUT_OF_RANGE = "a number does not fit its column (out of range)"


def _fitting(frame: pl.DataFrame, *numbers: tuple[pl.Expr, pl.DataType]
             ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``frame`` without the lines (all their rows) holding a printed number that its integer
    column cannot store (a rank past int32, 2^64 iterations), and those lines' ``line_no``: a
    corrupt number is quarantined, where a strict cast would raise."""
    misfit = pl.any_horizontal([number.is_not_null() & number.cast(dtype, strict=False).is_null()
                                for number, dtype in numbers])
    misfits = frame.filter(misfit).select("line_no").unique()
    return frame.join(misfits, on="line_no", how="anti"), misfits


def _steps(frame, carry, timezone, bad_numbers):
    lines = frame.filter(pl.col("iteration").is_not_null())
    pairs = _key_values(lines, "fields")
    # NeMo's ProgressPrinter ends its lines with a value, not '|'
    complete = _complete("fields") | pl.col("nemo").is_not_null()
    torn = lines.filter(~complete)
    shapeless = lines.join(pairs.filter(~pl.col("ok")).select("line_no").unique(), on="line_no")
    good = lines.filter(complete).join(shapeless.select("line_no"), on="line_no",
                                                  how="anti")
    pairs = pairs.join(good.select("line_no"), on="line_no", how="semi")
    _count_bad(pairs, bad_numbers)
    bad_numbers["timestamp"] += good.filter(
        pl.col("ts").is_not_null() & _epoch_ns(pl.col("ts"), timezone).is_null()).height
    tables, misfits = _step_tables(good, pairs, timezone)
    good = good.join(misfits, on="line_no", how="anti")
    bad = pl.concat([_bad(torn, "truncated iteration line (no closing '|')"),
                     _bad(shapeless.join(torn.select("line_no"), on="line_no", how="anti"),
                          "iteration line field without 'key: value'"),
                     _bad(lines.join(misfits, on="line_no"), OUT_OF_RANGE)])
    return tables, bad, good["line_no"]


def _step_tables(good: pl.DataFrame, pairs: pl.DataFrame, timezone: str
                 ) -> tuple[dict[str, pl.DataFrame], pl.DataFrame]:
    """``megatron_steps`` and ``iterations`` of step records (``line_no`` identifies one;
    ``iteration``, ``train_iters``, ``ts``, ``interval_iters``) and their key-value ``pairs``,
    and the ``line_no`` of those with a number their column cannot hold."""
    known = pairs.filter(pl.col("key").is_in(list(STEP_FIELDS))).with_columns(
        pl.col("key").replace_strict({k: c for k, (c, _) in STEP_FIELDS.items()}).alias("column"),
        pl.col("value") * pl.col("key").replace_strict({k: f for k, (_, f) in STEP_FIELDS.items()},
                                                       return_dtype=pl.Float64),
    )
    spec = schema.table("megatron_steps").schema
    integers = [c for c in STEP_COLUMNS if spec[c].is_integer()]
    known, misfits = _fitting(
        known, (pl.when(pl.col("column").is_in(integers)).then(pl.col("value")), pl.Int64),
        (pl.when(pl.col("column") == "elapsed_ms").then(pl.col("value") * 1e6), pl.Int64))
    good = good.join(misfits, on="line_no", how="anti")
    pairs = pairs.join(misfits, on="line_no", how="anti")
    wide = good.select("line_no")
    if known.height:
        wide = wide.join(known.pivot(on="column", index="line_no", values="value",
                                     aggregate_function="first"), on="line_no", how="left")
    extra = json_objects(pairs.filter(~pl.col("key").is_in(list(STEP_FIELDS))), "line_no")
    steps = good.join(wide, on="line_no", how="left").join(
        extra.rename({"json": "extra_json"}), on="line_no", how="left")
    columns = [pl.col(c).cast(spec[c]) for c in STEP_COLUMNS if c in steps.columns]
    steps = steps.with_columns(
        *columns,
        pl.lit(None, dtype=pl.String).alias("job"),
        _epoch_ns(pl.col("ts"), timezone).alias("ts_ns"),
    )
    megatron_steps = steps.select([c for c in spec if c in steps.columns])
    duration_ns = (pl.col("elapsed_ms") * 1e6).round().cast(pl.Int64)
    iterations = steps.select(
        pl.col("job"),
        pl.lit(None, dtype=pl.Int32).alias("rank"),
        pl.col("iteration"),
        (pl.col("ts_ns") - duration_ns).alias("t_start_ns") if "elapsed_ms" in steps.columns
        else pl.lit(None, dtype=pl.Int64).alias("t_start_ns"),
        pl.col("ts_ns").alias("t_end_ns"),
        (pl.col("elapsed_ms") / 1000.0).alias("duration_s") if "elapsed_ms" in steps.columns
        else pl.lit(None, dtype=pl.Float64).alias("duration_s"),
        pl.lit("framework").alias("source"),
        pl.when(pl.col("interval_iters") == 1).then(pl.lit("ok"))
        .otherwise(pl.lit("interval-mean")).alias("quality"),
    )
    return {"megatron_steps": megatron_steps, "iterations": iterations}, misfits


def _progress_bar(frame, carry, timezone, bad_numbers):
    """NeMo 1 progress bar updates (:data:`PROGRESS_BAR`). tqdm rewrites its line with ``\r``,
    so one line of the file may hold every update of an epoch: each is read, and of the
    updates of one step the last (the bar is redrawn before its metrics are set). A step is
    its ``global_step`` (0-based, the step that logged the metrics) + 1, else the bar's
    count. Each update shows the last step's metrics: ``interval_iters`` 1."""
    lines = frame.filter(pl.col("body").str.contains(STEP_TIMING, literal=True))
    updates = lines.select(
        "line_no", "line", pl.col("body").str.split("\r").alias("_u")).explode("_u").with_columns(
        pl.col("_u").str.extract_groups(PROGRESS_BAR).alias("_p")).unnest("_p").filter(
        pl.col("rest").str.contains(STEP_TIMING, literal=True))
    pairs = updates.with_row_index("_update").select(
        "_update", "line_no",
        pl.col("rest").str.strip_chars_end().str.strip_suffix("]").str.split(", ").list.eval(
            pl.element().filter(
            pl.element().str.contains("=", literal=True))).alias("_f"),
    ).explode("_f").with_columns(
        pl.col("_f").str.splitn("=", 2).struct.rename_fields(["key", "raw"]).alias("_kv"),
    ).unnest("_kv").with_columns(
        pl.col("key").str.strip_chars(), pl.col("raw").str.strip_chars(),
    ).with_columns(finite_number(pl.col("raw")).alias("value"), pl.lit(True).alias("ok"))
    global_step = pairs.filter((pl.col("key") == "global_step")
                               & ~pl.col("raw").str.contains("e", literal=True)).select(
        "_update", (pl.col("value") + 1).cast(pl.Int64, strict=False).alias("_step"))
    updates = updates.with_row_index("_update").join(global_step, on="_update", how="left")
    updates = updates.with_columns(
        pl.col("_step").fill_null(pl.col("n").cast(pl.Int64, strict=False)).alias("iteration"),
        pl.col("total").cast(pl.Int64, strict=False).alias("train_iters"),
    ).filter(pl.col("iteration").is_not_null()).unique(
        "iteration", keep="last", maintain_order=True)
    _count_bad(pairs.join(updates.select("_update"), on="_update", how="semi"), bad_numbers)
    # _step_tables identifies a record by its line_no: here an update
    records = updates.select(
        pl.col("_update").cast(pl.Int64).alias("line_no"), "iteration", "train_iters",
        pl.lit(None, dtype=pl.String).alias("ts"),
        pl.lit(1, dtype=pl.Int64).alias("interval_iters"))
    tables, misfits = _step_tables(
        records, pairs.with_columns(pl.col("_update").cast(pl.Int64).alias("line_no")), timezone)
    misfit_lines = updates.join(misfits.rename({"line_no": "_update"}).with_columns(
        pl.col("_update").cast(pl.UInt32)), on="_update").select("line_no").unique()
    good = lines.join(misfit_lines, on="line_no", how="anti")
    return tables, _bad(lines.join(misfit_lines, on="line_no"), OUT_OF_RANGE), good["line_no"]


def _validation(frame, carry, timezone, bad_numbers):
    lines = frame.select(CONTEXT).with_columns(
        pl.col("body").str.extract_groups(VALIDATION).alias("_v")).unnest("_v").filter(
        pl.col("split").is_not_null())
    pairs = _key_values(lines, "fields")
    at_iteration = pl.col("at").str.extract(r"^iteration (\d+)")
    good, misfits = _fitting(lines.filter(_complete("fields")), (at_iteration, pl.Int64))
    pairs = pairs.join(good.select("line_no"), on="line_no", how="semi").filter(pl.col("ok"))
    _count_bad(pairs, bad_numbers)
    detail = json_objects(pairs, "line_no")
    loss = pairs.filter(pl.col("key") == "lm loss value").select("line_no", "value")
    events = good.join(detail, on="line_no", how="left").join(loss, on="line_no", how="left")
    events = events.select(
        pl.lit(None, dtype=pl.String).alias("job"),
        pl.lit("megatron").alias("source"),
        pl.col("split").alias("event"),
        at_iteration.cast(pl.Int64).alias("iteration"),
        pl.col("value"),
        pl.col("json").alias("detail"),
    )
    bad = pl.concat([
        _bad(lines.filter(~_complete("fields")), "truncated validation line (no closing '|')"),
        _bad(lines.join(misfits, on="line_no"), OUT_OF_RANGE)])
    return {"training_events": events}, bad, good["line_no"]


def _timers(frame, carry, timezone, bad_numbers):
    """Timer blocks: a header line, then indented lines until the next unindented line."""
    indented = pl.col("body").str.starts_with("  ")
    frame = frame.with_columns(
        pl.col("body").str.extract(TIMER_HEADER, 1).replace_strict(
            TIMER_HEADERS, default=None).alias("_header"),
        (~indented).cum_sum().alias("_segment"),
    ).with_columns(
        pl.col("_header").first().over("_segment")
        .fill_null(pl.when(pl.col("_segment") == 0).then(pl.lit(carry.timer_kind)))
        .alias("_kind"),
        pl.col("body").str.extract(TIMER_ALL_NAME, 1).alias("_all_name"),
    ).with_columns(
        pl.col("_all_name").forward_fill().over("_segment")
        .fill_null(pl.when(pl.col("_segment") == 0).then(pl.lit(carry.timer_name))),
    )
    headers = frame.filter(pl.col("_header").is_not_null())
    block = frame.filter(indented & pl.col("_kind").is_not_null())
    tail = frame.row(-1, named=True) if frame.height else None
    if tail is not None:
        carry.timer_kind = tail["_kind"] if tail["body"].startswith("  ") or tail["_header"] \
            else None
        carry.timer_name = tail["_all_name"] if carry.timer_kind == "all" else None

    minmax = block.filter(pl.col("_kind") == "minmax").with_columns(
        pl.col("body").str.extract_groups(TIMER_MINMAX).alias("_m")).unnest("_m").select(
        "line_no", "line", "name", pl.lit(None, dtype=pl.String).alias("rank"),
        pl.col("min").alias("min_raw"), pl.col("max").alias("max_raw"), "ctx_iteration",
        "ctx_interval")
    maxonly = block.filter(pl.col("_kind") == "max").with_columns(
        pl.col("body").str.extract_groups(TIMER_MAX).alias("_m")).unnest("_m").select(
        "line_no", "line", "name", pl.lit(None, dtype=pl.String).alias("rank"),
        pl.lit(None, dtype=pl.String).alias("min_raw"), pl.col("max").alias("max_raw"),
        "ctx_iteration", "ctx_interval")
    every = block.filter(pl.col("_kind") == "all")
    name_lines = every.filter(pl.col("body").str.contains(TIMER_ALL_NAME))
    per_rank = every.join(name_lines.select("line_no"), on="line_no", how="anti").with_columns(
        pl.col("body").str.extract_groups(TIMER_ALL_RANK).alias("_m")).unnest("_m").select(
        "line_no", "line", pl.col("_all_name").alias("name"),
        pl.when(pl.col("value").is_not_null()).then(pl.col("rank")).alias("rank"),
        pl.col("value").alias("min_raw"), pl.col("value").alias("max_raw"), "ctx_iteration",
        "ctx_interval")
    one_line = _one_line_timers(frame)
    readings, misfits = _fitting(pl.concat([minmax, maxonly, per_rank, one_line]),
                                 (pl.col("rank"), pl.Int32))
    parsed = pl.col("name").is_not_null() & pl.col("max_raw").is_not_null()
    good = readings.filter(parsed)
    for column in ("min_raw", "max_raw"):
        bad_numbers["timer value"] += good.filter(is_bad_number(pl.col(column))).height
    timers = good.select(
        pl.lit(None, dtype=pl.String).alias("job"),
        pl.col("ctx_iteration").alias("iteration"),
        pl.col("ctx_interval").alias("interval_iters"),
        pl.col("name"),
        pl.col("rank").cast(pl.Int32),
        finite_number(pl.col("min_raw")).alias("min_ms"),
        finite_number(pl.col("max_raw")).alias("max_ms"),
    )
    bad = pl.concat([_bad(readings.filter(~parsed), "torn or unrecognised timer line"),
                     _bad(block.join(misfits, on="line_no"), OUT_OF_RANGE)])
    consumed = pl.concat([headers["line_no"], name_lines["line_no"], good["line_no"]])
    return {"megatron_timers": timers}, bad, consumed


def _one_line_timers(frame: pl.DataFrame) -> pl.DataFrame:
    """Readings of :data:`TIMER_LINE` lines as the timer blocks' (one value: min and max); a
    line with a field without ``name: value`` as one reading without name (quarantined as
    torn)."""
    lines = frame.with_columns(pl.col("body").str.extract(TIMER_LINE, 1).alias("fields")).filter(
        pl.col("fields").is_not_null())
    pairs = lines.select(
        "line_no", "line", "ctx_iteration", "ctx_interval",
        pl.col("fields").str.strip_prefix(" | ").str.split(" | ").alias("_f"),
    ).explode("_f").with_columns(
        pl.col("_f").str.extract_groups(r"^(?P<name>\S.*?): (?P<value>\S+)$").alias("_m")
    ).unnest("_m").with_columns(
        pl.when(pl.col("name").is_not_null().all().over("line_no")).then(pl.col("name")))
    return pairs.unique(["line_no", "name"], keep="first", maintain_order=True).select(
        "line_no", "line", "name", pl.lit(None, dtype=pl.String).alias("rank"),
        pl.col("value").alias("min_raw"), pl.col("value").alias("max_raw"), "ctx_iteration",
        "ctx_interval")


def _straggler(frame, carry, timezone, bad_numbers):
    reports = frame.select(CONTEXT).with_columns(
        pl.col("body").str.extract_groups(STRAGGLER).alias("_s")).unnest("_s").filter(
        pl.col("ts").is_not_null())
    fields = reports.select(
        "line_no", "ts", "ctx_iteration",
        pl.col("fields").str.strip_chars().str.strip_chars_start("|").str.split("|").alias("_f"),
    ).explode("_f").with_columns(
        pl.col("_f").str.strip_chars().str.extract_groups(STRAGGLER_FIELD).alias("_g")
    ).unnest("_g")
    torn = fields.filter(pl.col("stat").is_null() | ~pl.col("metric").is_in(
        list(STRAGGLER_METRICS))).select("line_no").unique()
    fields, misfits = _fitting(fields.join(torn, on="line_no", how="anti"),
                               (pl.col("rank"), pl.Int32))
    bad_numbers["straggler value"] += fields.filter(is_bad_number(pl.col("value"))).height
    value = finite_number(pl.col("value"))
    metric = pl.col("metric").replace_strict(STRAGGLER_METRICS)
    summary = fields.select(
        _epoch_ns(pl.col("ts"), timezone).alias("ts_ns"),
        pl.col("ctx_iteration").alias("iteration"),
        metric.alias("metric"),
        pl.col("stat").replace_strict({"Mn": "min", "Mx": "max"}).alias("stat"),
        pl.col("rank").cast(pl.Int32),
        pl.when(metric == "power_w").then(value / MILLIWATTS_PER_WATT).otherwise(value)
        .alias("value"),
    )

    ranked = frame.select(CONTEXT).with_columns(
        pl.col("body").str.extract_groups(STRAGGLER_RANKS).alias("_r")).unnest("_r").filter(
        pl.col("stat").is_not_null())
    pairs = ranked.select(
        "line_no", "ctx_iteration", pl.col("stat").str.to_lowercase(),
        pl.col("n").cast(pl.Int64, strict=False),
        pl.col("pairs").str.extract_all(r"[^\s,/]+/\d+").alias("_p"),
    )
    short = pairs.filter(pl.col("_p").list.len() != pl.col("n").fill_null(-1)).select("line_no")
    extremes, rank_misfits = _fitting(
        pairs.join(short, on="line_no", how="anti").explode("_p"),
        (pl.col("_p").str.extract(r"/(\d+)$"), pl.Int32))
    extremes = extremes.select(
        pl.lit(None, dtype=pl.Int64).alias("ts_ns"),
        pl.col("ctx_iteration").alias("iteration"),
        pl.lit("throughput_tflops").alias("metric"),
        "stat",
        pl.col("_p").str.extract(r"/(\d+)$").cast(pl.Int32).alias("rank"),
        finite_number(pl.col("_p").str.extract(r"^(.*)/")).alias("value"),
    )
    table = pl.concat([summary, extremes]).with_columns(pl.lit(None, dtype=pl.String).alias("job"))
    bad = pl.concat([
        _bad(reports.join(torn, on="line_no"), "torn straggler report"),
        _bad(ranked.join(short, on="line_no"), "torn straggler rank list"),
        _bad(pl.concat([reports.join(misfits, on="line_no").select(CONTEXT),
                        ranked.join(rank_misfits, on="line_no").select(CONTEXT)]), OUT_OF_RANGE),
    ])
    consumed = pl.concat([
        reports.join(pl.concat([torn, misfits]), on="line_no", how="anti")["line_no"],
        ranked.join(pl.concat([short, rank_misfits]), on="line_no", how="anti")["line_no"]])
    return {"straggler_reports": table}, bad, consumed


def _memory(frame, carry, timezone, bad_numbers):
    lines = frame.filter(pl.col("body").str.contains("memory (MB) |", literal=True)).with_columns(
        pl.col("body").str.count_matches("memory (MB) |", literal=True).alias("_n"),
        pl.col("body").str.extract_all(MEMORY).alias("_m"),
    )
    complete = pl.col("_m").list.len() == pl.col("_n")
    reports = lines.filter(complete).explode("_m").with_columns(
        pl.col("_m").str.extract_groups(MEMORY).struct.rename_fields(
            ["rank", "after", "allocated_mb", "max_allocated_mb", "reserved_mb",
             "max_reserved_mb"]).alias("_g")).unnest("_g")
    reports, misfits = _fitting(reports, (pl.col("rank"), pl.Int32), (pl.col("after"), pl.Int64))
    sizes = ("allocated_mb", "max_allocated_mb", "reserved_mb", "max_reserved_mb")
    for size in sizes:
        bad_numbers["memory"] += reports.filter(is_bad_number(pl.col(size))).height
    events = reports.select(
        pl.lit(None, dtype=pl.String).alias("job"),
        pl.col("rank").cast(pl.Int32),
        pl.lit("megatron").alias("source"),
        pl.lit("memory").alias("event"),
        pl.col("after").cast(pl.Int64).alias("iteration"),
        finite_number(pl.col("max_allocated_mb")).alias("value"),
        pl.struct([finite_number(pl.col(s)).alias(s) for s in sizes]).struct.json_encode()
        .alias("detail"),
    )
    bad = pl.concat([_bad(lines.filter(~complete), "torn memory report"),
                     _bad(lines.join(misfits, on="line_no"), OUT_OF_RANGE)])
    return {"training_events": events}, bad, reports["line_no"].unique()


def _markers(frame, carry, timezone, bad_numbers):
    lines = frame.select(CONTEXT).with_columns(
        pl.col("body").str.extract_groups(MARKER).alias("_k")).unnest("_k").filter(
        pl.col("label").is_not_null())
    events = lines.select(
        pl.lit(None, dtype=pl.String).alias("job"),
        pl.lit("megatron").alias("source"),
        pl.lit("marker").alias("event"),
        pl.col("ctx_iteration").alias("iteration"),
        _epoch_ns(pl.col("ts"), timezone).alias("ts_ns"),
        pl.struct(pl.col("label")).struct.json_encode().alias("detail"),
    )
    return {"training_events": events}, _nothing(), lines["line_no"]


def _layout(frame, carry, timezone, bad_numbers):
    def size(label: str) -> pl.Expr:
        return pl.col("body").str.extract(rf"(?:^using |, ){label}: (\d+)", 1)

    labels = ("world size", "tensor-model-parallel size", "pipeline-model-parallel size",
              "data-parallel[- ]size", "context-parallel size")
    lines, misfits = _fitting(frame.filter(pl.col("body").str.contains(LAYOUT)),
                              *[(size(label), pl.Int32) for label in labels])

    layout = lines.select(
        pl.lit(None, dtype=pl.String).alias("job"),
        pl.lit("megatron").alias("source"),
        *[size(label).cast(pl.Int32).alias(column) for label, column in
          zip(labels, ("world_size", "tp_size", "pp_size", "dp_size", "cp_size"), strict=True)],
    )
    return {"parallel_layout": layout}, _bad(frame.join(misfits, on="line_no"), OUT_OF_RANGE), \
        lines["line_no"]


READERS = [MegatronLogReader()]

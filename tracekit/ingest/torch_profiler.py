"""PyTorch profiler traces (Kineto Chrome-trace JSON, plain or ``.json.gz``, one file per rank),
as written by torch 1.13 to 2.x: ``export_chrome_trace``, ``tensorboard_trace_handler`` and the
Python exporter of 2.13.

What a rank's trace becomes (``docs/profiler-traces.md`` walks through the fields):

- ``collectives``: one row per communication call the rank issued. On NCCL the CPU side is a
  tree on the calling thread (``c10d::allreduce_`` > ``record_param_comms`` > ``nccl:all_reduce``
  > ``cudaLaunchKernel``) whose launch is tied to its ``ncclKernel_*`` / ``ncclDevKernel_*`` by
  the correlation id; the kernels give the execution span (``exec_start_ns`` / ``exec_end_ns``,
  ``exec_on`` gpu). On gloo the call (``c10d::*``) returns at once and a worker thread runs it
  as a ``gloo:*`` span, matched to the calls in issue order per operation (``exec_on`` cpu).
  ``record_param_comms`` gives the name, sizes, dtype and process group where it is written.
- ``op_traces``: every other GPU activity (kernels, memcpy, memset) with its stream, device and
  launch time, placed in its ProfilerStep; in a trace without GPU activity, the outermost CPU
  operators instead.
- ``iterations``: ``ProfilerStep#N`` annotations (source ``framework``).
- ``comms``: the process groups of ``distributedInfo.pg_config`` (or of the calls' own
  ``Process Group Name`` / ``Ranks``); ``gpus``: ``deviceProperties``.

Every event is accounted for: a row, folded into another event's row (the parts of a call, the
launch of a kernel), skipped with a counted reason, or quarantined with its line.
"""

from __future__ import annotations

import json
import math
import re
from bisect import bisect_right
from collections import Counter, defaultdict, deque
from collections.abc import Iterator
from dataclasses import dataclass, field

import polars as pl

from tracekit.core import schema
from tracekit.core.errors import InputError
from tracekit.ingest import nccl_names
from tracekit.ingest.base import Chunk, Reader, Source, quarantine_frame
from tracekit.ingest.flight_recorder import OPS, TORCH_DTYPES
from tracekit.ingest.kineto_json import Bad, TraceStream, head_text

GPU_ACTIVITY = {"kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy",
                "gpu_memset": "memset", "memset": "memset"}
"""Kineto categories of device activity (lower case; torch 1.x wrote ``Kernel``, ``Memcpy``)
-> ``op_traces.category``."""
RUNTIME = frozenset({"cuda_runtime", "runtime", "cuda_driver"})
CPU_OPS = frozenset({"cpu_op", "operator"})
ANNOTATIONS = frozenset({"user_annotation"})
NCCL_KERNEL = ("ncclKernel", "ncclDevKernel")
COMM_PREFIXES = ("c10d::", "nccl:", "gloo:")
PARAM_COMMS = "record_param_comms"
PARAM_KEYS = {key.lower(): key for key in (
    "Collective name", "In msg nelems", "Out msg nelems", "dtype", "Group size", "Seq",
    "Process Group Name", "Process Group Description", "Process Group Ranks", "Src Rank",
    "Dst Rank", "Root Rank")}
"""The collective metadata keys as libkineto spells them; other writers (the Python exporter,
converted traces) differ in case (``Collective Name``), so keys are matched without it."""
STEP = re.compile(r"^ProfilerStep#(\d+)$")
RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
ABSOLUTE_US = 1e15
"""A ``ts`` above this many microseconds (2001) is already Unix time: torch before 2.1 wrote
absolute times; later versions write them relative to ``baseTimeNanoseconds``."""
SAME_TIME_US = 1e-3
"""Slack when deciding that one span holds another: both ends are rounded to the ns."""
MAX_TS_US = 1e17
"""Times and durations beyond this (3,000 years in microseconds) are not a profiler's."""
_NUMBER = (int, float)

INPUT_TYPES = {
    "float": "float32", "double": "float64", "c10::Half": "float16", "c10::BFloat16":
    "bfloat16", "long int": "int64", "long": "int64", "int": "int32", "signed char": "int8",
    "unsigned char": "uint8", "bool": "uint8", "c10::Float8_e4m3fn": "float8e4m3",
    "c10::Float8_e5m2": "float8e5m2",
}
"""Record-shapes ``Input type`` names (C++ type names) -> tracekit dtype names."""
SINGLE_INPUT = frozenset({"allreduce", "broadcast", "reduce", "send", "recv"})
"""Ops whose ``c10d::`` op takes its tensors first, so that its first recorded shape is the
message (an allgather's first argument is its outputs)."""
ROOT_ARGUMENT = {"send": 2, "recv": 2, "broadcast": 2, "reduce": 3, "gather": 3, "scatter": 3}
"""Position of the peer / root rank among a ``c10d::`` op's ``Concrete Inputs``
(``send(tensors, pg, dstRank, tag)``, ``reduce_(tensors, pg, op, root_rank, ...)``)."""

SKIP = {
    "metadata": "metadata event (process and thread names, sort order)",
    "flow": "flow arrow (the link it draws is read from correlation ids)",
    "instant": "instant marker (iteration start, record window end)",
    "span": "profiler span (the whole recording)",
    "gpu_annotation": "GPU-timeline copy of a CPU annotation",
    "python": "Python stack frame (with_stack)",
    "annotation": "user annotation other than ProfilerStep#N",
    "step_repeat": "ProfilerStep#N seen before",
    "runtime": "runtime call that launched no GPU activity in the trace (sync, event record)",
    "cpu_op": "CPU operator (the GPU activity it launched is in op_traces)",
    "nested": "CPU operator inside another one or inside a collective call (its time is the "
              "outer one's)",
    "wait": "record_param_comms of a work's wait or of no collective, not a call",
    "orphan_kernel": "NCCL kernel whose CPU call is not in the trace (launched before it "
                     "began)",
    "orphan_span": "backend execution span whose call is not in the trace",
    "empty": "empty event {}",
    "other": "event of a kind tracekit does not read",
}
"""Why events are skipped; the reader counts each reason (notes), so every event is accounted
for."""
FOLD = {
    "call_part": "part of a collective call (record_param_comms, nccl: / gloo: annotation)",
    "comm_kernel": "NCCL kernel of a collective call (its exec_start_ns / exec_end_ns)",
    "launch": "runtime call that launched a GPU activity (its t_launch_ns)",
}
"""Events that are not a row of their own but part of another event's row (noted with their
counts, as the skipped ones are)."""


def _counted_note(what: str, counts: Counter[str], reasons: dict[str, str]) -> str | None:
    """One note for the events ``what`` (skipped, folded), each reason with its count, so the
    accounting of a trace is one line rather than one per reason."""
    shown = [f"{count:,} {reasons[reason]}" for reason, count in sorted(counts.items()) if count]
    if not shown:
        return None
    return f"{what} {sum(counts.values()):,} event(s): " + "; ".join(shown)


class TorchProfilerReader(Reader):
    format = "torch-profiler"
    version = "1"
    tables = ("collectives", "op_traces", "iterations", "comms", "gpus")
    options = ("rank",)
    priority = 20
    decompresses = True
    description = "PyTorch profiler (Kineto) Chrome trace JSON, plain or .gz, one per rank"

    def sniff(self, source: Source) -> bool:
        head = head_text(source)
        return (head.lstrip().startswith("{") and '"traceEvents"' in head or
                '"schemaVersion"' in head and ('"deviceProperties"' in head
                                               or '"distributedInfo"' in head))

    def read(self, source: Source, options: dict[str, str]) -> Iterator[Chunk]:
        yield read_trace(source, options).chunk

@dataclass
class TraceRead:
    """One trace read: its chunk and why each event not a row went where it did."""

    chunk: Chunk
    skipped: Counter[str] = field(default_factory=Counter)
    folded: Counter[str] = field(default_factory=Counter)
    events: int = 0


def read_trace(source: Source, options: dict[str, str] | None = None) -> TraceRead:
    """Read one rank's trace into canonical tables (see the module docstring)."""
    stream = TraceStream(source)
    events = _Events()
    for item in stream.events():
        events.take(item)
    return _Assembly(source, stream, events, options or {}).build()


COLUMNS = {
    "cpu": {"idx": pl.Int64, "name": pl.String, "pid": pl.Int64, "tid": pl.String,
            "ts": pl.Float64, "dur": pl.Float64, "annotation": pl.Boolean},
    "gpu": {"idx": pl.Int64, "name": pl.String, "category": pl.String, "ts": pl.Float64,
            "dur": pl.Float64, "device": pl.Int64, "stream": pl.Int64, "correlation": pl.Int64},
    "runtime": {"idx": pl.Int64, "tid": pl.String, "ts": pl.Float64, "correlation": pl.Int64},
}
"""What is kept of CPU operators and annotations, GPU activity and runtime calls."""
FLUSH_EVENTS = 65536
"""Events between moves of the gathered columns into polars frames (:meth:`_Events.flush`)."""


class _Events:
    """The fields tracekit takes from each event, in columns; the events themselves are
    dropped as they are read."""

    def __init__(self) -> None:
        self.count = 0
        self.skipped: Counter[str] = Counter()
        self.bad: list[tuple[int, str, str]] = []
        self.cpu: dict[str, list] = {k: [] for k in COLUMNS["cpu"]}
        self.gpu: dict[str, list] = {k: [] for k in COLUMNS["gpu"]}
        self.runtime: dict[str, list] = {k: [] for k in COLUMNS["runtime"]}
        self.parts: dict[str, list[pl.DataFrame]] = {"cpu": [], "gpu": [], "runtime": []}
        self.args: dict[int, dict] = {}
        """Arguments of the events a collective call is built from (few)."""

    def take(self, item: tuple[int, object] | Bad) -> None:
        index = self.count
        self.count += 1
        if index % FLUSH_EVENTS == FLUSH_EVENTS - 1:
            self.flush()
        if isinstance(item, Bad):
            self.bad.append((item.line_no, item.text, item.reason))
            return
        line_no, event = item
        if type(event) is not dict:
            self.bad.append((line_no, json.dumps(event)[:500], "an event that is not an object"))
            return
        if not event:
            self.skipped["empty"] += 1
            return
        ph = event.get("ph")
        if ph != "X":
            self._other(ph, line_no, event)
            return
        ts, dur = event.get("ts"), event.get("dur", 0)
        # inlined finite-number checks (NaN fails every comparison): this runs per event
        if not (type(ts) in _NUMBER and type(dur) in _NUMBER
                and -MAX_TS_US < ts < MAX_TS_US and 0 <= dur < MAX_TS_US):
            self.bad.append((line_no, _text(event), "complete event (ph X) without a finite "
                             "ts and a duration >= 0"))
            return
        cat = event.get("cat")
        cat = cat.lower() if isinstance(cat, str) else ""
        name = event.get("name")
        if not isinstance(name, str):
            self.bad.append((line_no, _text(event), "complete event without a name"))
            return
        args = event.get("args")
        args = args if isinstance(args, dict) else {}
        if cat in CPU_OPS or cat in ANNOTATIONS:
            cpu = self.cpu
            cpu["idx"].append(index)
            cpu["name"].append(name)
            cpu["pid"].append(_int(event.get("pid")))
            cpu["tid"].append(str(event.get("tid")))
            cpu["ts"].append(float(ts))
            cpu["dur"].append(float(dur))
            cpu["annotation"].append(cat in ANNOTATIONS)
            if name == PARAM_COMMS or name.startswith(COMM_PREFIXES):
                self.args[index] = _param_args(args)
        elif cat in GPU_ACTIVITY:
            gpu = self.gpu
            gpu["idx"].append(index)
            gpu["name"].append(name)
            gpu["category"].append(GPU_ACTIVITY[cat])
            gpu["ts"].append(float(ts))
            gpu["dur"].append(float(dur))
            gpu["device"].append(_int(args.get("device")))
            gpu["stream"].append(_int(args.get("stream", event.get("tid"))))
            gpu["correlation"].append(_int(args.get("correlation")))
            if name.startswith(NCCL_KERNEL):
                self.args[index] = _param_args(args)
        elif cat in RUNTIME:
            runtime = self.runtime
            runtime["idx"].append(index)
            runtime["tid"].append(str(event.get("tid")))
            runtime["ts"].append(float(ts))
            runtime["correlation"].append(_int(args.get("correlation")))
        elif cat == "trace":
            self.skipped["span"] += 1
        elif cat == "gpu_user_annotation":
            self.skipped["gpu_annotation"] += 1
        elif cat == "python_function":
            self.skipped["python"] += 1
        else:
            self.skipped["other"] += 1

    def _other(self, ph: object, line_no: int, event: dict) -> None:
        if ph == "M":
            self.skipped["metadata"] += 1
        elif ph in ("s", "f", "t"):
            self.skipped["flow"] += 1
        elif ph in ("i", "I"):
            self.skipped["instant"] += 1
        elif isinstance(ph, str):
            self.skipped["other"] += 1
        else:
            self.bad.append((line_no, _text(event), "event without a phase (ph)"))

    def flush(self) -> None:
        """Move the columns gathered so far into polars frames: a Python float or string
        costs 30-80 bytes more than its column entry, and a trace has millions."""
        for kind, columns in (("cpu", self.cpu), ("gpu", self.gpu), ("runtime", self.runtime)):
            if columns["idx"]:
                self.parts[kind].append(pl.DataFrame(columns, schema=COLUMNS[kind]))
                for values in columns.values():
                    values.clear()

    def frames(self) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
        self.flush()
        return tuple(pl.concat(self.parts[kind]) if self.parts[kind]
                     else pl.DataFrame(schema=COLUMNS[kind]) for kind in ("cpu", "gpu", "runtime"))


@dataclass
class _Call:
    """One collective call: the events of its CPU tree, then its execution."""

    anchor: int
    tid: str
    ts: float
    end: float
    pid: int | None
    parts: list[int] = field(default_factory=list)
    kernels: list[tuple[float, float, int | None, int]] = field(default_factory=list)
    span: tuple[float, float] | None = None
    worker: str | None = None
    """The backend's worker thread that ran it (gloo)."""


class _Assembly:
    """The tables of one trace from its event columns and its top-level values."""

    def __init__(self, source: Source, stream: TraceStream, events: _Events,
                 options: dict[str, str]):
        self.source, self.events = source, events
        self.meta = stream.metadata
        self.truncated = stream.truncated
        self.bytes_read = stream.bytes_read
        self.skipped = events.skipped
        self.folded: Counter[str] = Counter()
        self.notes: list[str] = []
        info = self.meta.get("distributedInfo")
        self.info = info if isinstance(info, dict) else {}
        self.rank = self._rank(options)
        self.groups = self._groups()
        host = self.meta.get("host_name")
        self.host = host.split(".")[0].lower() if isinstance(host, str) and host else None
        self.names: dict[int, str] = {}
        """Names of the communication events (the ones :attr:`_Events.args` holds)."""
        self.fields: dict[int, dict] = {}
        """A call's fields by its anchor event, once worked out."""
        self.calls: list[_Call] = []
        self.worker_groups: dict[str, str] = {}
        """gloo worker thread -> its process group (:meth:`_worker_groups`)."""
        self.launch_of_comm: set[int] = set()
        self.step_events: set[int] = set()

    def build(self) -> TraceRead:
        cpu, gpu, runtime = self.events.frames()
        self.offset_ns = self._offset_ns(cpu, gpu)
        steps = self._steps(cpu)
        collectives, comm_kernels = self._collectives(cpu, gpu, runtime)
        op_traces = self._op_traces(cpu, gpu.filter(~pl.col("idx").is_in(comm_kernels)),
                                    runtime, steps)
        comms = self._comms(cpu)
        gpus = self._gpus(gpu)
        iterations = steps.select(
            pl.lit(None, dtype=pl.String).alias("job"), pl.lit(self.rank, pl.Int32).alias("rank"),
            "iteration", "t_start_ns", "t_end_ns",
            ((pl.col("t_end_ns") - pl.col("t_start_ns")) / 1e9).alias("duration_s"),
            pl.lit("framework").alias("source"), pl.lit("ok").alias("quality"))
        tables = {"collectives": collectives, "op_traces": op_traces, "iterations": iterations,
                  "comms": comms, "gpus": gpus}
        tables = {name: schema.conform(name, frame) for name, frame in tables.items()}
        bad = pl.DataFrame(self.events.bad, schema={"line_no": pl.Int64, "line": pl.String,
                                                    "reason": pl.String}, orient="row")
        derived = comms.height + gpus.height - sum(self.folded.values())
        self.notes += [note for note in (_counted_note("skipped", self.skipped, SKIP),
                                         _counted_note("folded into another's row", self.folded,
                                                       FOLD)) if note]
        unnamed = collectives["comm"].null_count()
        if unnamed:
            self.notes.append(
                f"{unnamed:,} call(s) without a process group: the trace names none for them "
                f"(gloo, traces before record_param_comms metadata) and lists "
                f"{len(self.groups) or 'no'} group(s) in distributedInfo; their comm is null")
        if self.truncated:
            self.notes.append("the trace ends before its closing brackets (cut short while "
                              "written?): the events before the cut are read")
        chunk = Chunk(tables=tables, quarantine=quarantine_frame(self.source, bad),
                      lines=self.events.count, skipped=sum(self.skipped.values()),
                      derived=derived, bytes_read=self.source.size, notes=self.notes)
        return TraceRead(chunk, Counter(self.skipped), self.folded, self.events.count)

    # -- identity --------------------------------------------------------------------------

    def _rank(self, options: dict[str, str]) -> int | None:
        """The ``rank`` option, else ``distributedInfo.rank``, else ``rank<N>`` in the name."""
        if "rank" in options:
            try:
                return int(options["rank"])
            except ValueError:
                raise InputError(f"--option rank={options['rank']!r} is not a whole number",
                                 self.source.name) from None
        rank = self.info.get("rank")
        if _is_int(rank):
            return rank
        found = RANK_IN_NAME.search(self.source.file_name)
        if found:
            self.notes.append("rank taken from the file name (no distributedInfo)")
            return int(found.group(1))
        self.notes.append("rank unknown: no distributedInfo and no rank<N> in the file name; "
                          "pass --option rank=N")
        return None

    def _groups(self) -> dict[str, dict]:
        """Process-group name -> {desc, ranks, size} from ``distributedInfo.pg_config`` (a list
        in Kineto, a dict keyed by name in some versions)."""
        config = self.info.get("pg_config") or []
        entries = list(config.values()) if isinstance(config, dict) else config
        groups = {}
        for entry in entries if isinstance(entries, list) else []:
            if not isinstance(entry, dict) or entry.get("pg_name") is None:
                continue
            ranks = _ranks(entry.get("ranks"))
            size = entry.get("pg_size")
            groups[str(entry["pg_name"])] = {
                "desc": entry.get("pg_desc") if isinstance(entry.get("pg_desc"), str) else None,
                "ranks": ranks, "size": size if _is_int(size) else (len(ranks) or None)}
        return groups

    def _offset_ns(self, cpu: pl.DataFrame, gpu: pl.DataFrame) -> int:
        """Nanoseconds to add to ``ts * 1000`` for Unix time."""
        first = next((f["ts"][0] for f in (cpu, gpu) if f.height), None)
        base = self.meta.get("baseTimeNanoseconds")
        if first is None or first >= ABSOLUTE_US:
            return 0
        if _is_int(base):
            return base
        self.notes.append("no baseTimeNanoseconds: times are relative to the profiler's "
                          "clock origin, not Unix time")
        return 0

    def _ns(self, us: pl.Expr) -> pl.Expr:
        """Microseconds (float) as Int64 ns, exact for whole microseconds beyond 2^53 ns."""
        whole = us.floor()
        return (whole.cast(pl.Int64) * 1000 + ((us - whole) * 1000).round().cast(pl.Int64)
                + self.offset_ns)

    # -- iterations ------------------------------------------------------------------------

    def _steps(self, cpu: pl.DataFrame) -> pl.DataFrame:
        found = cpu.with_columns(
            pl.col("name").str.extract(STEP.pattern, 1).cast(pl.Int64, strict=False)
            .alias("iteration")).filter(pl.col("iteration").is_not_null()).sort("ts")
        first = found.unique("iteration", keep="first", maintain_order=True)
        self.skipped["step_repeat"] += found.height - first.height
        self.step_events = set(found["idx"].to_list())
        return first.select("iteration", self._ns(pl.col("ts")).alias("t_start_ns"),
                            self._ns(pl.col("ts") + pl.col("dur")).alias("t_end_ns"),
                            pl.col("idx")).sort("t_start_ns")

    # -- collectives -----------------------------------------------------------------------

    def _collectives(self, cpu: pl.DataFrame, gpu: pl.DataFrame,
                     runtime: pl.DataFrame) -> tuple[pl.DataFrame, list[int]]:
        """The calls, and the NCCL kernels folded into them."""
        comm = cpu.filter(pl.col("idx").is_in(list(self.events.args)))
        self.names = dict(zip(comm["idx"].to_list(), comm["name"].to_list(), strict=True))
        calls, spans = self._call_trees(comm)
        self.worker_groups = self._worker_groups({span[4] for span in spans})
        by_tid: dict[str, list[_Call]] = defaultdict(list)
        for call in calls:
            by_tid[call.tid].append(call)
        starts = {tid: [c.ts for c in group] for tid, group in by_tid.items()}
        launches = dict(zip(runtime["correlation"].to_list(),
                            zip(runtime["tid"].to_list(), runtime["ts"].to_list(),
                                runtime["idx"].to_list(), strict=True), strict=True))
        kernels = gpu.filter(pl.col("name").str.starts_with(NCCL_KERNEL[0])
                             | pl.col("name").str.starts_with(NCCL_KERNEL[1]))
        folded_kernels = []
        for idx, ts, dur, device, correlation in kernels.select(
                "idx", "ts", "dur", "device", "correlation").iter_rows():
            call = None
            launch = launches.get(correlation)
            if launch is not None and launch[0] in by_tid:
                group = by_tid[launch[0]]
                at = bisect_right(starts[launch[0]], launch[1]) - 1
                if at >= 0 and group[at].end + SAME_TIME_US >= launch[1]:
                    call = group[at]
            if call is None:
                self.skipped["orphan_kernel"] += 1
                folded_kernels.append(idx)
                continue
            call.kernels.append((ts, ts + dur, device, idx))
            self.launch_of_comm.add(launch[2])
            folded_kernels.append(idx)
            self.folded["comm_kernel"] += 1
        self._match_spans(calls, spans)
        return self._call_rows(calls), folded_kernels

    def _call_trees(self, comm: pl.DataFrame) -> tuple[list[_Call], list[tuple]]:
        """Calls (outermost communication events on the calling thread, with the events inside
        them) and the backend's execution spans (``gloo:*`` outside any call)."""
        calls: list[_Call] = []
        spans: list[tuple] = []
        rows = comm.sort("tid", "ts", pl.col("dur"), descending=[False, False, True])
        open_call: _Call | None = None
        for idx, name, pid, tid, ts, dur in rows.select(
                "idx", "name", "pid", "tid", "ts", "dur").iter_rows():
            end = ts + dur
            if (open_call is not None and open_call.tid == tid
                    and end <= open_call.end + SAME_TIME_US):
                open_call.parts.append(idx)
                self.folded["call_part"] += 1
                if name.startswith("gloo:") and open_call.span is None:
                    open_call.span = (ts, end)  # a synchronous call run on the caller thread
                continue
            open_call = None
            if name.startswith("gloo:"):
                spans.append((ts, end, _op(name.removeprefix("gloo:")), idx, tid))
            else:
                open_call = _Call(idx, tid, ts, end, pid)
                calls.append(open_call)
        waits = [call for call in calls if self._is_wait(call)]
        self.skipped["wait"] += sum(1 + len(call.parts) for call in waits)
        self.folded["call_part"] -= sum(len(call.parts) for call in waits)
        return [call for call in calls if not self._is_wait(call)], spans

    def _is_wait(self, call: _Call) -> bool:
        """A ``record_param_comms`` outside any ``c10d::`` op is a work's wait (or a group's
        init) when it says so, or, in traces without its metadata, when no ``nccl:`` /
        ``gloo:`` annotation runs inside it (torch 1.13 had no ``c10d::`` op around a call)."""
        if self.names[call.anchor] != PARAM_COMMS:
            return False
        name = self.events.args[call.anchor].get("Collective name")
        if name is not None:
            return _op(str(name)) in ("wait", "init")
        return not any(self.names[part].startswith(("nccl:", "gloo:")) for part in call.parts)

    def _match_spans(self, calls: list[_Call], spans: list[tuple]) -> None:
        """Give each call without kernels the backend worker's span of its operation: workers
        run a group's calls in the order issued, so the first span of the op that starts after
        the call's issue is its own."""
        queues: dict[str, deque] = defaultdict(deque)
        for span in sorted(spans):
            queues[span[2]].append(span)
        for call in sorted(calls, key=lambda c: c.ts):
            if call.kernels or call.span is not None:
                continue
            queue = queues.get(self._call_op(call, self._param_comms(call)))
            while queue and queue[0][0] + SAME_TIME_US < call.ts:
                queue.popleft()
                self.skipped["orphan_span"] += 1
            if queue:
                ts, end, _, idx, call.worker = queue.popleft()
                call.span = (ts, end)
                call.parts.append(idx)
                self.folded["call_part"] += 1
        self.skipped["orphan_span"] += sum(len(q) for q in queues.values())

    def _worker_groups(self, workers: set[str]) -> dict[str, str]:
        """Worker thread -> process group of a gloo trace with several groups, which names no
        group on its calls: each ProcessGroupGloo starts its worker threads (2 by default)
        when it is created, so in thread-id order the workers fall in one cluster per group,
        in ``pg_config``'s creation order (its names count up). The ids of one group's
        threads lie close (the node's other ranks take ids in between), so the clusters are
        split at the largest gaps when each is wider than every gap inside a cluster; else
        (a tie) the result is empty and the calls' comm stays null. A wrong split is
        possible where a group's threads lie further apart than two groups do (ranks set up
        at very different paces)."""
        names = list(self.groups)
        if all(name.isdigit() for name in names):
            names.sort(key=int)
        by_id = {int(tid): tid for tid in workers if str(tid).isdigit()}
        ids = sorted(by_id)
        if len(names) < 2 or len(ids) != len(workers) or len(ids) < len(names):
            return {}
        gaps = sorted(range(1, len(ids)), key=lambda i: ids[i] - ids[i - 1], reverse=True)
        cuts, inside = sorted(gaps[:len(names) - 1]), gaps[len(names) - 1:]
        widest_inside = max((ids[i] - ids[i - 1] for i in inside), default=0)
        if any(ids[i] - ids[i - 1] <= widest_inside for i in cuts):
            return {}
        bounds = [0, *cuts, len(ids)]
        spans = zip(bounds, bounds[1:], strict=False)
        return {by_id[tid]: name for name, (lo, hi) in zip(names, spans, strict=True)
                for tid in ids[lo:hi]}

    def _param_comms(self, call: _Call) -> dict:
        """The collective's metadata: its ``record_param_comms`` arguments, or those the
        Python exporter of torch 2.13 copies onto the NCCL kernel; empty when neither."""
        args = self.events.args
        for idx in (call.anchor, *call.parts, *(k[3] for k in call.kernels)):
            if "Collective name" in args.get(idx, {}):
                return args[idx]
        return {}

    def _call_op(self, call: _Call, meta: dict) -> str:
        if "Collective name" in meta:
            return _op(str(meta["Collective name"]))
        names = [self.names.get(idx, "") for idx in (call.anchor, *call.parts)]
        named = next((n for n in names if n.startswith(COMM_PREFIXES)), None)
        return _op(named.split(":")[-1]) if named else "unknown"

    def _call_fields(self, call: _Call) -> dict:
        """Name, sizes, dtype, group and peer of a call from the events of its tree: the
        ``record_param_comms`` metadata first, then the annotations' record shapes."""
        if call.anchor in self.fields:
            return self.fields[call.anchor]
        args = self.events.args
        meta = self._param_comms(call)
        op = self._call_op(call, meta)
        names = {idx: self.names.get(idx, "") for idx in (call.anchor, *call.parts)}
        count = _int(meta.get("Out msg nelems" if op == "reducescatter" else "In msg nelems"))
        dtype = TORCH_DTYPES.get(str(meta.get("dtype")))
        shaped = next((args[i] for i, n in names.items()
                       if n.startswith(("nccl:", "gloo:")) and "Input Dims" in args[i]), None)
        if shaped is not None:
            dims = shaped.get("Input Dims") or []
            if count is None and dims:
                count = _numel(dims[0])
            types = shaped.get("Input type") or []
            if dtype is None and types and isinstance(types[0], str):
                dtype = INPUT_TYPES.get(types[0])
        anchor_dims = args[call.anchor].get("Input Dims") or [None]
        if count is None and op in SINGLE_INPUT and isinstance(anchor_dims[0], list):
            count = _numel(anchor_dims[0])
        group = meta.get("Process Group Name")
        group = str(group) if group is not None else (
            next(iter(self.groups)) if len(self.groups) == 1
            else self.worker_groups.get(call.worker))
        size = meta.get("Group size")
        if not _is_int(size):
            size = (self.groups.get(group) or {}).get("size")
        fields = {"op": op, "count": count, "dtype": dtype, "comm": group,
                  "nranks": size if _is_int(size) else None,
                  "op_count": _int(meta.get("Seq")), "peer": self._peer(call, op, meta),
                  "group_ranks": meta.get("Process Group Ranks"),
                  "group_desc": meta.get("Process Group Description")}
        self.fields[call.anchor] = fields
        return fields

    def _peer(self, call: _Call, op: str, meta: dict) -> int | None:
        for key in ("Dst Rank", "Src Rank", "Root Rank"):
            if _is_int(meta.get(key)):
                return meta[key]
        position = ROOT_ARGUMENT.get(op)
        inputs = self.events.args.get(call.anchor, {}).get("Concrete Inputs")
        if position is None or not isinstance(inputs, list) or len(inputs) <= position:
            return None
        value = inputs[position]
        return int(value) if isinstance(value, str) and value.isdigit() else None

    def _call_rows(self, calls: list[_Call]) -> pl.DataFrame:
        rows = []
        for call in calls:
            fields = self._call_fields(call)
            if call.kernels:
                start = min(k[0] for k in call.kernels)
                end = max(k[1] for k in call.kernels)
                device, where = call.kernels[0][2], "gpu"
            elif call.span is not None:
                (start, end), device, where = call.span, None, "cpu"
            else:
                start = end = device = where = None
            rows.append({
                "rank": self.rank, "host": self.host, "pid": call.pid, "cuda_dev": device,
                "comm": fields["comm"], "nranks": fields["nranks"], "op": fields["op"],
                "op_count": fields["op_count"], "count": fields["count"],
                "dtype": fields["dtype"], "peer": fields["peer"],
                "ts": call.ts, "end": end if end is not None else call.end,
                "exec_start": start, "exec_end": end, "exec_on": where})
        frame = pl.DataFrame(rows, schema={
            "rank": pl.Int32, "host": pl.String, "pid": pl.Int64, "cuda_dev": pl.Int32,
            "comm": pl.String, "nranks": pl.Int32, "op": pl.String, "op_count": pl.Int64,
            "count": pl.Int64, "dtype": pl.String, "peer": pl.Int32, "ts": pl.Float64,
            "end": pl.Float64, "exec_start": pl.Float64, "exec_end": pl.Float64,
            "exec_on": pl.String})
        self.calls = calls
        times = {"t_start_ns": "ts", "t_end_ns": "end", "exec_start_ns": "exec_start",
                 "exec_end_ns": "exec_end"}
        return frame.sort("ts").with_columns(
            *[self._ns(pl.col(us)).alias(ns) for ns, us in times.items()],
            pl.lit(None, dtype=pl.String).alias("job"),
            pl.int_range(pl.len()).over("comm").cast(pl.Int64).alias("seq"),
            (pl.col("count") * nccl_names.dtype_size(pl.col("dtype"))).alias("bytes"),
        ).drop(times.values())

    # -- op traces ---------------------------------------------------------------------------

    def _op_traces(self, cpu: pl.DataFrame, gpu: pl.DataFrame, runtime: pl.DataFrame,
                   steps: pl.DataFrame) -> pl.DataFrame:
        """GPU activity with its launch; CPU operators only where a trace has no GPU activity
        (a CPU-only job), the outermost ones of each thread."""
        # every communication event went to a call, its parts or a counted skip already
        plain_cpu = cpu.filter(~pl.col("idx").is_in([*self.names, *self.step_events]))
        annotations = plain_cpu.filter(pl.col("annotation"))
        self.skipped["annotation"] += annotations.height
        ops = plain_cpu.filter(~pl.col("annotation"))
        launch = runtime.filter(pl.col("correlation").is_not_null()).unique(
            "correlation", keep="first")
        used_launches = launch.join(gpu.select("correlation").unique(), on="correlation")
        folded = set(used_launches["idx"].to_list()) | self.launch_of_comm
        self.folded["launch"] += len(folded)
        self.skipped["runtime"] += runtime.height - len(folded)
        if gpu.height:
            self.skipped["cpu_op"] += ops.height
            activity = gpu.join(launch.select("correlation", pl.col("ts").alias("launch_ts")),
                                on="correlation", how="left").select(
                pl.col("name").alias("op"), "category", self._ns(pl.col("ts")).alias("t_start_ns"),
                self._ns(pl.col("ts") + pl.col("dur")).alias("t_end_ns"),
                (pl.col("dur") / 1e6).alias("duration_s"),
                pl.col("device").cast(pl.Int32).alias("cuda_dev"), "stream",
                self._ns(pl.col("launch_ts")).alias("t_launch_ns"))
        else:
            outermost = self._outermost(ops, calls=cpu.filter(pl.col("idx").is_in(
                [c.anchor for c in self.calls])))
            self.skipped["nested"] += ops.height - outermost.height
            activity = outermost.select(
                pl.col("name").alias("op"), pl.lit("cpu_op").alias("category"),
                self._ns(pl.col("ts")).alias("t_start_ns"),
                self._ns(pl.col("ts") + pl.col("dur")).alias("t_end_ns"),
                (pl.col("dur") / 1e6).alias("duration_s"),
                pl.lit(None, dtype=pl.Int32).alias("cuda_dev"),
                pl.lit(None, dtype=pl.Int64).alias("stream"),
                pl.lit(None, dtype=pl.Int64).alias("t_launch_ns"))
        placed = activity.with_columns(
            pl.coalesce("t_launch_ns", "t_start_ns").alias("at")).sort("at").join_asof(
            steps.select("iteration", pl.col("t_start_ns").alias("step_start"),
                         pl.col("t_end_ns").alias("step_end")),
            left_on="at", right_on="step_start", strategy="backward")
        inside = pl.col("at") <= pl.col("step_end")
        return placed.with_columns(
            pl.when(inside).then(pl.col("iteration")).alias("step"),
            pl.when(inside).then((pl.col("t_start_ns") - pl.col("step_start")) / 1e9)
            .alias("start_s"),
        ).with_columns(
            pl.int_range(pl.len()).over("step", "op").cast(pl.Int64).alias("seq"),
            pl.lit(None, dtype=pl.String).alias("job"),
            pl.lit(self.rank, pl.Int32).alias("rank"),
        ).drop("at", "iteration", "step_start", "step_end")

    @staticmethod
    def _outermost(ops: pl.DataFrame, calls: pl.DataFrame) -> pl.DataFrame:
        """The operators no other operator (or collective call) on their thread holds."""
        marked = pl.concat([ops.with_columns(pl.lit(False).alias("call")),
                            calls.with_columns(pl.lit(True).alias("call"))])
        ordered = marked.sort("tid", "ts", pl.col("dur"), descending=[False, False, True])
        end = pl.col("ts") + pl.col("dur")
        reach = end.cum_max().shift(1).over("tid")
        return ordered.filter(~pl.col("call"), (reach.is_null())
                              | (end > reach + SAME_TIME_US)).drop("call")

    # -- comms and GPUs ----------------------------------------------------------------------

    def _comms(self, cpu: pl.DataFrame) -> pl.DataFrame:
        """The rank's process groups; ``pid`` is the process's, which keeps the rows of ranks
        sharing a host (or with no host name) apart under the table's key."""
        groups = {name: dict(group) for name, group in self.groups.items()}
        for call in self.calls:
            fields = self._call_fields(call)
            if fields["comm"] is not None and fields["comm"] not in groups:
                ranks = _ranks(fields["group_ranks"])
                groups[fields["comm"]] = {"desc": fields["group_desc"], "ranks": ranks,
                                          "size": fields["nranks"] or len(ranks) or None}
        pid = cpu["pid"].drop_nulls()
        return pl.DataFrame([{
            "comm": name, "rank": self.rank, "host": self.host,
            "pid": pid[0] if pid.len() else None,
            "comm_rank": group["ranks"].index(self.rank) if self.rank in group["ranks"] else None,
            "nranks": group["size"], "comm_name": group["desc"]}
            for name, group in groups.items()], schema={
            "comm": pl.String, "rank": pl.Int32, "host": pl.String, "pid": pl.Int64,
            "comm_rank": pl.Int32, "nranks": pl.Int32, "comm_name": pl.String})

    def _gpus(self, gpu: pl.DataFrame) -> pl.DataFrame:
        used = set(gpu["device"].drop_nulls().to_list())
        devices = self.meta.get("deviceProperties")
        rows = []
        for device in devices if isinstance(devices, list) else []:
            if not isinstance(device, dict) or not _is_int(device.get("id")):
                continue
            major, minor = device.get("computeMajor"), device.get("computeMinor")
            rows.append({
                "rank": self.rank, "host": self.host, "cuda_dev": device["id"],
                "name": device.get("name") if isinstance(device.get("name"), str) else None,
                "memory_bytes": _int(device.get("totalGlobalMem")),
                "compute_capability": f"{major}.{minor}" if _is_int(major) and _is_int(minor)
                else None,
                "sm_count": _int(device.get("numSms")), "used": device["id"] in used})
        return pl.DataFrame(rows, schema={
            "rank": pl.Int32, "host": pl.String, "cuda_dev": pl.Int32, "name": pl.String,
            "memory_bytes": pl.Int64, "compute_capability": pl.String, "sm_count": pl.Int32,
            "used": pl.Boolean})


_OPS_BY_KEY = {name.replace("_", ""): op for name, op in OPS.items()}
"""Flight Recorder's op names without underscores: ``c10d::_allgather_base_``,
``nccl:_all_gather_base`` and ``allgather_base`` are one op."""


def _op(name: str) -> str:
    """A c10d / nccl / gloo / record_param_comms operation name as a tracekit op."""
    key = name.removeprefix("c10d::").replace("_", "").lower()
    if key.startswith("recv"):  # recv_any_source
        return "recv"
    return (_OPS_BY_KEY.get(key) or _OPS_BY_KEY.get(key.removesuffix("coalesced"))
            or name.removeprefix("c10d::").strip("_").lower())


def _numel(dims: object) -> int | None:
    """Elements of a recorded shape (``[2048, 4]``), or of a tensor list (``[[10], [4]]``)."""
    if not isinstance(dims, list):
        return None
    if all(_is_int(d) for d in dims):
        return math.prod(dims)
    sizes = [_numel(d) for d in dims]
    return sum(sizes) if sizes and all(s is not None for s in sizes) else None


def _ranks(value: object) -> list[int]:
    """Member ranks from a list or its printed form (``"[0, 1]"``)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return []
    return [r for r in value if _is_int(r)] if isinstance(value, list) else []


def _is_int(value: object) -> bool:
    return type(value) is int and -2**63 <= value < 2**63


def _param_args(args: dict) -> dict:
    """A communication event's arguments with the metadata keys spelled as
    :data:`PARAM_KEYS` does."""
    return {PARAM_KEYS.get(key.lower(), key) if isinstance(key, str) else key: value
            for key, value in args.items()}


def _int(value: object) -> int | None:
    return value if _is_int(value) else None


def _text(event: dict) -> str:
    return json.dumps(event)[:500]


READERS = [TorchProfilerReader()]

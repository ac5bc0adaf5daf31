"""Every canonical table of a tracekit dataset: columns, dtypes, units and meaning.

This module is the single place where table layouts live. Readers, analyses and the dataset
store all check their frames against it, so a column means the same thing everywhere.

Conventions (DESIGN.md): timestamps are ``Int64`` nanoseconds since the Unix epoch (UTC) and end
in ``_ns``; durations are ``Float64`` seconds and end in ``_s`` unless the name carries another
unit (``elapsed_ms``, ``sm_clock_mhz``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import polars as pl

from tracekit.core.errors import SchemaError


@dataclass(frozen=True)
class Column:
    """One column: its dtype, its unit (empty when dimensionless) and one line of meaning."""

    name: str
    dtype: pl.DataType
    unit: str
    meaning: str


@dataclass(frozen=True)
class Table:
    """A canonical table: its columns in order, the columns that identify a row, and the column
    that places a row in time (used for time spans in the manifest)."""

    name: str
    meaning: str
    columns: tuple[Column, ...]
    key: tuple[str, ...]
    time_column: str | None = None

    @cached_property
    def schema(self) -> pl.Schema:
        return pl.Schema({c.name: c.dtype for c in self.columns})

    @cached_property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def empty(self) -> pl.DataFrame:
        """A frame with no rows and exactly this table's schema."""
        return pl.DataFrame(schema=self.schema)


def _c(name: str, dtype: pl.DataType, unit: str, meaning: str) -> Column:
    return Column(name, dtype, unit, meaning)


I32, I64, F64, STR, BOOL = pl.Int32(), pl.Int64(), pl.Float64(), pl.String(), pl.Boolean()
NS = "ns since epoch (UTC)"

JOB = _c("job", STR, "", "job identifier (the dataset's job id unless the source names one)")
RANK = _c("rank", I32, "", "global rank of the process (torch.distributed rank)")
HOST = _c("host", STR, "", "host name, normalised (short name, no domain)")

COLLECTIVES = Table(
    "collectives",
    "one collective or point-to-point call on one rank, in the order the rank issued it",
    (
        JOB,
        RANK,
        HOST,
        _c("pid", I64, "", "operating-system process id of the caller"),
        _c("cuda_dev", I32, "", "CUDA device index seen by the process (often 0 per process)"),
        _c("comm", STR, "", "communicator handle as printed by the source (e.g. 0x7f3a5c001200)"),
        _c("nranks", I32, "", "number of ranks in the communicator"),
        _c("op", STR, "", "operation: allreduce, allgather, reducescatter, broadcast, reduce, "
           "send, recv, alltoall, gather, scatter, barrier"),
        _c("seq", I64, "", "0-based call number of this rank on this communicator (per host, pid, "
           "comm); not NCCL's opCount"),
        _c("op_count", I64, "", "NCCL's own opCount when the source prints it"),
        _c("count", I64, "elements", "element count passed to the call"),
        _c("dtype", STR, "", "element type: int8, uint8, int32, uint32, int64, uint64, float16, "
           "float32, float64, bfloat16, float8e4m3, float8e5m2"),
        _c("bytes", I64, "bytes", "payload size of the call (count x element size)"),
        _c("peer", I32, "", "peer rank of a send / recv, or root of a rooted collective"),
        _c("t_start_ns", I64, NS, "time the call was issued (null when the source has no clock)"),
        _c("t_end_ns", I64, NS, "time the call completed (null when the source has no end)"),
        # Profiler traces time a call twice: the CPU issue (t_start_ns) and its execution,
        # which starts only once the stream or the backend's worker reaches it and ends once
        # the last peer has arrived and the data moved. The gap between the two is queueing /
        # launch; across the matched calls of one collective the execution starts give each
        # rank's arrival and the last start to the end the transfer.
        _c("exec_start_ns", I64, NS, "start of the call's execution apart from its issue: the "
           "first GPU kernel (NCCL) or the backend worker thread's span (gloo); null when the "
           "source has no such timeline (logs, hooks)"),
        _c("exec_end_ns", I64, NS, "end of the call's execution (the last kernel's end, or the "
           "worker's span end); null when the source has no such timeline"),
        _c("exec_on", STR, "", "where exec_start_ns / exec_end_ns were measured: gpu (kernel "
           "on the device timeline) or cpu (backend worker thread); null without them"),
    ),
    key=("job", "rank", "comm", "seq"),
    time_column="t_start_ns",
)

COMMS = Table(
    "comms",
    "one rank's membership of one communicator, from NCCL init lines or the hook",
    (
        JOB,
        _c("comm", STR, "", "communicator handle as printed by the source"),
        _c("comm_id", STR, "", "NCCL commId hash shared by all members (null for split comms "
           "that print none)"),
        RANK,
        _c("comm_rank", I32, "", "rank of this member inside the communicator"),
        _c("nranks", I32, "", "number of ranks in the communicator"),
        HOST,
        _c("pid", I64, "", "operating-system process id of the member"),
        _c("cuda_dev", I32, "", "CUDA device index seen by the process"),
        _c("nvml_dev", I32, "", "physical GPU index on the host (NVML)"),
        _c("bus_id", STR, "", "PCI bus id of the GPU, lower case (e.g. 0000:1b:00.0)"),
        _c("t_init_ns", I64, NS, "time the communicator was initialised (null when unknown)"),
        _c("parent_comm", STR, "", "handle of the parent of a split comm (ncclCommSplit); "
           "members of one child share the parent's comm_id and split_color"),
        _c("split_color", I64, "", "color passed to ncclCommSplit (null for other comms)"),
        _c("comm_name", STR, "", "name the framework gave the comm (NCCL Inspector comm_name, "
           "PyTorch process-group desc) when the source prints one"),
        _c("net", STR, "", "network transport NCCL chose for the member's process (IB, Socket, "
           "or a plugin's name such as IBext_v8), from its 'Using network' line"),
        _c("nics", STR, "", "network devices NCCL uses in that process, comma-separated as NCCL "
           "prints them (mlx5_0:1/IB,mlx5_1:1/RoCE; eth0 for sockets), from its NET/ line"),
    ),
    key=("job", "comm", "host", "pid"),
    time_column="t_init_ns",
)

COLLECTIVE_BUCKETS = Table(
    "collective_buckets",
    "one GPU's collective or P2P calls of one comm, op, message-size bucket and algorithm / "
    "protocol, aggregated over one dump interval (NCCL Inspector Prometheus files)",
    (
        _c("ts_ns", I64, NS, "end of the dump interval: the snapshot's '# ts=' marker, else a "
           "time in the file name, else --option ts; null when none (the Inspector prints no "
           "time)"),
        JOB,
        _c("slurm_job_id", STR, "", "SLURM job id the Inspector printed (null when it printed "
           "unknown)"),
        HOST,
        _c("cuda_dev", I32, "", "CUDA device index seen by the process (the Inspector's "
           "GPU<i>)"),
        _c("gpu_uuid", STR, "", "GPU UUID from the standard file name "
           "nccl_inspector_metrics_<GPU-UUID>.prom, else null"),
        _c("comm_name", STR, "", "name the framework gave the comm (null when unknown)"),
        _c("n_nodes", I32, "", "number of nodes the communicator spans"),
        _c("nranks", I32, "", "number of ranks in the communicator"),
        _c("kind", STR, "", "collective or p2p"),
        _c("op", STR, "", "operation, as in collectives.op (allreduce, reducescatter, send, "
           "...)"),
        _c("algorithm", STR, "", "NCCL algorithm, lower case (ring, tree, nvls, ...); null for "
           "p2p"),
        _c("protocol", STR, "", "NCCL protocol, lower case (simple, ll, ll128); null for p2p"),
        _c("bytes_low", I64, "bytes", "smallest message size of the bucket (inclusive; "
           "buckets are [n, n+1) KiB / MiB / GiB ...)"),
        _c("bytes_high", I64, "bytes", "end of the bucket's message sizes (exclusive)"),
        _c("busbw_geomean_gbs", F64, "GB/s", "geometric mean bus bandwidth of the bucket's "
           "calls (10^9 B/s); null when no call had a positive bandwidth"),
        _c("exec_time_mean_us", F64, "us", "arithmetic mean execution time of the bucket's "
           "calls"),
        _c("inspector_version", STR, "", "Inspector Prometheus format version label (v5.1: "
           "profiler interface 5, format minor 1)"),
    ),
    key=("job", "ts_ns", "host", "cuda_dev", "comm_name", "nranks", "op", "bytes_low",
         "algorithm", "protocol"),
    time_column="ts_ns",
)

ITERATIONS = Table(
    "iterations",
    "one training iteration on one rank (or the whole job when rank is null)",
    (
        JOB,
        _c("rank", I32, "", "global rank; null for job-level iterations from a framework log"),
        _c("iteration", I64, "", "iteration number (framework's own when known, else 0-based)"),
        _c("t_start_ns", I64, NS, "iteration start"),
        _c("t_end_ns", I64, NS, "iteration end"),
        _c("duration_s", F64, "s", "iteration time"),
        _c("source", STR, "", "where it comes from: acf (reconstructed from collectives), "
           "framework (Megatron, MLPerf, what-if trace, step table) or truth (a labeled job's "
           "true iterations)"),
        _c("quality", STR, "", "ok, or why the duration is uncertain: disturbed (extra calls "
           "inside), resync (a boundary from a secondary call), interval-mean (mean over a "
           "log interval), normalised (step time without a unit)"),
    ),
    key=("job", "source", "rank", "iteration"),
    time_column="t_start_ns",
)

MEGATRON_STEPS = Table(
    "megatron_steps",
    "one Megatron-LM (or Megatron-DeepSpeed) training_log iteration line",
    (
        JOB,
        _c("iteration", I64, "", "iteration number printed on the line"),
        _c("train_iters", I64, "", "total iterations of the run"),
        _c("ts_ns", I64, NS, "timestamp printed on the line (null before core_v0.6)"),
        _c("consumed_samples", I64, "samples", "samples consumed so far"),
        _c("consumed_tokens", I64, "tokens", "tokens consumed so far (Megatron-DeepSpeed)"),
        _c("elapsed_ms", F64, "ms", "mean time per iteration over the log interval"),
        _c("interval_iters", I64, "", "iterations the elapsed time averages over"),
        _c("throughput_tflops", F64, "TFLOP/s/GPU", "model throughput per GPU when printed"),
        _c("learning_rate", F64, "", "learning rate"),
        _c("global_batch_size", I64, "samples", "global batch size"),
        _c("lm_loss", F64, "", "language-model loss"),
        _c("loss_scale", F64, "", "mixed-precision loss scale"),
        _c("grad_norm", F64, "", "gradient norm"),
        _c("num_zeros", F64, "", "number of zero gradients"),
        _c("params_norm", F64, "", "parameter norm"),
        _c("skipped_iters", I64, "", "iterations skipped in the interval"),
        _c("nan_iters", I64, "", "iterations with NaN in the interval"),
        _c("extra_json", STR, "", "other key: value fields of the line, as a JSON object"),
    ),
    key=("job", "iteration"),
    time_column="ts_ns",
)

MEGATRON_TIMERS = Table(
    "megatron_timers",
    "one Megatron timer reading: a per-iteration average over the log interval",
    (
        JOB,
        _c("iteration", I64, "", "last iteration of the interval the reading covers"),
        _c("interval_iters", I64, "", "iterations in the interval (covers iteration - "
           "interval_iters + 1 .. iteration)"),
        _c("name", STR, "", "timer name (forward-backward, optimizer, ...)"),
        _c("rank", I32, "", "rank of the reading (timing-log-option all), else null"),
        _c("min_ms", F64, "ms", "minimum over ranks (or this rank's value)"),
        _c("max_ms", F64, "ms", "maximum over ranks (or this rank's value)"),
    ),
    key=("job", "iteration", "name", "rank"),
)

GPU_METRICS = Table(
    "gpu_metrics",
    "one sample of one GPU metric",
    (
        _c("ts_ns", I64, NS, "sample time"),
        HOST,
        _c("gpu", I32, "", "GPU index on the host"),
        _c("gpu_uuid", STR, "", "GPU UUID when the source gives it"),
        _c("bus_id", STR, "", "PCI bus id, lower case, when the source gives it"),
        _c("gpu_instance", STR, "", "MIG instance (GPU-I / GPU-CI id) when the sample is per "
           "instance"),
        _c("metric", STR, "", "canonical metric name with its unit (sm_clock_mhz, gpu_temp_c, "
           "power_w, clocks_event_reasons, ...)"),
        _c("value", F64, "", "value in the unit the metric name states"),
        _c("source", STR, "", "exporter the sample comes from (dcgm-exporter, dcgmi-dmon, ...)"),
        _c("rate_per_s", F64, "1/s", "for counter metrics (energy_mj, pcie_replays, ...): "
           "increase per second since the previous sample; null for gauges, first samples "
           "and across resets"),
    ),
    key=("host", "gpu", "gpu_instance", "metric", "ts_ns"),
    time_column="ts_ns",
)

NIC_COUNTERS = Table(
    "nic_counters",
    "one sample of one RNIC counter, with its rate since the previous sample",
    (
        _c("ts_ns", I64, NS, "sample time"),
        HOST,
        _c("device", STR, "", "RDMA device or netdev (mlx5_0, eth0)"),
        _c("port", I32, "", "port number (1-based, as in sysfs)"),
        _c("counter", STR, "", "counter name as the driver prints it (np_cnp_sent, ...)"),
        _c("value", I64, "", "raw counter value"),
        _c("rate_per_s", F64, "1/s", "increase per second since the previous sample; null on the "
           "first sample and across resets"),
    ),
    key=("host", "device", "port", "counter", "ts_ns"),
    time_column="ts_ns",
)

HOST_METRICS = Table(
    "host_metrics",
    "one sample of a host metric: CPU load, IPMI sensors, ...",
    (
        _c("ts_ns", I64, NS, "sample time"),
        HOST,
        _c("source", STR, "", "where the sample comes from (ipmitool, ipmi-exporter, ...)"),
        _c("metric", STR, "", "canonical metric name (cpu_util_pct, inlet_temp_c, ...)"),
        _c("value", F64, "", "value in unit"),
        _c("unit", STR, "", "unit of value"),
        _c("status", STR, "", "sensor status when the source gives one (ok, nc, cr, nr)"),
    ),
    key=("host", "source", "metric", "ts_ns"),
    time_column="ts_ns",
)

LABELS = Table(
    "labels",
    "one ground-truth episode of a labeled job (fail-slow or benign disturbance)",
    (
        JOB,
        _c("episode", I32, "", "episode number within the job"),
        _c("fail_slow", BOOL, "", "true for a fail-slow, false for a benign disturbance "
           "(warm-up, GC pause, evaluation, checkpoint, logging, CNP surge) or a slowdown too "
           "small or short to count"),
        _c("kind", STR, "", "compute, communication, compound, or noise (benign disturbances, "
           "CNP-surge decoys included)"),
        _c("cause", STR, "", "gpu-thermal, gpu-degradation, cpu-contention, network-congestion, "
           "... joined by + when compound"),
        _c("target", STR, "", "culprit in words: rank:13, gpu:b07/5, host:b07, link:b03<->b07"),
        _c("target_rank", I32, "", "culprit rank when one rank is at fault"),
        _c("target_host", STR, "", "culprit host"),
        _c("target_gpu", I32, "", "culprit GPU index on target_host"),
        _c("target_link", STR, "", "culprit link as host<->host, sorted"),
        _c("t_start_ns", I64, NS, "episode start"),
        _c("t_end_ns", I64, NS, "episode end"),
        _c("start_iteration", I64, "", "first affected iteration"),
        _c("end_iteration", I64, "", "last affected iteration"),
        _c("severity", F64, "x", "slowdown factor of the culprit (1.4 = 40 % slower); for a "
           "CNP-surge decoy the congestion factor the surge stands for; for other noise the "
           "episode's mean iteration time over the healthy median"),
    ),
    key=("job", "episode"),
    time_column="t_start_ns",
)

EVENTS = Table(
    "events",
    "one change point found by a detector",
    (
        JOB,
        _c("rank", I32, "", "rank of the series, null for the job-level series"),
        _c("detector", STR, "", "detector name (window, bocd, bocd+v, ...)"),
        _c("iteration", I64, "", "first iteration after the change"),
        _c("ts_ns", I64, NS, "time of that iteration's start"),
        _c("before_s", F64, "s", "mean iteration time before the change"),
        _c("after_s", F64, "s", "mean iteration time after the change"),
        _c("ratio", F64, "x", "after_s / before_s"),
        _c("confirmed_iteration", I64, "", "iteration whose arrival made the detector, run "
           "online, report the change (alarm delay = this - iteration); null for per-rank "
           "series"),
    ),
    key=("job", "detector", "rank", "iteration"),
    time_column="ts_ns",
)

EPISODES = Table(
    "episodes",
    "one detected fail-slow episode with its cost and, once attributed, its culprit",
    (
        JOB,
        _c("episode", I32, "", "episode number within the job"),
        _c("detector", STR, "", "detector that found it"),
        _c("t_start_ns", I64, NS, "episode start"),
        _c("t_end_ns", I64, NS, "episode end (null while still open at the end of the trace)"),
        _c("start_iteration", I64, "", "first slow iteration"),
        _c("end_iteration", I64, "", "last slow iteration"),
        _c("iterations", I64, "", "iterations affected: those its logged points stand for (each "
           "up to the next logged one), so a log of every 10th iteration counts 10 per point"),
        _c("duration_s", F64, "s", "episode duration"),
        _c("baseline_s", F64, "s", "healthy iteration time before the episode"),
        _c("slowdown", F64, "x", "mean iteration time in the episode over the healthy baseline"),
        _c("lost_s", F64, "s", "time lost to the episode versus the healthy baseline"),
        _c("jct_slowdown", F64, "", "lost_s as a share of the job's healthy completion time"),
        _c("ranks", STR, "", "ranks that changed with it, comma separated"),
        _c("kind", STR, "", "compute, communication, compound or unknown"),
        _c("cause", STR, "", "attributed cause, or insufficient-evidence"),
        _c("target", STR, "", "attributed culprit (rank:13, gpu:b07/5, link:b03<->b07)"),
        _c("confidence", F64, "", "confidence of the attribution, 0..1: the share of verdicts "
           "like it that were right on fresh synthesized jobs (docs/attribution.md)"),
        _c("inferred", BOOL, "", "the cause was concluded by elimination (no signal of its "
           "own moved, e.g. degradation from normal clocks), so its confidence is capped"),
        _c("evidence", STR, "", "the numbers behind the verdict, in words"),
        _c("points", I64, "", "logged points (iterations or samples) the episode holds; equals "
           "iterations for a log of every iteration"),
        _c("persistent", BOOL, "", "true for a peer straggler slow over the whole run at a "
           "steady offset, not a change: one episode over the whole run, slowdown the job's "
           "from that offset, evidence its ratio to its peers; false for other peer episodes, "
           "null for change-point ones"),
    ),
    key=("job", "detector", "episode"),
    time_column="t_start_ns",
)

QUARANTINE = Table(
    "quarantine",
    "one input line that belongs to a recognised format but could not be parsed",
    (
        _c("source", STR, "", "input path (archive members as archive.tar.gz!member)"),
        _c("line_no", I64, "", "1-based line number in the source"),
        _c("reason", STR, "", "why the line was refused"),
        _c("raw", STR, "", "the line, cut to 500 characters"),
    ),
    key=("source", "line_no"),
)

OP_TRACES = Table(
    "op_traces",
    "one timed operation of one rank in one training step (per-rank op traces, e.g. the "
    "ByteDance what-if format)",
    (
        JOB,
        RANK,
        _c("dp_rank", I32, "", "data-parallel rank of the worker"),
        _c("pp_stage", I32, "", "pipeline stage of the worker"),
        _c("step", I64, "", "training step (iteration) the operation belongs to"),
        _c("op", STR, "", "operation type, a Megatron timer name (forward-compute, "
           "backward-send, grads-reduce-scatter, optimizer, ...)"),
        _c("seq", I64, "", "0-based order of this operation type within the step on this rank"),
        _c("start_s", F64, "s", "start, seconds after the step's start"),
        _c("duration_s", F64, "s", "operation time"),
        _c("t_start_ns", I64, NS, "absolute start when the source gives one, else null"),
        _c("micro_batch", I32, "", "micro-batch id (compute operations), else null"),
        _c("model_chunk", I32, "", "model chunk (virtual stage) within the pipeline stage, "
           "else null"),
        _c("global_model_chunk", I32, "", "model chunk id in the whole model, else null"),
        # Kernel-level traces (torch.profiler / Kineto, Nsight Systems) give one row per GPU
        # activity: these say what kind it is and where it ran, and when the host launched it
        # (launch delay = t_start_ns - t_launch_ns tells a host- / launch-bound rank).
        _c("category", STR, "", "kind of operation in kernel-level traces: kernel, memcpy, "
           "memset (GPU activity) or cpu_op (a CPU operator, in traces without GPU activity); "
           "null for framework-phase traces (what-if)"),
        _c("t_end_ns", I64, NS, "absolute end when the source gives one, else null"),
        _c("cuda_dev", I32, "", "CUDA device index the activity ran on, null for CPU ops"),
        _c("stream", I64, "", "CUDA stream of a GPU activity, null for CPU ops"),
        _c("t_launch_ns", I64, NS, "start of the host runtime call that launched the activity "
           "(cudaLaunchKernel, cudaMemcpyAsync; matched by correlation id), else null"),
    ),
    key=("job", "rank", "step", "op", "seq"),
    time_column="t_start_ns",
)

COMPUTE_OPS = ("forward-compute", "backward-compute")
"""``op_traces.op`` timer names of a stage's own work (everything else is communication or
waiting)."""

STRAGGLER_REPORTS = Table(
    "straggler_reports",
    "one statistic of a Megatron --log-straggler report: a metric's min or max across ranks, "
    "or one of the bottom / top N ranks, with the rank holding it",
    (
        JOB,
        _c("ts_ns", I64, NS, "timestamp printed on the report (null for bottom / top lines)"),
        _c("iteration", I64, "", "last iteration line printed before the report"),
        _c("metric", STR, "", "rtt_ms, power_w, temp_c, util_pct, clock_mhz, data_rtt_ms or "
           "throughput_tflops"),
        _c("stat", STR, "", "min, max, bottom or top"),
        RANK,
        _c("value", F64, "", "value in the unit the metric name states (power converted from "
           "the mW Megatron prints)"),
    ),
    key=("job", "iteration", "metric", "stat", "rank"),
    time_column="ts_ns",
)

TRAINING_EVENTS = Table(
    "training_events",
    "one event a training framework logs besides its iterations: run, block and eval start / "
    "stop (MLPerf), validation results and memory reports (Megatron)",
    (
        JOB,
        _c("rank", I32, "", "rank that logged it, null for job-level events"),
        _c("source", STR, "", "framework log it comes from: megatron, mlperf or dllogger"),
        _c("event", STR, "", "run_start, run_stop, block_start, eval_stop, validation, memory, "
           "..."),
        _c("iteration", I64, "", "iteration the event refers to, when known"),
        _c("ts_ns", I64, NS, "time the event was logged (null when the line has no clock)"),
        _c("value", F64, "", "the event's main number (validation loss, eval accuracy, max "
           "allocated MB), else null"),
        _c("detail", STR, "", "the event's other fields as a JSON object"),
    ),
    key=("job", "source", "event", "rank", "iteration", "ts_ns"),
    time_column="ts_ns",
)

PARALLEL_LAYOUT = Table(
    "parallel_layout",
    "the parallel layout of a job as its framework or trace metadata states it",
    (
        JOB,
        _c("source", STR, "", "where it comes from: megatron (arguments line) or whatif (meta "
           "yaml)"),
        _c("world_size", I32, "", "number of ranks"),
        _c("tp_size", I32, "", "tensor-parallel size"),
        _c("pp_size", I32, "", "pipeline-parallel size"),
        _c("dp_size", I32, "", "data-parallel size"),
        _c("cp_size", I32, "", "context-parallel size"),
        _c("vpp_size", I32, "", "virtual pipeline stages per pipeline rank"),
        _c("extra_json", STR, "", "other fields of the source, as a JSON object"),
    ),
    key=("job", "source"),
)

VALIDATIONS = Table(
    "validations",
    "one hardware verdict on one GPU or link, from a GEMM or P2P check run for an episode",
    (
        JOB,
        _c("episode", I32, "", "episode the check was run for (null when run without one)"),
        _c("check", STR, "", "gemm or p2p"),
        _c("target", STR, "", "unit tested: gpu:HOST/INDEX or link:SRC->DST (global ranks)"),
        HOST,
        _c("gpu", I32, "", "GPU index on host (gemm)"),
        _c("src_rank", I32, "", "sending rank of the link (p2p)"),
        _c("dst_rank", I32, "", "receiving rank of the link (p2p)"),
        _c("suspect", BOOL, "", "whether the episode named this unit as a suspect"),
        _c("verdict", STR, "", "confirmed, refuted, not-testable, or unsuspected-slow (found "
           "slow though the episode did not name it)"),
        _c("slowdown", F64, "x", "time over the median of its peers (median over its tests)"),
        _c("threshold", F64, "", "a slowdown above 1 + threshold is slow"),
        _c("rate", F64, "", "achieved rate, mean over its tests, in rate_unit"),
        _c("rate_unit", STR, "", "TFLOP/s (gemm) or GB/s (p2p)"),
        _c("device", STR, "", "device, driver and runtime the check ran on"),
        _c("evidence", STR, "", "the numbers behind the verdict, in words"),
        _c("ts_ns", I64, NS, "time the check ran"),
    ),
    key=("job", "episode", "check", "target"),
    time_column="ts_ns",
)

GPUS = Table(
    "gpus",
    "one GPU a rank's process could see, as its profiler trace describes it (Kineto "
    "deviceProperties, Nsight Systems TARGET_INFO_GPU)",
    (
        JOB,
        RANK,
        HOST,
        _c("cuda_dev", I32, "", "CUDA device index seen by the process"),
        _c("name", STR, "", "device name (NVIDIA A100-SXM4-80GB)"),
        _c("memory_bytes", I64, "bytes", "total device memory"),
        _c("compute_capability", STR, "", "major.minor (8.0)"),
        _c("sm_count", I32, "", "streaming multiprocessors"),
        _c("gpu_uuid", STR, "", "GPU UUID when the source gives it"),
        _c("bus_id", STR, "", "PCI bus id, lower case, when the source gives it"),
        _c("used", BOOL, "", "true for the device(s) the rank's GPU activity ran on"),
    ),
    key=("job", "rank", "cuda_dev"),
)

TIME_SPLIT = Table(
    "time_split",
    "one rank's iteration split by what its device (or, in CPU-only traces, its thread) was "
    "doing; compute + exposed_comm + memory + host + idle = duration (attribute/time_split.py)",
    (
        JOB,
        RANK,
        _c("iteration", I64, "", "iteration number, as in iterations"),
        _c("t_start_ns", I64, NS, "iteration start"),
        _c("t_end_ns", I64, NS, "iteration end"),
        _c("duration_s", F64, "s", "iteration time"),
        _c("compute_s", F64, "s", "time some compute kernel (or CPU operator) ran"),
        _c("overlapped_comm_s", F64, "s", "communication that ran while compute ran (hidden; "
           "part of compute_s)"),
        _c("exposed_comm_s", F64, "s", "communication with no compute beside it"),
        _c("memory_s", F64, "s", "copies and sets with neither compute nor communication "
           "beside them"),
        _c("host_s", F64, "s", "device idle because the host had not yet launched the next "
           "work (launch / host bound)"),
        _c("idle_s", F64, "s", "device idle with the next work already launched (waiting on a "
           "dependency or a sync), or, without launch times, any gap"),
        _c("late_send_s", F64, "s", "the part of host_s + idle_s that ends with the rank "
           "issuing a send (the device or thread sat idle right before it: a send issued "
           "late)"),
        _c("bound", STR, "", "what bounds the iteration: compute, communication, host or idle "
           "(the largest of compute + memory, exposed_comm, host, idle)"),
        _c("timeline", STR, "", "gpu (device activity) or cpu (CPU operators of a trace "
           "without GPU activity)"),
    ),
    key=("job", "rank", "iteration"),
    time_column="t_start_ns",
)

CALL_SPLIT = Table(
    "call_split",
    "one collective call of a profiler trace split into queueing, waiting for the last peer "
    "and transfer (attribute/time_split.py)",
    (
        JOB,
        RANK,
        _c("comm", STR, "", "communicator handle, as in collectives"),
        _c("seq", I64, "", "call number, as in collectives"),
        _c("op", STR, "", "operation, as in collectives"),
        _c("instance", STR, "", "the matched call across ranks: group [members] #call number; null "
           "when it was not matched"),
        _c("members", I32, "", "ranks in the matched call"),
        _c("last_rank", I32, "", "the member that started its execution last"),
        _c("t_start_ns", I64, NS, "issue of the call (enqueue)"),
        _c("queue_s", F64, "s", "issue to execution start (launch / queueing)"),
        _c("wait_s", F64, "s", "execution start to the last member's (waiting for the last "
           "peer); null when not matched"),
        _c("transfer_s", F64, "s", "last member's execution start (its own when not matched) "
           "to the end"),
        _c("exec_on", STR, "", "gpu or cpu, as in collectives"),
    ),
    key=("job", "rank", "comm", "seq"),
    time_column="t_start_ns",
)

TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        COLLECTIVES,
        COMMS,
        COLLECTIVE_BUCKETS,
        ITERATIONS,
        MEGATRON_STEPS,
        MEGATRON_TIMERS,
        GPU_METRICS,
        NIC_COUNTERS,
        HOST_METRICS,
        LABELS,
        EVENTS,
        EPISODES,
        QUARANTINE,
        OP_TRACES,
        STRAGGLER_REPORTS,
        TRAINING_EVENTS,
        PARALLEL_LAYOUT,
        VALIDATIONS,
        GPUS,
        TIME_SPLIT,
        CALL_SPLIT,
    )
}

RAW_LINE_LIMIT = 500
"""Quarantined lines are cut to this many characters: one huge torn line cannot bloat a dataset."""


def table(name: str) -> Table:
    """The canonical table called ``name``; a clear error for an unknown name."""
    try:
        return TABLES[name]
    except KeyError:
        known = ", ".join(sorted(TABLES))
        raise SchemaError(f"unknown table {name!r}; known tables: {known}") from None


def conform(name: str, frame: pl.DataFrame) -> pl.DataFrame:
    """Add the table's missing columns as nulls and put columns in canonical order.

    Readers use this so they only build the columns their format has. Columns that exist keep
    their dtype, so a wrong dtype is still caught by :func:`validate`; only columns polars could
    not type (dtype Null: empty or all-null) take the canonical dtype, which loses nothing.
    """
    spec = table(name)
    untyped = {c: spec.schema[c] for c, dtype in frame.schema.items()
               if dtype == pl.Null() and c in spec.schema}
    if untyped:
        frame = frame.cast(untyped)
    missing = [pl.lit(None, dtype=c.dtype).alias(c.name) for c in spec.columns
               if c.name not in frame.columns]
    if missing:
        frame = frame.with_columns(missing)
    extra = [c for c in frame.columns if c not in spec.schema]
    if extra:
        raise SchemaError(f"table {name!r}: unexpected column {extra[0]!r}")
    return frame.select(spec.column_names)


def validate(name: str, frame: pl.DataFrame | pl.LazyFrame) -> None:
    """Raise :class:`SchemaError` naming the table and column when ``frame`` does not have
    exactly the canonical columns, in order, with the canonical dtypes."""
    spec = table(name)
    got = frame.collect_schema() if isinstance(frame, pl.LazyFrame) else frame.schema
    for column in spec.columns:
        if column.name not in got:
            raise SchemaError(f"table {name!r}: missing column {column.name!r}")
        if got[column.name] != column.dtype:
            raise SchemaError(
                f"table {name!r}: column {column.name!r} has dtype {got[column.name]}, "
                f"expected {column.dtype}"
            )
    for column_name in got:
        if column_name not in spec.schema:
            raise SchemaError(f"table {name!r}: unexpected column {column_name!r}")
    if list(got) != spec.column_names:
        raise SchemaError(f"table {name!r}: columns out of order, expected {spec.column_names}")

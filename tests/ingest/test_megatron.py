"""Megatron-LM / Megatron-DeepSpeed logs: exact values on every variant of the format samples."""

from __future__ import annotations

import json

import polars as pl
import pytest

from tracekit.core.errors import InputError
from tracekit.ingest.base import Source
from tracekit.ingest.megatron import MegatronLogReader
from tracekit.ingest.pipeline import ingest

READER = MegatronLogReader()
TABLES = ("megatron_steps", "megatron_timers", "iterations", "straggler_reports",
          "training_events", "parallel_layout")


def read(name: str, data: bytes, **options: str) -> dict:
    """All chunks of one source, concatenated per table, plus quarantine and line counts."""
    chunks = list(READER.read(Source.from_bytes(name, data), options))
    out = {t: pl.concat([c.tables[t] for c in chunks]) for t in TABLES}
    out["quarantine"] = pl.concat([c.quarantine for c in chunks])
    out["lines"] = sum(c.lines for c in chunks)
    out["skipped"] = sum(c.skipped for c in chunks)
    out["notes"] = [n for c in chunks for n in c.notes]
    return out


def variants(formats_dir) -> dict[str, bytes]:
    """The variants file split at its ``# ---- variant X`` annotations (not part of a log)."""
    sections: dict[str, list[str]] = {}
    for line in (formats_dir / "megatron_train_variants.log").read_text().splitlines():
        if line.startswith("# ----"):
            current = line.split()[3].rstrip(":")
            sections[current] = []
        else:
            sections[current].append(line)
    return {k: ("\n".join(v) + "\n").encode() for k, v in sections.items()}


@pytest.fixture(scope="module")
def train_log(formats_dir):
    return read("megatron_train.log", (formats_dir / "megatron_train.log").read_bytes())


def ns(text: str) -> int:
    return pl.Series([text]).str.to_datetime(time_zone="UTC").dt.epoch("ns")[0]


def test_train_log_steps(train_log):
    steps = train_log["megatron_steps"]
    assert steps["iteration"].to_list() == list(range(10, 101, 10))
    first = steps.row(0, named=True)
    assert first == {
        "job": None, "iteration": 10, "train_iters": 500000,
        "ts_ns": ns("2025-10-14 09:14:04.103"), "consumed_samples": 5120,
        "consumed_tokens": None, "elapsed_ms": 7410.3, "interval_iters": 10,
        "throughput_tflops": 235.4, "learning_rate": 1.5e-06, "global_batch_size": 512,
        "lm_loss": 10.1556, "loss_scale": 1.0, "grad_norm": 0.572, "num_zeros": None,
        "params_norm": None, "skipped_iters": 0, "nan_iters": 0, "extra_json": None,
    }
    nan_step = steps.filter(pl.col("iteration") == 80).row(0, named=True)
    assert (nan_step["grad_norm"], nan_step["skipped_iters"], nan_step["nan_iters"]) == (None, 1, 1)
    assert steps.filter(pl.col("iteration") == 70)["elapsed_ms"].item() == 5987.4


def test_train_log_iterations_are_job_level_interval_means(train_log):
    iterations = train_log["iterations"]
    assert iterations["rank"].null_count() == 10
    row = iterations.filter(pl.col("iteration") == 20).row(0, named=True)
    assert row["t_end_ns"] == ns("2025-10-14 09:14:46.465280")
    assert row["t_start_ns"] == row["t_end_ns"] - 4_236_200_000
    assert row["duration_s"] == pytest.approx(4.2362)
    assert set(iterations["source"]) == {"framework"}
    assert set(iterations["quality"]) == {"interval-mean"}


def test_train_log_timers(train_log):
    timers = train_log["megatron_timers"]
    assert timers.height == 2 + 14 + 14
    setup = timers.filter(pl.col("iteration").is_null())
    assert setup["name"].to_list() == ["model-and-optimizer-setup",
                                       "train/valid/test-data-iterators-setup"]
    assert setup["max_ms"].to_list() == [1833.07, 530.16]
    slow = timers.filter(pl.col("iteration") == 70, pl.col("name") == "all-grads-sync")
    assert slow.select("interval_iters", "rank", "min_ms", "max_ms").row(0) == (10, None, 40.87,
                                                                               1702.66)
    assert timers.filter(pl.col("iteration") == 10)["name"].to_list()[:3] == [
        "forward-backward", "forward-compute", "backward-compute"]


def test_train_log_straggler_report(train_log):
    report = train_log["straggler_reports"]
    assert report.height == 14 + 4
    assert set(report["iteration"]) == {70}
    power = report.filter(pl.col("metric") == "power_w").sort("stat")
    assert power.select("stat", "rank").rows() == [("max", 5), ("min", 11)]
    assert power["value"].to_list() == pytest.approx([688.204, 402.118])  # printed in mW
    assert power["ts_ns"][0] == ns("2025-10-14 09:18:35")
    bottom = report.filter(pl.col("stat") == "bottom")
    assert bottom.select("rank", "value").rows() == [(11, 291.04), (14, 402.13)]
    assert bottom["ts_ns"].null_count() == 2
    assert report.filter(pl.col("metric") == "rtt_ms", pl.col("stat") == "max").select(
        "rank", "value").row(0) == (11, 5942.16)


def test_train_log_memory_validation_layout(train_log):
    events = train_log["training_events"]
    memory = events.filter(pl.col("event") == "memory")
    assert memory["rank"].to_list() == [0, 8, 3]  # the torn line holds two reports
    assert json.loads(memory["detail"][1]) == {
        "allocated_mb": 31544.8125, "max_allocated_mb": 61822.07373046875,
        "reserved_mb": 66940.0, "max_reserved_mb": 66940.0}
    validation = events.filter(pl.col("event") == "validation").row(0, named=True)
    assert (validation["iteration"], validation["value"]) == (100, 5.129981)
    assert json.loads(validation["detail"]) == {"lm loss value": 5.129981,
                                                "lm loss PPL": 168.9837}
    markers = events.filter(pl.col("event") == "marker")
    assert markers["ts_ns"].to_list() == [ns("2025-10-14 09:12:49"), ns("2025-10-14 09:12:50")]
    layout = train_log["parallel_layout"].row(0, named=True)
    assert (layout["world_size"], layout["tp_size"], layout["pp_size"], layout["dp_size"],
            layout["cp_size"]) == (16, 8, 1, 2, 1)


def test_train_log_truncated_last_line_quarantined(train_log):
    quarantine = train_log["quarantine"]
    assert quarantine.select("line_no", "reason").rows() == [
        (62, "truncated iteration line (no closing '|')")]
    assert train_log["lines"] == 62
    assert train_log["skipped"] == 9


def test_variant_a_no_timestamp_short_lr(formats_dir):
    out = read("a.log", variants(formats_dir)["A"])
    step = out["megatron_steps"].row(0, named=True)
    assert (step["iteration"], step["ts_ns"], step["learning_rate"], step["grad_norm"]) == (
        200, None, 3.0e-05, 1.204)
    iteration = out["iterations"].row(0, named=True)
    assert (iteration["t_start_ns"], iteration["t_end_ns"]) == (None, None)
    assert iteration["duration_s"] == pytest.approx(4.1882)


def test_variant_b_seconds_timestamp_and_print_timers(formats_dir):
    out = read("b.log", variants(formats_dir)["B"])
    step = out["megatron_steps"].row(0, named=True)
    assert step["ts_ns"] == ns("2025-06-02 11:04:37")
    assert (step["num_zeros"], step["params_norm"], step["throughput_tflops"]) == (
        0.0, 1021.447, 416.6)
    assert out["megatron_timers"].select("iteration", "name", "min_ms", "max_ms").rows() == [
        (200, "forward-backward", 4120.55, 4127.19), (200, "optimizer", 17.40, 18.02)]


def test_variant_c_max_timers(formats_dir):
    timers = read("c.log", variants(formats_dir)["C"])["megatron_timers"]
    assert timers.select("name", "min_ms", "max_ms").rows() == [
        ("forward-backward", None, 4127.19), ("optimizer", None, 18.02)]


def test_variant_d_all_timers_per_rank(formats_dir):
    timers = read("d.log", variants(formats_dir)["D"])["megatron_timers"]
    assert timers.select("name", "rank", "max_ms").rows() == [
        ("forward-backward", 0, 4121.07), ("forward-backward", 1, 4120.55),
        ("forward-backward", 2, 4122.93), ("forward-backward", 3, 4127.19),
        ("optimizer", 0, 17.40), ("optimizer", 1, 17.52), ("optimizer", 2, 17.61),
        ("optimizer", 3, 18.02)]
    assert timers["min_ms"].to_list() == timers["max_ms"].to_list()


def test_variant_e_microseconds_skipped_iteration_moe_losses(formats_dir):
    out = read("e.log", variants(formats_dir)["E"])
    step = out["megatron_steps"].row(0, named=True)
    assert step["ts_ns"] == ns("2026-03-02 17:45:09.771204")
    assert (step["grad_norm"], step["loss_scale"], step["skipped_iters"]) == (None, 32768.0, 1)
    assert json.loads(step["extra_json"]) == {"mtp_1 loss": 3.104662,
                                              "load_balancing_loss": 1.003112}
    e2 = read("e2.log", variants(formats_dir)["E2"])["megatron_steps"].row(0, named=True)
    assert json.loads(e2["extra_json"]) == {"load_balancing_loss": 1.0}
    assert e2["ts_ns"] == ns("2026-07-21 08:02:44.118830")


def test_variant_f_launcher_prefixes(formats_dir):
    steps = read("f.log", variants(formats_dir)["F"])["megatron_steps"]
    assert steps["iteration"].to_list() == [1530, 1530]
    assert steps["ts_ns"].to_list() == [ns("2026-03-02 17:45:09.771204")] * 2
    assert steps["grad_norm"].to_list() == [0.288, 0.288]


def test_variant_g_megatron_deepspeed(formats_dir):
    step = read("g.log", variants(formats_dir)["G"])["megatron_steps"].row(0, named=True)
    assert (step["iteration"], step["train_iters"], step["consumed_tokens"]) == (2, 95367, 8388608)
    assert (step["elapsed_ms"], step["throughput_tflops"], step["num_zeros"]) == (769990.0,
                                                                                  108.47, 0.0)
    assert step["learning_rate"] == 3.787e-06
    assert json.loads(step["extra_json"]) == {"samples per second": 2.66}


def test_sniff_claims_megatron_logs_only(formats_dir, real_dir):
    for name in ("megatron_train.log", "megatron_train_variants.log"):
        path = formats_dir / name
        assert READER.sniff(Source.from_bytes(name, path.read_bytes()))
    others = [formats_dir / n for n in ("nccl_debug_coll.log", "nccl_debug_coll_v2.27.log",
                                        "nccl_init.log", "dcgmi_dmon.txt")]
    others += [real_dir / "mlperf-gpt3" / "raw_eos_n64_gpt3_result_0.txt",
               real_dir / "alibaba-pai-minibatch" / "job_2_norm.csv"]
    for path in others:
        assert not READER.sniff(Source.from_bytes(path.name, path.read_bytes())), path.name


LINE = (" [2025-10-14 09:14:04.103000] iteration       10/  500000 | consumed samples:         "
        "5120 | elapsed time per iteration (ms): {elapsed} | learning rate: 1.500000E-06 | "
        "global batch size:   512 | lm loss: {loss} | loss scale: 1.0 | grad norm: {grad} | "
        "number of skipped iterations:   0 | number of nan iterations:   0 |")


def test_interleaved_nccl_lines_are_skipped_and_bad_numbers_kept_as_null():
    log = "\n".join([
        "gpu-b03:88412:88412 [0] NCCL INFO Channel 00/02 :    0   1",
        LINE.format(elapsed="7410.3", loss="nan", grad="inf"),
        "gpu-b03:88412:88530 [0] NCCL INFO AllReduce: opCount 1a sendbuff 0x7f recvbuff 0x7f",
        "/usr/lib/python3/warnings.py:109: UserWarning: something",
    ]) + "\n"
    out = read("mixed.log", log.encode())
    step = out["megatron_steps"].row(0, named=True)
    assert (step["lm_loss"], step["grad_norm"], step["elapsed_ms"]) == (None, None, 7410.3)
    assert out["skipped"] == 3
    assert out["notes"] == ["2 values were not finite numbers (nan, inf, N/A) and are kept as "
                            "null: grad norm x1, lm loss x1"]


def test_torn_timer_line_quarantined_with_its_line_number():
    log = "\n".join([
        LINE.format(elapsed="4000.0", loss="1.0E+00", grad="0.5"),
        "(min, max) time across ranks (ms):",
        "    forward-backward ...............................: (4120.55, 4127.19)",
        "    optimizer ......................................: (17.4",
        "    all-grads-sync .................................: (40.00, 41.00)",
    ]) + "\n"
    out = read("torn.log", log.encode())
    assert out["quarantine"].select("line_no", "reason").rows() == [
        (4, "torn or unrecognised timer line")]
    assert out["megatron_timers"]["name"].to_list() == ["forward-backward", "all-grads-sync"]


def test_timezone_and_log_interval_options():
    log = (LINE.format(elapsed="4000.0", loss="1.0E+00", grad="0.5") + "\n").encode()
    out = read("tz.log", log, timezone="Asia/Shanghai", log_interval="5")
    assert out["megatron_steps"]["ts_ns"][0] == ns("2025-10-14 01:14:04.103")
    assert out["megatron_steps"]["interval_iters"][0] == 5
    with pytest.raises(InputError, match="log_interval"):
        read("tz.log", log, log_interval="ten")


def test_ingest_is_idempotent(formats_dir, tmp_path):
    for _ in range(2):
        summary = ingest([formats_dir / "megatron_train.log"], tmp_path / "ds")
    (source,) = summary.sources
    assert source.format == "megatron-log"
    from tracekit.core.dataset import open_dataset

    dataset = open_dataset(tmp_path / "ds")
    assert dataset.table("megatron_steps").collect().height == 10
    assert dataset.table("quarantine").collect()["line_no"].to_list() == [62]


def test_numbers_their_columns_cannot_hold_are_quarantined_with_their_line(formats_dir):
    lines = (formats_dir / "megatron_train.log").read_text().splitlines(keepends=True)
    clean = read("train.log", "".join(lines).encode())
    lines[0] = lines[0].replace("world size: 16", "world size: 18446744073709551616")
    lines[12] = lines[12].replace("global batch size:   512", "global batch size:   1e30")
    lines[13] = lines[13].replace("[Rank 0]", "[Rank 99999999999]")
    lines[31] = lines[31].replace("iteration       20/", f"iteration       {'9' * 40}/")
    out = read("train.log", "".join(lines).encode())
    new = out["quarantine"].join(clean["quarantine"], on="line_no", how="anti")
    assert new.select("line_no", "reason").sort("line_no").rows() == [
        (n, "a number does not fit its column (out of range)") for n in (1, 13, 14, 32)]
    assert out["megatron_steps"].height == clean["megatron_steps"].height - 2
    assert out["parallel_layout"].height == clean["parallel_layout"].height - 1
    assert out["lines"] == clean["lines"]
    assert out["skipped"] == clean["skipped"]


# Lines below are built with the format strings of the tools that print them (repository, file,
# commit), so their spacing and number formatting are the tools' own.


def printed(fields: list[tuple[str, tuple]]) -> str:
    """A line printed field by field, each with its tool's format string."""
    return "".join(text.format(*values) for text, values in fields)


def v2_iteration_line(iteration: int, elapsed_ms: float, loss: float) -> str:
    """NVIDIA/Megatron-LM megatron/training.py training_log (v2.x, 2021; the strings of
    variant A in FORMATS.md 2.1)."""
    return printed([
        (" iteration {:8d}/{:8d} |", (iteration, 500)),
        (" consumed samples: {:12d} |", (iteration * 32,)),
        (" elapsed time per iteration (ms): {:.1f} |", (elapsed_ms,)),
        (" learning rate: {:.3E} |", (1.5e-05,)),
        (" global batch size: {:5d} |", (32,)),
        (" {}: {:.6E} |", ("lm loss", loss)),
        (" loss scale: {:.1f} |", (4096.0,)),
        (" number of skipped iterations: {:3d} |", (0,)),
        (" number of nan iterations: {:3d} |", (0,)),
    ])


def one_line_timers(values: dict[str, float]) -> str:
    """NVIDIA/Megatron-LM megatron/global_vars.py Timers.log (commit 00ac56ab2ccd), as in
    bigscience-workshop/Megatron-DeepSpeed: 'time (ms)' then ' | {}: {:.2f}' per timer, the
    printing rank's own averages."""
    return printed([("time (ms)", ()), *((" | {}: {:.2f}", item) for item in values.items())])


def test_one_line_timers_of_megatron_v2_are_read_per_iteration():
    log = "\n".join([
        v2_iteration_line(10, 1234.5, 10.23456),
        one_line_timers({"forward-compute": 400.123, "backward-compute": 700.339,
                         "optimizer": 30.02}),
        v2_iteration_line(20, 1200.0, 9.5),
        one_line_timers({"forward-compute": 410.0, "backward-compute": 690.0}),
        one_line_timers({"forward-compute": 410.0})[:-5] + " | backwa",
    ]) + "\n"
    out = read("v2.log", log.encode())
    assert out["megatron_timers"].select("iteration", "interval_iters", "name", "rank", "min_ms",
                                         "max_ms").rows() == [
        (10, 10, "forward-compute", None, 400.12, 400.12),
        (10, 10, "backward-compute", None, 700.34, 700.34),
        (10, 10, "optimizer", None, 30.02, 30.02),
        (20, 10, "forward-compute", None, 410.0, 410.0),
        (20, 10, "backward-compute", None, 690.0, 690.0)]
    assert out["megatron_steps"]["elapsed_ms"].to_list() == [1234.5, 1200.0]
    assert out["quarantine"].select("line_no", "reason").rows() == [
        (5, "torn or unrecognised timer line")]
    assert out["skipped"] == 0


def test_megatron_2019_keys_without_colon_are_sniffed_and_read():
    # NVIDIA/Megatron-LM pretrain_gpt2.py train() (2019, commit 7abd3e90d09c): no consumed
    # samples, ' learning rate {:.3E} |' and ' lm loss {:.6E} |' without a colon
    line = printed([(" iteration {:8d}/{:8d} |", (100, 320000)),
                    (" elapsed time per iteration (ms): {:.1f} |", (512.34,)),
                    (" learning rate {:.3E} |", (1.5e-05,)),
                    (" lm loss {:.6E} |", (6.1234567,)),
                    (" loss scale {:.1f} |", (4096.0,))])
    timers = one_line_timers({"forward": 120.5, "backward": 300.1, "batch generator": 1.0})
    data = f"{line}\n{timers}\n".encode()
    assert READER.sniff(Source.from_bytes("gpt2.log", data))
    out = read("gpt2.log", data)
    step = out["megatron_steps"].row(0, named=True)
    assert (step["iteration"], step["train_iters"], step["elapsed_ms"], step["learning_rate"],
            step["lm_loss"], step["loss_scale"], step["extra_json"]) == (
        100, 320000, 512.3, 1.5e-05, 6.123457, 4096.0, None)
    assert out["megatron_timers"]["name"].to_list() == ["forward", "backward", "batch generator"]
    assert out["quarantine"].height == 0


def test_torchrun_role_prefixes_are_stripped_before_timer_blocks():
    # torch/distributed/elastic/multiprocessing/tail_log.py: header = f"[{self._name}{local_rank}]:"
    # (role "default", or "rank" as torchtitan's run_train.sh passes --role rank); under srun -l
    # the label comes first
    timer = "    {}: ({:.2f}, {:.2f})"  # megatron/core/timers.py, minmax
    for prefix in ("[rank7]:", "[default7]:", "7: [default7]:"):
        log = "\n".join(prefix + text for text in [
            v2_iteration_line(10, 1234.5, 10.0),
            "(min, max) time across ranks (ms):",
            timer.format("forward-backward ".ljust(48, "."), 1200.0, 1230.5),
        ]) + "\n"
        out = read("prefixed.log", log.encode())
        assert out["megatron_timers"].select("name", "min_ms", "max_ms").rows() == [
            ("forward-backward", 1200.0, 1230.5)], prefix
        assert out["skipped"] == 0, prefix


def nemo_progress_line(n: int, total: int, metrics: dict) -> str:
    """NVIDIA/NeMo nemo/lightning/pytorch/callbacks/progress_printer.py (commit 01f7dbc537d7)
    ProgressPrinter: f" epoch {e}, iteration {n}/{total}" after "Training", then f' | {metric}:
    {val}' for a whole float (as int), else f' | {metric}: {val:.4}'."""
    fields = [f" | {key}: {int(value)}" if value.is_integer() else f" | {key}: {value:.4}"
              for key, value in metrics.items()]
    return f"Training epoch {0}, iteration {n}/{total}" + "".join(fields)


def test_nemo2_progress_printer_lines_give_step_times():
    lines = [
        "[NeMo I 2025-02-10 17:29:34 nemo_logging:393] Setting up ModelTransform",
        nemo_progress_line(0, 249, {"lr": 1.9607843e-06, "global_batch_size": 8.0,
                                    "global_step": 0.0, "reduced_train_loss": 1.3151,
                                    "train_step_timing in s": 7.12634}),
        nemo_progress_line(1, 249, {"lr": 3.9215686e-06, "global_batch_size": 8.0,
                                    "global_step": 1.0, "reduced_train_loss": 1.65312,
                                    "train_step_timing in s": 2.50511,
                                    "consumed_samples": 16.0}),
        "Validation: iteration 1/10",
    ]
    data = ("\n".join(lines) + "\n").encode()
    assert lines[2] == ("Training epoch 0, iteration 1/249 | lr: 3.922e-06 | global_batch_size: "
                        "8 | global_step: 1 | reduced_train_loss: 1.653 | train_step_timing in "
                        "s: 2.505 | consumed_samples: 16")
    assert READER.sniff(Source.from_bytes("nemo.log", data))
    out = read("nemo.log", data)
    steps = out["megatron_steps"]
    assert steps.select("iteration", "train_iters", "elapsed_ms", "learning_rate",
                        "global_batch_size", "lm_loss", "consumed_samples",
                        "interval_iters").rows() == [
        (0, 249, 7126.0, 1.961e-06, 8, 1.315, None, 1),
        (1, 249, 2505.0, 3.922e-06, 8, 1.653, 16, 1)]
    assert [json.loads(e) for e in steps["extra_json"]] == [{"global_step": 0.0},
                                                             {"global_step": 1.0}]
    assert out["iterations"].select("iteration", "duration_s", "quality").rows() == [
        (0, 7.126, "ok"), (1, 2.505, "ok")]
    assert (out["quarantine"].height, out["skipped"]) == (0, 2)


def lightning_number(value: float) -> str:
    """A metric as tqdm's set_postfix shows it in a Lightning bar: tqdm's format_num ('{0:.3g}',
    '+0' -> '+', the shorter of it and str()), then Lightning's Tqdm.format_num pads a float
    without exponent to 5 characters (lightning/pytorch/callbacks/progress/tqdm_progress.py)."""
    short = f"{value:.3g}".replace("+0", "+").replace("-0", "-")
    text = short if len(short) < len(str(value)) else str(value)
    if "e" not in text:
        text = (text if "." in text else text + ".").ljust(5, "0")
    return text


BAR_FORMAT = ("{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} "
              "[{elapsed}<{remaining}{postfix}]")


def nemo_bar(n: int, total: int, metrics: dict, older: bool | None = True) -> str:
    """One tqdm update of NeMo's MegatronProgressBar (NVIDIA/NeMo
    nemo/lightning/pytorch/callbacks/progress_bar.py): bar_format "{desc}: {percentage:3.0f}%|
    {bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}{postfix}]" (commit 7468268e2ec9; later
    "{desc} {n_fmt}/{total_fmt}{postfix}"), desc "Epoch 0: " (tqdm's set_description adds ': '),
    postfix ', ' + ', '.join(key=value)."""
    postfix = ", " + ", ".join(f"{k}={lightning_number(v)}" for k, v in metrics.items())
    if older is None:  # Lightning's TQDMProgressBar: tqdm's default format, l_bar then rate
        return ("{desc}{percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, "
                "{rate_fmt}{postfix}]").format(desc="Epoch 0: ", percentage=100 * n / total,
                                              bar="\u2588" * 5 + "\u258f    ", n_fmt=n,
                                              total_fmt=total, elapsed="05:30",
                                              remaining="05:05", rate_fmt="6.35s/it",
                                              postfix=postfix)
    if not older:
        return "{desc} {n_fmt}/{total_fmt}{postfix}".format(
            desc="Epoch 0: ", n_fmt=n, total_fmt=total, postfix=postfix)
    done = 10 * n // total
    return BAR_FORMAT.format(desc="Epoch 0: ", percentage=100 * n / total,
                             bar="\u2588" * done + " " * (10 - done), n_fmt=n, total_fmt=total,
                             elapsed="05:21", remaining="05:27", postfix=postfix)


def test_nemo1_progress_bar_updates_in_one_carriage_return_line():
    """tqdm redraws with '\\r', so past the sniffed head a whole epoch is one line; the last
    update of a step wins (the bar is redrawn before set_postfix), a step is global_step + 1."""
    def metrics(step: int, seconds: float) -> dict:
        return {"reduced_train_loss": 5.4 - step / 100, "global_step": float(step),
                "consumed_samples": 256.0 * (step + 1), "train_step_timing in s": seconds}

    updates = [nemo_bar(49, 100, metrics(48, 3.1204)), nemo_bar(50, 100, metrics(48, 3.1204)),
               nemo_bar(50, 100, metrics(49, 3.1299)),
               nemo_bar(51, 100, metrics(50, 3.14), older=False),
               nemo_bar(52, 100, metrics(51, 3.15), older=None)]
    assert updates[2] == ("Epoch 0: :  50%|" + "\u2588" * 5 + "     | 50/100 [05:21<05:27, "
                          "reduced_train_loss=4.910, global_step=49.00, consumed_samples=12800.0, "
                          "train_step_timing in s=3.130]")
    # the NeMo logger's own lines (nemo/utils/formatters/base.py BaseNeMoFormatter) fill the head
    head = "[NeMo I 2024-05-01 10:00:00 exp_manager:396] Experiments will be logged\n" * 1000
    data = (head + "\r".join(updates) + "\n").encode()
    assert READER.sniff(Source.from_bytes("nemo1.log", data))
    out = read("nemo1.log", data)
    assert out["megatron_steps"].select("iteration", "train_iters", "elapsed_ms", "lm_loss",
                                        "consumed_samples", "interval_iters").rows() == [
        (49, 100, 3120.0, 4.92, 12544, 1), (50, 100, 3130.0, 4.91, 12800, 1),
        (51, 100, 3140.0, 4.9, 13056, 1), (52, 100, 3150.0, 4.89, 13312, 1)]
    assert out["iterations"].select("iteration", "duration_s", "quality").rows() == [
        (49, 3.12, "ok"), (50, 3.13, "ok"), (51, 3.14, "ok"), (52, 3.15, "ok")]
    assert (out["lines"], out["skipped"], out["quarantine"].height) == (1001, 1000, 0)

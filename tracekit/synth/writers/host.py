"""Host exports: node_exporter CPU scrapes and ``ipmitool sensor`` snapshots.

node_exporter (``node_cpu_seconds_total{cpu,mode}`` counters, ``node_load1/5/15``) is written
as a collector loop saves ``curl :9100/metrics``: a ``# ts=<epoch> host=<name>`` line, then the
scrape with each sample's trailing timestamp in ms. Families and series come in the order
client_golang's registry sorts them (family name, then label values as strings, so cpu "10"
comes before cpu "2"); values print as Go's ``strconv.FormatFloat(v, 'g', -1, 64)`` does.

ipmitool ``sensor`` snapshots (``lib/ipmi_sensor.c``: ``%-16s | %-10.3f | %-10s | %-6s`` then
six ``| %-10s`` thresholds, FORMATS.md 5.1) follow the same ``# ts= host=`` marker convention,
each snapshot led by the ``$ ipmitool sensor`` command line.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

CPU_MODES = ("idle", "iowait", "irq", "nice", "softirq", "steal", "system", "user")
"""node_exporter's Linux modes (/proc/stat columns), in the order the registry sorts them."""

BUSY_SPLIT = {"user": 0.80, "system": 0.14, "softirq": 0.03, "irq": 0.01, "nice": 0.02}
"""How busy time splits over modes on a training host (user-space Python and CUDA driver
calls dominate)."""

IOWAIT_SHARE_OF_IDLE = 0.01

USER_HZ = 100
"""/proc/stat counts in USER_HZ ticks, so node_exporter's counters are multiples of 0.01 s."""

BOOT_UPTIME_S = 3 * 86_400.0
"""Hosts have been up about three days when the job starts (counters do not start at 0)."""

TRAINING_CORES_PER_GPU = 1.5
"""Busy cores per local rank: its Python / kernel-launch thread plus data-loader workers."""

BACKGROUND_BUSY = 0.02
"""Share of the host's CPUs busy with daemons (monitoring agents, sshd, kubelet)."""

IPMI_INTERVAL_S = 60
"""``ipmitool sensor`` takes seconds per run over the BMC, so collectors poll every minute."""

IPMI_COMMAND = "ipmitool sensor"
"""The collector echoes the command before its output (``$ ipmitool sensor``), as in a shell
transcript (tracekit's ipmitool reader also knows bare ``sensor`` output by its shape)."""

GPU_TEMP_THRESHOLDS = (None, None, None, 85.0, 92.0, None)
"""lower nr / cr / nc, upper nc / cr / nr of the GPU temperature sensors."""


def busy_share(gpus_per_host: int, host_cpus: int, contention: np.ndarray) -> np.ndarray:
    """Share of the host's CPUs that are busy, per sample. Training keeps
    ``TRAINING_CORES_PER_GPU`` cores per GPU busy; co-located work that slows the host side of
    the job by ``contention`` (>= 1) must oversubscribe the CPUs, taking 1 - 1/f^2 of what is
    left (a 1.5x slowdown leaves the host 72 % busier, 2.5x nearly saturated)."""
    base = min(0.9, BACKGROUND_BUSY + TRAINING_CORES_PER_GPU * gpus_per_host / host_cpus)
    return base + (1.0 - base) * (1.0 - 1.0 / np.square(contention))


def go_float_centi(centi: pl.Expr) -> pl.Expr:
    """A non-negative value held as integer hundredths, printed as Go's ``FormatFloat(v, 'g',
    -1, 64)``: shortest digits, exponent form from 1e6 on (``1.23456789e+06``)."""
    whole = centi // 100
    fraction = (centi % 100).cast(pl.String).str.pad_start(2, "0").str.strip_chars_end("0")
    plain = pl.when(fraction == "").then(whole.cast(pl.String)).otherwise(
        pl.concat_str(whole.cast(pl.String), pl.lit("."), fraction))
    digits = centi.cast(pl.String).str.strip_chars_end("0")
    exponent = whole.cast(pl.String).str.len_chars() - 1
    mantissa = pl.when(digits.str.len_chars() > 1).then(
        pl.concat_str(digits.str.head(1), pl.lit("."), digits.str.slice(1))).otherwise(digits)
    scientific = pl.concat_str(mantissa, pl.lit("e+"),
                               exponent.cast(pl.String).str.pad_start(2, "0"))
    return pl.when(whole >= 1_000_000).then(scientific).otherwise(plain)


def write_node_exporter(path: Path, host: str, times_ns: np.ndarray, busy: np.ndarray,
                        runnable: np.ndarray, host_cpus: int, rng: np.random.Generator) -> None:
    """Scrapes at ``times_ns`` of a host whose CPUs are ``busy`` (share per scrape) with
    ``runnable`` tasks on average (what the load averages damp)."""
    scrapes = len(times_ns)
    interval_s = np.diff(times_ns, prepend=times_ns[0]) / 1e9
    # per-CPU busy share around the host's (the scheduler does not spread load evenly)
    per_cpu = np.clip(busy[:, None] * rng.lognormal(0.0, 0.25, (scrapes, host_cpus)), 0.0, 1.0)
    idle = 1.0 - per_cpu
    shares = np.stack([idle * (1 - IOWAIT_SHARE_OF_IDLE) if mode == "idle"
                       else idle * IOWAIT_SHARE_OF_IDLE if mode == "iowait"
                       else per_cpu * BUSY_SPLIT.get(mode, 0.0) for mode in CPU_MODES], axis=2)
    boot = np.round(BOOT_UPTIME_S * USER_HZ * shares[0]).astype(np.int64)
    ticks = np.round(shares * (interval_s * USER_HZ)[:, None, None]).astype(np.int64)
    order = sorted(range(host_cpus), key=str)
    counters = (boot[None] + np.cumsum(ticks, axis=0))[:, order, :]
    ms = pl.Series(times_ns // 1_000_000).cast(pl.String)
    series = [f'node_cpu_seconds_total{{cpu="{cpu}",mode="{mode}"}} '
              for cpu in order for mode in CPU_MODES]
    per_scrape = len(series)
    cpu_lines = pl.select(pl.concat_str(
        pl.lit(pl.Series(series)).gather(np.tile(np.arange(per_scrape), scrapes)),
        go_float_centi(pl.lit(pl.Series(counters.ravel()))), pl.lit(" "),
        pl.lit(ms).gather(np.repeat(np.arange(scrapes), per_scrape))))
    blocks = [pl.Series([f"# ts={t // 10**9} host={host}\n# HELP node_cpu_seconds_total Seconds "
                         "the CPUs spent in each mode.\n# TYPE node_cpu_seconds_total counter"
                         for t in times_ns]), cpu_lines.to_series()]
    for minutes in (1, 15, 5):  # node_load1 < node_load15 < node_load5 as strings
        name = f"node_load{minutes}"
        load = _load_average(runnable, interval_s, minutes)
        blocks.append(pl.select(pl.format(
            f"# HELP {name} {minutes}m load average.\n# TYPE {name} gauge\n{name} {{}} {{}}",
            go_float_centi(pl.lit(pl.Series(np.round(load * 100).astype(np.int64)))),
            pl.lit(ms))).to_series())
    # each scrape: its header, its CPU lines, then the load blocks; place rows by arithmetic
    lines = 1 + per_scrape + 3
    scrape = np.arange(scrapes)[:, None] * lines
    target = np.concatenate([scrape.ravel(), (scrape + 1 + np.arange(per_scrape)).ravel(),
                             *((scrape + 1 + per_scrape + b).ravel() for b in range(3))])
    source = np.empty_like(target)
    source[target] = np.arange(len(target))
    text = pl.concat([b.alias("text") for b in blocks]).gather(source)
    with path.open("wb") as stream:
        text.to_frame().write_csv(stream, include_header=False, quote_style="never")


def _load_average(runnable: np.ndarray, interval_s: np.ndarray, minutes: int) -> np.ndarray:
    """The kernel's exponentially damped moving average of runnable tasks."""
    decay = np.exp(-interval_s / (60.0 * minutes))
    load = np.empty_like(runnable)
    level = runnable[0] * 0.8
    for i, (x, d) in enumerate(zip(runnable, decay, strict=True)):
        level = level * d + x * (1 - d)
        load[i] = level
    return load


def write_ipmitool(path: Path, host: str, times_ns: np.ndarray, sensors: dict[str, tuple]) -> None:
    """Snapshots of ``ipmitool sensor``: ``sensors`` maps a sensor name to (unit, values per
    snapshot, thresholds); a discrete sensor's values are (reading, state) strings."""
    with path.open("w") as stream:
        for s, ts in enumerate(times_ns):
            lines = [f"# ts={ts // 10**9} host={host}", f"$ {IPMI_COMMAND}"]
            for name, (unit, values, thresholds) in sensors.items():
                lines.append(_sensor_line(name, unit, values[s], thresholds))
            stream.write("\n".join(lines) + "\n")


def _sensor_line(name: str, unit: str, value, thresholds: tuple) -> str:
    if unit == "discrete":
        reading, status = value
    else:
        reading = f"{value:<10.3f}"
        status = _status(value, thresholds)
    limits = "".join(f"| {'na' if t is None else f'{t:.3f}':<10}" for t in thresholds)
    return f"{name:<16} | {reading:<10} | {unit:<10} | {status:<6}{limits}"


def _status(value: float, thresholds: tuple) -> str:
    """ipmitool's state: the most severe threshold crossed (lnr/lcr/lnc below, unc/ucr/unr
    above), else ok."""
    lnr, lcr, lnc, unc, ucr, unr = thresholds
    for limit, state, below in ((unr, "nr", False), (ucr, "cr", False), (unc, "nc", False),
                                (lnr, "nr", True), (lcr, "cr", True), (lnc, "nc", True)):
        if limit is not None and (value <= limit if below else value >= limit):
            return state
    return "ok"

"""Monitoring exports that agree with the simulation: dcgm-exporter scrapes (SM clock, GPU
temperature, power, utilisation, clock-event reason bits) and mlx5 RoCE hw_counters snapshots
(CNP / ECN surges on the NICs of a congested link), every 15 s per host.

A throttled GPU shows a lower SM clock, a higher temperature and the thermal reason bits; a
degraded one the clock drop with hw_slowdown; congestion raises the CNP and ECN counters of the
hosts involved, and so does a decoy surge (traffic that is not the job's), without a slowdown.
Every GPU of a synchronous job stays busy, as on real jobs (paper-notes.md:
hardware counters alone cannot localise). Host exports (tracekit/synth/writers/host.py) agree
too: CPU contention raises the host's busy CPU share and load, a thermal episode its inlet,
exhaust and GPU temperatures and fan speeds in the ipmitool snapshots.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tracekit.synth.faults import DECOY
from tracekit.synth.writers.host import (
    BACKGROUND_BUSY,
    GPU_TEMP_THRESHOLDS,
    IPMI_INTERVAL_S,
    busy_share,
    write_ipmitool,
    write_node_exporter,
)
from tracekit.synth.writers.scrape_files import SCRAPE_NAMES, split_into_scrapes

SCRAPE_INTERVAL_S = 15
"""Acme (NSDI'24) and typical Prometheus setups scrape DCGM and node metrics every 15 s."""

SW_THERMAL, HW_THERMAL, HW_SLOWDOWN = 0x20, 0x40, 0x8
"""DCGM clock-event reason bits (dcgm_fields.h, DCGM_FI_DEV_CLOCKS_EVENT_REASONS)."""

CNP_RATE_PER_SEVERITY = 40_000.0
"""CNPs per second per unit of (severity - 1) on a congested NIC; healthy NICs see a few."""

DCGM_METRICS = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", "sm"),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "temp"),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "power"),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "util"),
    ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge", "Current clock event reasons (bitmask).",
     "reasons"),
)
INLET_RISE_C = 6.0
"""A thermal episode's cause on the host side: hot-aisle recirculation or a cooling fault
raises the inlet air temperature (and with it every temperature behind it)."""

BASE_GPU_TEMP_C = 52.0
THROTTLE_TEMP_RISE_C = 33.0
"""A throttling GPU sits at its slowdown temperature (~85 C) instead of ~52 C."""

MLX5_COUNTERS = ("np_cnp_sent", "np_ecn_marked_roce_packets", "out_of_sequence",
                 "packet_seq_err", "rp_cnp_handled", "rp_cnp_ignored")


def scrape_times_ns(start_ns: int, end_ns: int) -> np.ndarray:
    first = (start_ns // 10**9 // SCRAPE_INTERVAL_S) * SCRAPE_INTERVAL_S
    return np.arange(first, end_ns // 10**9 + SCRAPE_INTERVAL_S, SCRAPE_INTERVAL_S) * 10**9


def write_monitoring(out: Path, run, starts_ns: np.ndarray, ends_ns: np.ndarray,
                     scrape_files: bool = False) -> None:
    """Every host's exports under ``out/monitoring/<host>/``: one series file per exporter, or
    with ``scrape_files`` one file per scrape named by exporter, host and time."""
    L, hw = run.layout, run.layout.hardware
    times = scrape_times_ns(int(starts_ns[0]), int(ends_ns[-1]))
    iteration = np.clip(np.searchsorted(starts_ns, times, side="right") - 1, 0, len(starts_ns) - 1)
    training = (times >= starts_ns[0]) & (times <= ends_ns[-1])
    rng = np.random.default_rng([run.spec.seed, 4])
    host_rng = np.random.default_rng([run.spec.seed, 5])
    gpus = L.gpus_per_host
    for host_index, host in enumerate(run.hosts):
        folder = out / "monitoring" / host
        folder.mkdir(parents=True, exist_ok=True)
        ranks = [r for r in range(L.world) if L.host_of(r) == host_index]
        clock = np.full((len(times), gpus), float(hw.sm_clock_mhz))
        temp = BASE_GPU_TEMP_C + rng.normal(0, 1.5, (len(times), gpus))
        power = hw.tdp_w * (0.82 + rng.normal(0, 0.02, (len(times), gpus)))
        reasons = np.zeros((len(times), gpus), dtype=np.int64)
        cnp_rate = 3.0 + rng.random((len(times), hw.nics_per_host)) * 4
        contention = np.ones(len(times))
        inlet_rise = np.zeros(len(times))
        for fault in run.faults:
            factor = fault.factor(iteration)
            on = factor > 1
            if fault.cause == "cpu-contention" and fault.host == host_index:
                contention = np.maximum(contention, factor)
            if fault.rank is not None and fault.rank in ranks:
                g = L.local_gpu(fault.rank)
                clock[:, g] /= factor
                power[:, g] /= factor
                if fault.cause == "gpu-thermal":
                    temp[:, g] += np.where(on, THROTTLE_TEMP_RISE_C, 0.0)
                    inlet_rise = np.maximum(inlet_rise, np.where(on, INLET_RISE_C, 0.0))
                    reasons[:, g] |= np.where(on, SW_THERMAL | HW_THERMAL, 0)
                else:
                    reasons[:, g] |= np.where(on, HW_SLOWDOWN, 0)
            involved = (fault.link is not None and host_index in fault.link) or (
                fault.cause in ("network-congestion", DECOY) and fault.link is None
                and fault.host == host_index)
            if involved:
                nics = slice(None) if fault.nic is None else slice(fault.nic, fault.nic + 1)
                cnp_rate[:, nics] += ((factor - 1) * CNP_RATE_PER_SEVERITY)[:, None]
        util = np.broadcast_to(np.where(training[:, None], 100, 0), clock.shape)
        values = {"sm": np.round(clock).astype(int), "temp": np.round(temp).astype(int),
                  "power": power, "util": util, "reasons": reasons}
        _write_dcgm(folder / "dcgm_exporter.prom", host, run, times, values)
        _write_mlx5(folder / "mlx5_hw_counters.txt", host, times, cnp_rate, rng)
        busy = np.where(training, busy_share(gpus, hw.host_cpus, contention), BACKGROUND_BUSY)
        write_node_exporter(folder / "node_exporter.prom", host, times, busy,
                            busy * hw.host_cpus * contention, hw.host_cpus, host_rng)
        every = IPMI_INTERVAL_S // SCRAPE_INTERVAL_S
        write_ipmitool(folder / "ipmitool_sensor.txt", host, times[::every],
                       _ipmi_sensors(np.round(temp[::every]), power[::every].sum(axis=1),
                                     busy[::every], inlet_rise[::every], host_rng))
        if scrape_files:
            for name in SCRAPE_NAMES:
                split_into_scrapes(folder / name, host)


def _ipmi_sensors(gpu_temp: np.ndarray, gpu_power_w: np.ndarray, busy: np.ndarray,
                  inlet_rise: np.ndarray, rng: np.random.Generator) -> dict[str, tuple]:
    """The BMC's view of a host: air temperatures, CPU and GPU temperatures (the GPUs' agree
    with DCGM), fans that follow the hottest GPU, and the chassis power."""
    n = len(busy)
    inlet = 24.0 + inlet_rise + rng.normal(0, 0.3, n)
    hottest = gpu_temp.max(axis=1)
    air = (None, 3.0, 8.0)
    sensors = {
        "Inlet Temp": ("degrees C", np.round(inlet), (None, -7.0, 3.0, 42.0, 47.0, None)),
        "Exhaust Temp": ("degrees C", np.round(inlet + 12.0 + gpu_power_w / 400.0),
                         (*air, 70.0, 75.0, None)),
    }
    for cpu in (1, 2):
        cpu_temp = inlet + 20.0 + 30.0 * busy + rng.normal(0, 0.8, n)
        sensors[f"CPU{cpu} Temp"] = ("degrees C", np.round(cpu_temp), (*air, 93.0, 98.0, None))
    for g in range(gpu_temp.shape[1]):
        sensors[f"GPU{g + 1} Temp"] = ("degrees C", gpu_temp[:, g], GPU_TEMP_THRESHOLDS)
    fan_rpm = 7200.0 + 90.0 * (hottest - BASE_GPU_TEMP_C) + 250.0 * (inlet - 24.0)
    for fan in range(1, 7):
        sensors[f"Fan{fan}A"] = ("RPM", np.round(fan_rpm + rng.normal(0, 60, n), -1),
                                 (None, 720.0, 1080.0, None, None, None))
    chassis_w = 900.0 + gpu_power_w + 500.0 * busy + rng.normal(0, 15, n)
    sensors["Pwr Consumption"] = ("Watts", np.round(chassis_w, -1),
                                  (None, None, None, None, 8750.0, 9250.0))
    for supply in (1, 2):
        sensors[f"PS{supply} Status"] = ("discrete", [("0x1", "0x0100")] * n, (None,) * 6)
    return sensors


def host_hex(host: str) -> str:
    """Four stable hex digits from a host name (Python's hash() is salted per process)."""
    return f"{sum(ord(c) * 31 ** i for i, c in enumerate(host)) % 16**4:04x}"


def _write_dcgm(path: Path, host: str, run, times: np.ndarray, values: dict) -> None:
    hw, gpus = run.layout.hardware, run.layout.gpus_per_host
    labels = []
    for g in range(gpus):
        uuid = f"GPU-{run.spec.seed % 16**8:08x}-{host_hex(host)}-4b7e-9a21-{g:012x}"
        bus = f"00000000:{0x18 + 0x10 * g:02X}:00.0"
        labels.append(f'gpu="{g}",UUID="{uuid}",pci_bus_id="{bus}",device="nvidia{g}",'
                      f'modelName="{hw.model_name}",Hostname="{host}",'
                      f'DCGM_FI_DRIVER_VERSION="550.127.05"')
    with path.open("w") as stream:
        for s, ts in enumerate(times):
            ms = ts // 10**6
            lines = []
            for name, kind, help_text, key in DCGM_METRICS:
                lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
                for g in range(gpus):
                    v = values[key][s, g]
                    text = f"{v:f}" if key == "power" else f"{int(v)}"
                    lines.append(f"{name}{{{labels[g]}}} {text} {ms}")
            stream.write("\n".join(lines) + "\n")


def _write_mlx5(path: Path, host: str, times: np.ndarray, cnp_rate: np.ndarray,
                rng: np.random.Generator) -> None:
    nics = cnp_rate.shape[1]
    cnp = np.cumsum(np.round(cnp_rate * SCRAPE_INTERVAL_S), axis=0).astype(np.int64)
    start = rng.integers(10_000, 2_000_000, size=(len(MLX5_COUNTERS), nics))
    series = {
        "np_cnp_sent": start[0] + cnp,
        "np_ecn_marked_roce_packets": start[1] + (cnp * 1.006).astype(np.int64),
        "out_of_sequence": start[2] + (cnp // 5000),
        "packet_seq_err": start[3] + (cnp // 20000),
        "rp_cnp_handled": start[4] + (cnp * 1.9).astype(np.int64),
        "rp_cnp_ignored": np.zeros_like(cnp),
    }
    with path.open("w") as stream:
        for s, ts in enumerate(times):
            lines = [f"# ts={ts // 10**9} host={host}"]
            for nic in range(nics):
                for name in MLX5_COUNTERS:
                    lines.append(f"/sys/class/infiniband/mlx5_{nic}/ports/1/hw_counters/"
                                 f"{name}:{series[name][s, nic]}")
            stream.write("\n".join(lines) + "\n")

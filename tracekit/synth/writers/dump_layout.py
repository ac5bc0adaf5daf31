"""Where the monitoring files of a job lie and what they are called: the layouts sites use.

The monitoring writers leave one series file per exporter under ``monitoring/<host>/``
(``per-host``, the default). Each other layout moves them where a site's collectors would,
split into one file per scrape where the layout names files by time, so tracekit's own jobs
exercise every way a dump's folders and names can (or cannot) tell the host:

- ``flat``: every file in ``monitoring/``, ``dcgm.<host>.<unix_s>.prom``, ``node.<host>...``,
  ``hwc.<host>.<unix_s>.txt`` (the host only in the name for node and hwc);
- ``per-exporter``: ``monitoring/<exporter>/<host>_<unix_s>.<ext>`` (the folder is no host);
- ``per-day``: ``monitoring/<YYYY-MM-DD>/<host>/<exporter>-<unix_s>.<ext>`` (the name holds no
  host, the nearest folder does, the one above is a date);
- ``sysfs-names``: ``monitoring/<host>/hw_counters-<unix_s>.txt``, ``dcgm-exporter-...``,
  ``node-exporter-...``: names made of collector and sysfs words only;
- ``site-names``: ``monitoring/<host>/roce_mon-<unix_s>.txt``, ``gpumon-...``, ``cpumon-...``:
  a site's own collector names, which read as hosts the job does not know;
- ``prometheus-job``: one Prometheus range-query JSON for the whole job
  (``monitoring/prometheus-<job>.json``), hosts in ``Hostname`` labels and ``instance``
  addresses only; the IPMI snapshots stay per host;
- ``federate``: Prometheus ``/federate`` pulls, one text file per exporter and scrape for the
  whole job (``monitoring/federate/<exporter>-<unix_s>.prom``), every sample with its
  ``instance`` address and time; only DCGM's samples name their host (``Hostname``), so the
  node_exporter files' hosts are known from addresses the DCGM files pair with names.

ipmitool snapshots keep their ``# ts= host=`` markers in every layout (collectors log them by
hand).
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from tracekit.synth.writers.scrape_files import SCRAPE_NAMES, split_into_scrapes

IPMI_FILE = "ipmitool_sensor.txt"

_SCRAPE_PATHS: dict[str, Callable[[str, str, int, str], str]] = {
    "flat": lambda exporter, host, ts, ext: f"{exporter}.{host}.{ts}.{ext}",
    "per-exporter": lambda exporter, host, ts, ext: f"{_EXPORTER_FOLDERS[exporter]}/"
                                                    f"{host}_{ts}.{ext}",
    "per-day": lambda exporter, host, ts, ext: f"{_day(ts)}/{host}/{exporter}-{ts}.{ext}",
    "sysfs-names": lambda exporter, host, ts, ext: f"{host}/{_SYSFS_NAMES[exporter]}-{ts}.{ext}",
    "site-names": lambda exporter, host, ts, ext: f"{host}/{_SITE_NAMES[exporter]}-{ts}.{ext}",
}
"""Where a scrape file goes, under ``monitoring/``, per layout."""

_IPMI_PATHS: dict[str, Callable[[str, int], str]] = {
    "flat": lambda host, ts: f"ipmitool_sensor.{host}.txt",
    "per-exporter": lambda host, ts: f"ipmitool/{host}.txt",
    "per-day": lambda host, ts: f"{_day(ts)}/{host}/{IPMI_FILE}",
    "sysfs-names": lambda host, ts: f"{host}/{IPMI_FILE}",
    "site-names": lambda host, ts: f"{host}/{IPMI_FILE}",
    "prometheus-job": lambda host, ts: f"ipmitool/{host}.txt",
    "federate": lambda host, ts: f"ipmitool/{host}.txt",
}

_EXPORTER_FOLDERS = {"dcgm": "dcgm_exporter", "node": "node_exporter", "hwc": "hw_counters"}
_SYSFS_NAMES = {"dcgm": "dcgm-exporter", "node": "node-exporter", "hwc": "hw_counters"}
_SITE_NAMES = {"dcgm": "gpumon", "node": "cpumon", "hwc": "roce_mon"}
"""A site's own collector names, which no list of collector words can know."""

_PROMETHEUS_LAYOUTS = ("prometheus-job", "federate")
"""Layouts that write what a Prometheus server returns rather than the exporters' files."""

DUMP_LAYOUTS = ("per-host", *_SCRAPE_PATHS, *_PROMETHEUS_LAYOUTS)
"""The layouts ``--dump-layout`` chooses from; ``per-host`` is what the writers leave."""

INSTANCE_PORTS = {"dcgm": 9400, "node": 9100}
"""dcgm-exporter's and node_exporter's default ports, in a scrape's ``instance`` label."""

IB_METRICS = {
    "np_cnp_sent": "np_cnp_packets_sent_total",
    "np_ecn_marked_roce_packets": "np_ecn_marked_roce_packets_received_total",
    "rp_cnp_handled": "rp_cnp_packets_handled_total",
    "rp_cnp_ignored": "rp_cnp_ignored_packets_received_total",
    "out_of_sequence": "out_of_sequence_packets_received_total",
    "packet_seq_err": "packet_sequence_errors_total",
}
"""node_exporter's infiniband collector names for the hw_counters the writers make
(``node_infiniband_<name>``)."""


def arrange(monitoring: Path, hosts: list[str], layout: str, job: str) -> None:
    """Move the per-host series files under ``monitoring`` into ``layout``."""
    if layout == "per-host":
        return
    if layout not in DUMP_LAYOUTS:
        raise ValueError(f"dump layout {layout!r} is not one of {', '.join(DUMP_LAYOUTS)}")
    series: list[dict] = []
    for host in hosts:
        folder = monitoring / host
        ipmi = folder / IPMI_FILE
        first_ts = int(_MARKER.search(ipmi.read_text()).group(1))
        moved = monitoring / ".moved" / _IPMI_PATHS[layout](host, first_ts)
        moved.parent.mkdir(parents=True, exist_ok=True)
        ipmi.rename(moved)
        if layout in _PROMETHEUS_LAYOUTS:
            series += _prometheus_series(folder, host, hosts.index(host))
        else:
            for name in SCRAPE_NAMES:
                split_into_scrapes(folder / name, host, lambda exporter, ts, ext, host=host:
                                   monitoring / ".moved" / _SCRAPE_PATHS[layout](
                                       exporter, host, ts, ext))
        shutil.rmtree(folder)
    if series and layout == "federate":
        _write_federate(monitoring / ".moved" / "federate", series)
    elif series:
        document = {"status": "success", "data": {"resultType": "matrix", "result": series}}
        (monitoring / f"prometheus-{job}.json").write_text(json.dumps(document) + "\n")
    for path in sorted((monitoring / ".moved").rglob("*")):
        target = monitoring / path.relative_to(monitoring / ".moved")
        if path.is_dir():
            target.mkdir(exist_ok=True)
        else:
            path.rename(target)
    shutil.rmtree(monitoring / ".moved")


_MARKER = re.compile(r"^# ts=(\d+)", re.MULTILINE)
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+(\d+))?$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="([^"]*)"')
_SYSFS_LINE = re.compile(r"/(mlx5_\d+)/ports/(\d+)/hw_counters/(\w+):(\d+)$")


def _prometheus_series(folder: Path, host: str, index: int) -> list[dict]:
    """The host's DCGM, node and hw_counters series as Prometheus would return them to a range
    query: one entry per series, with the scrape's ``instance`` (an address, not the name) and
    ``job``; the hw_counters as node_exporter's infiniband collector exports them."""
    address = f"10.20.0.{index + 1}"
    series: dict[tuple, list] = {}

    def add(name: str, labels: dict[str, str], exporter: str, ts_s: float, value: str) -> None:
        labels = {"__name__": name, **labels, "instance": f"{address}:{INSTANCE_PORTS[exporter]}",
                  "job": exporter}
        series.setdefault(tuple(sorted(labels.items())), []).append([ts_s, value])

    for file, exporter in (("dcgm_exporter.prom", "dcgm"), ("node_exporter.prom", "node")):
        for line in (folder / file).read_text().splitlines():
            if (sample := _SAMPLE.match(line)) and not line.startswith("#"):
                name, labels, value, ms = sample.groups()
                add(name, dict(_LABEL.findall(labels or "")), exporter, int(ms) / 1000, value)
    ts_s = None
    for line in (folder / "mlx5_hw_counters.txt").read_text().splitlines():
        if (marker := _MARKER.match(line)) is not None:
            ts_s = int(marker.group(1))
        elif (sample := _SYSFS_LINE.search(line)) and sample.group(3) in IB_METRICS:
            device, port, counter, value = sample.groups()
            add(f"node_infiniband_{IB_METRICS[counter]}", {"device": device, "port": port},
                "node", ts_s, value)
    return [{"metric": dict(key), "values": values} for key, values in series.items()]


def _write_federate(folder: Path, series: list[dict]) -> None:
    """``series`` as ``/federate`` text, one file per exporter (the ``job`` label) and scrape:
    ``# TYPE`` lines, then every host's samples with their labels and time in ms."""
    scrapes: dict[tuple[str, int], dict[str, list[str]]] = {}
    for entry in series:
        labels = dict(entry["metric"])
        name = labels.pop("__name__")
        text = ",".join(f'{key}="{value}"' for key, value in labels.items())
        for ts_s, value in entry["values"]:
            families = scrapes.setdefault((labels["job"], int(ts_s)), {})
            families.setdefault(name, []).append(f"{name}{{{text}}} {value} {int(ts_s * 1000)}")
    folder.mkdir(parents=True, exist_ok=True)
    for (exporter, ts_s), families in scrapes.items():
        lines = []
        for name, samples in families.items():
            kind = "counter" if name.endswith("_total") else "gauge"
            lines += [f"# TYPE {name} {kind}", *samples]
        (folder / f"{exporter}-{ts_s}.prom").write_text("\n".join(lines) + "\n")


def _day(ts: int) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d")

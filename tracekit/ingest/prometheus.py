"""Prometheus data: text exposition scrapes, range-query JSON and long CSV dumps.

One parser (:func:`parse_exposition`) reads the text format of every exporter (dcgm-exporter of
all label generations, node_exporter, ipmi_exporter, ``promtool tsdb dump``); the three readers
turn samples into the same shape (name, labels, value, ts_ns) and :func:`route_samples` sends
each family to its table: DCGM to ``gpu_metrics``, ``node_infiniband_*`` to ``nic_counters``,
``node_cpu_seconds_total`` / ``node_load*`` and ``ipmi_*`` to ``host_metrics``. NCCL Inspector
series (``nccl_*``) belong to the collective ingest and are left alone.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import dataclass, field

import polars as pl

from tracekit.core import schema
from tracekit.core.counters import (
    GLITCH_REASON,
    collapse_repeats,
    counter_rates,
    shares_of_increase,
    split_glitches,
)
from tracekit.core.errors import InputError
from tracekit.core.identity import IdentityMap, learn_hosts, normalise_bus_id
from tracekit.ingest import metric_names
from tracekit.ingest.base import (
    Chunk,
    Reader,
    Source,
    csv_row_text,
    iter_line_batches,
    quarantine_frame,
    read_csv_cells,
    require_columns,
    split_on_reason,
)
from tracekit.ingest.ipmitool import disambiguate, sensor_metric
from tracekit.ingest.limits import check_json, json_array_lines
from tracekit.ingest.rnic import nic_rows
from tracekit.ingest.snapshots import SnapshotClock, epoch_ns, missing_time_error

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = rf"^\s*({_NAME})?\s*(?:\{{(.*)\}})?\s*(\S+)(?:\s+(-?\d+))?\s*$"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*\s*=\s*"(?:[^"\\]|\\[\\"n])*"'
_LABEL_SET = rf"^\s*(?:{_LABEL}\s*(?:,\s*|$))*$"
_SIMPLE_SAMPLE = rf"^(?:{_NAME}(?:\{{[^{{}}]*\}})?|\{{[^{{}}]*\}}) [^\s{{}}]+(?: -?[0-9]+)?$"
"""A sample line as exporters print it: single spaces, no brace inside the label set or the
value, so that it splits at its braces and spaces exactly where :data:`_SAMPLE` would."""
_TYPE = rf"^#\s*TYPE\s+({_NAME})\s+(\w+)"


@dataclass
class Exposition:
    """Samples of a text exposition batch: ``samples`` (line_no, name, labels struct, value,
    ts_ms, type), ``bad`` lines (line_no, line, reason) and the count of comment/blank lines."""

    samples: pl.DataFrame
    bad: pl.DataFrame
    skipped: int


def parse_exposition(lines: pl.DataFrame) -> Exposition:
    """Parse Prometheus text-format lines (``line_no``, ``line``) into samples, vectorised.

    Values follow Go ``strconv.ParseFloat``: ``%f``, ints, ``1.281553e+06``, ``NaN``, ``+Inf``.
    The optional trailing integer is the sample's timestamp in ms. Label sets become one polars
    struct (fields = the union of label names of the batch); ``__name__`` inside the braces
    (``promtool tsdb dump``) names samples that print none before them.
    """
    line = pl.col("line")
    is_comment = line.str.contains(r"^\s*(?:#|$)")
    types = lines.filter(line.str.contains(_TYPE)).select(
        line.str.extract(_TYPE, 1).alias("name"), line.str.extract(_TYPE, 2).alias("type"),
    ).unique("name", keep="last")
    candidates = _sample_parts(lines.filter(~is_comment))
    value = pl.col("_value").cast(pl.Float64, strict=False)
    reason = (
        pl.when(pl.col("_value").is_null()).then(pl.lit("not a sample line"))
        .when(pl.col("_name").is_null() & pl.col("_labels").is_null())
        .then(pl.lit("sample has no metric name"))
        .when(pl.col("_labels").is_not_null() & ~pl.col("_labels").str.contains(_LABEL_SET))
        .then(pl.lit("malformed label set"))
        .when(value.is_null()).then(pl.format("value {} is not a number", pl.col("_value")))
    )
    good, rejected = split_on_reason(candidates, reason)
    bad = rejected.select("line_no", "line", "reason")
    good = good.with_columns(pl.col("_labels").fill_null(""))
    distinct = good["_labels"].unique(maintain_order=True)
    label_sets = _label_sets(distinct)
    if label_sets.height < len(distinct):  # one label set polars cannot read fails alone
        unreadable = good.join(label_sets, on="_labels", how="anti")
        bad = pl.concat([bad, unreadable.select(
            "line_no", "line", pl.lit("malformed label set").alias("reason"))]).sort("line_no")
    good = good.join(label_sets, on="_labels", how="inner", maintain_order="left")
    samples = good.select(
        "line_no",
        pl.col("_name").alias("name"),
        value.alias("value"),
        pl.col("_ts").cast(pl.Int64, strict=False).alias("ts_ms"),
        "labels",
    )
    if "__name__" in _fields(samples):
        samples = samples.with_columns(
            pl.coalesce("name", pl.col("labels").struct.field("__name__")).alias("name"))
    family = pl.col("name").str.replace(r"_(total|bucket|sum|count|created)$", "")
    samples = samples.with_columns(
        pl.coalesce(
            pl.col("name").replace_strict(dict(types.iter_rows()), default=None),
            family.replace_strict(dict(types.iter_rows()), default=None),
        ).alias("type")
    )
    return Exposition(samples, bad, lines.height - candidates.height)


def _sample_parts(lines: pl.DataFrame) -> pl.DataFrame:
    """``lines`` with what :data:`_SAMPLE` captures (``_name``, ``_labels``, ``_value``,
    ``_ts``). A line as exporters print it (:data:`_SIMPLE_SAMPLE`) splits with plain string
    operations, several times cheaper than the regex's captures; only the others take them."""
    line = pl.col("line")
    simple = line.str.contains(_SIMPLE_SAMPLE)
    split = _split_at(lines.filter(simple), "line", "}", ["_front", "_back"])
    split = _split_at(split, "_front", "{", ["_head", "_labels"])
    # name, value and timestamp once the label set is cut out: "name value ts"
    words = pl.concat_str("_head", pl.col("_back").fill_null("")).alias("_words")
    split = _split_at(split.with_columns(words), "_words", " ", ["_name", "_value", "_ts"])
    split = split.select(*lines.columns, pl.col("_name").replace("", None), "_labels", "_value",
                         "_ts")
    captured = lines.filter(~simple).with_columns(
        line.str.extract_groups(_SAMPLE).struct.rename_fields(
            ["_name", "_labels", "_value", "_ts"]).alias("m")
    ).unnest("m")
    return pl.concat([split, captured]).sort("line_no") if captured.height else split


def _split_at(frame: pl.DataFrame, column: str, by: str, parts: list[str]) -> pl.DataFrame:
    """``frame`` with ``column`` split at its first ``len(parts) - 1`` ``by`` into ``parts``
    (null where there are fewer)."""
    return frame.with_columns(pl.col(column).str.split_exact(by, len(parts) - 1)
                              .struct.rename_fields(parts).alias("_parts")).unnest("_parts")


def _label_sets(texts: pl.Series) -> pl.DataFrame:
    """Each distinct label text (``_labels``, ``a="1",b="2"``) read once into a struct
    (``labels``, fields = the union of label names): a scrape repeats the same few label sets
    on every series, so this reads a handful of texts, not every line. A text polars cannot
    read is left out (the slow path, only when one fails the batch)."""
    as_json = pl.concat_str(
        pl.lit("{"),
        pl.col("_labels").str.replace(r",\s*$", "")
        .str.replace_all(r'(^|,)\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"', '${1}"${2}":"'),
        pl.lit("}"),
    )
    frame = texts.to_frame("_labels").with_columns(as_json.alias("labels"))
    try:
        return _decoded(frame)
    except pl.exceptions.ComputeError:
        return _decoded(frame.filter(pl.Series([_is_json(text) for text in frame["labels"]])))


def _decoded(frame: pl.DataFrame) -> pl.DataFrame:
    texts = frame["labels"]
    return frame.with_columns(texts.str.json_decode(infer_schema_length=None) if len(texts)
                              else pl.Series("labels", [], pl.Struct({})))


def _fields(samples: pl.DataFrame) -> list[str]:
    return [f.name for f in samples.schema["labels"].fields]


def label(samples: pl.DataFrame, *names: str) -> pl.Expr:
    """The first of ``names`` that the batch's label struct has, as a string column (empty
    strings as null); null when none of them exists."""
    present = [n for n in names if n in _fields(samples)]
    if not present:
        return pl.lit(None, pl.String)
    values = [pl.col("labels").struct.field(n).replace("", None) for n in present]
    return pl.coalesce(values) if len(values) > 1 else values[0]


@dataclass
class Routed:
    tables: dict[str, pl.DataFrame] = field(default_factory=dict)
    skipped: int = 0
    derived: int = 0
    """Rows not read from a sample of their own, net (see :attr:`Chunk.derived`)."""
    bad: pl.DataFrame | None = None
    """Samples whose value no table can hold (line_no, line, reason), for the quarantine."""
    notes: list[str] = field(default_factory=list)
    aliases: dict[str, str] = field(default_factory=dict)
    """Scrape addresses (``instance`` without its port) and the host names their samples carry
    (:func:`~tracekit.core.identity.learn_hosts`)."""


COUNTER_LIMIT = 2.0**63
"""Counters are stored as signed 64-bit integers (``nic_counters``); an unsigned counter past
2^63 (a wrapped or corrupt read) cannot be stored, and no real counter gets there."""


def value_problem(samples: pl.DataFrame) -> pl.Expr:
    """Why a sample's value cannot be stored (null when it can): not a number, NaN or infinite
    (ipmi_exporter's NaN means "not available" and is kept as such), or a counter (``*_total``,
    a DCGM counter field, ``# TYPE ... counter``) below zero or at 2^63 and above."""
    value, name = pl.col("value"), pl.col("name")
    metric, _ = metric_names.dcgm_lookup(name)
    is_counter = name.str.ends_with("_total") | metric.is_in(list(metric_names.COUNTER_METRICS))
    if "type" in samples.columns:
        is_counter = is_counter | (pl.col("type") == "counter")
    shown = value.cast(pl.String)
    return (
        pl.when(value.is_null()).then(pl.lit("value is not a number"))
        .when(value.is_infinite() | (value.is_nan() & ~name.str.starts_with("ipmi_")))
        .then(pl.format("value {} is not a finite number", shown))
        .when(is_counter.fill_null(False) & (value < 0))
        .then(pl.format("counter reads {}, below zero", shown))
        .when(is_counter.fill_null(False) & (value >= COUNTER_LIMIT))
        .then(pl.format("counter reads {}, past what a 64-bit counter holds", shown))
    )


def route_samples(samples: pl.DataFrame, identity: IdentityMap) -> Routed:
    """Send samples (line_no, line, name, labels, value, ts_ns, snap_host) to canonical tables
    by family; samples whose value cannot be stored (:func:`value_problem`) go to ``bad``.

    Host is the ``Hostname`` / ``hostname`` label, else the scrape ``instance`` (through the
    aliases learned from rows carrying both, then ``identity``), else the file's host.
    """
    hosted, aliases = _with_hosts(samples, identity)
    framed, bad = split_on_reason(hosted, value_problem(samples))
    framed, glitches = _ib_glitches(framed.drop("reason"))
    framed = framed.drop("line")
    name = pl.col("name")
    is_dcgm = name.str.starts_with("DCGM_") | name.str.contains(r"^dcgm_[a-z]")
    is_ib = name.str.starts_with("node_infiniband_")
    is_cpu = name.is_in(["node_cpu_seconds_total", "node_load1", "node_load5", "node_load15"])
    is_ipmi = name.str.starts_with("ipmi_")
    routed = Routed(bad=pl.concat([bad.select(pl.col("line_no").cast(pl.Int64), "line", "reason"),
                                   glitches]).sort("line_no"), aliases=aliases)
    tables: dict[str, list[pl.DataFrame]] = {}
    for part, build in ((is_dcgm, _gpu_rows), (is_ib, _ib_rows), (is_cpu, _cpu_rows),
                        (is_ipmi, _ipmi_rows)):
        subset = framed.filter(part)
        if subset.height:
            table_name, rows, notes, used, derived = build(subset)
            tables.setdefault(table_name, []).append(rows)
            routed.notes.extend(notes)
            routed.skipped += subset.height - used
            routed.derived += derived
    other = framed.filter(~(is_dcgm | is_ib | is_cpu | is_ipmi))
    routed.skipped += other.height
    if other.height:
        families = other["name"].str.replace(r"_.*$", "_*").unique().sort().to_list()
        routed.notes.append(f"skipped {other.height} samples of other exporters "
                            f"({', '.join(families[:8])})")
    routed.tables = {k: pl.concat(v, how="vertical") for k, v in tables.items()}
    if any(t["host"].null_count() for t in routed.tables.values()):
        routed.notes.append("some samples name no host (no Hostname or instance label); pass "
                            "--option host=NAME")
    return routed


def _with_hosts(samples: pl.DataFrame, identity: IdentityMap
                ) -> tuple[pl.DataFrame, dict[str, str]]:
    """``samples`` with their ``host`` (see :func:`route_samples`), worked out once per distinct
    (host label, instance, file host): a scrape names a handful of hosts on every sample, and
    :func:`~tracekit.core.identity.short_host`'s regexes need not run on each; and the
    addresses learned on the way."""
    has_instance = "instance" in _fields(samples)
    learned = learn_hosts(samples.select("labels").unique().unnest("labels", separator="."),
                          "labels.Hostname", "labels.instance") if has_instance else {}
    mapping = IdentityMap({**learned, **identity.hosts}, identity.gpus)
    keys = ["_named", "_instance", "snap_host"]
    keyed = samples.with_columns(
        label(samples, "Hostname", "hostname", "exported_Hostname", "exported_hostname")
        .alias("_named"),
        label(samples, "instance").alias("_instance"),
    )
    hosts = keyed.select(keys).unique().with_columns(pl.coalesce(
        mapping.host(pl.col("_named")), mapping.host(pl.col("_instance")),
        mapping.host(pl.col("snap_host")),
    ).alias("host"))
    return keyed.join(hosts, on=keys, how="left", nulls_equal=True, maintain_order="left") \
        .drop("_named", "_instance"), {a: h for a, h in learned.items() if a != h}


def _ib_glitches(samples: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """node_exporter infiniband counters' bad reads (:func:`split_glitches`: a 0 or -5 between
    two samples that agree) as quarantine rows; the other samples. Across a kept bad read the
    next rate was the counter's whole value over one interval (1.7e10 words/s)."""
    name = pl.col("name")
    is_counter = name.str.starts_with("node_infiniband_") & name.str.ends_with("_total")
    keyed = samples.with_columns(label(samples, "device").alias("_device"),
                                 label(samples, "port").alias("_port"))
    counters, glitches = split_glitches(keyed.filter(is_counter),
                                        ["host", "_device", "_port", "name"])
    kept = pl.concat([keyed.filter(~is_counter), counters]).drop("_device", "_port")
    return kept, glitches.select(pl.col("line_no").cast(pl.Int64), "line",
                                 pl.lit(GLITCH_REASON).alias("reason"))


Built = tuple[str, pl.DataFrame, list[str], int, int]
"""What a family's builder returns: table name, rows, notes, the samples behind the rows (the
rest are skipped) and the rows derived rather than read (net: folded samples count minus)."""


def _gpu_rows(samples: pl.DataFrame) -> Built:
    metric, scale = metric_names.dcgm_lookup(pl.col("name"))
    clock_event = label(samples, "clock_event").replace(metric_names.EXPORTER_CLOCK_EVENTS)
    exporter_metric = (
        pl.when(pl.col("name") == "DCGM_EXP_CLOCK_EVENTS_COUNT")
        .then(pl.concat_str(pl.lit("clock_events_"), clock_event, pl.lit("_count")))
        .when(pl.col("name") == "DCGM_EXP_XID_ERRORS_COUNT")
        .then(pl.concat_str(pl.lit("xid_"), label(samples, "xid"), pl.lit("_errors_count")))
    )
    gpu_instance = label(samples, "GPU_I_ID")
    rows = samples.with_columns(
        pl.coalesce(exporter_metric, metric,
                    metric_names.unknown_dcgm_metric(pl.col("name"))).alias("metric"),
        (pl.col("value") * scale.fill_null(1.0)).alias("value"),
        (metric.is_null() & exporter_metric.is_null()).alias("_unknown"),
    ).select(
        "ts_ns", "host",
        label(samples, "gpu").cast(pl.Int32, strict=False).alias("gpu"),
        label(samples, "UUID", "uuid").alias("gpu_uuid"),
        normalise_bus_id(label(samples, "pci_bus_id")).alias("bus_id"),
        pl.when(gpu_instance.is_not_null()).then(pl.concat_str(pl.lit("gi"), gpu_instance))
        .alias("gpu_instance"),
        "metric", "value", pl.lit("dcgm-exporter").alias("source"), "_unknown",
    )
    unknown = rows.filter(pl.col("_unknown"))["metric"].unique().sort()
    notes = ([f"DCGM fields without a canonical name kept as: {', '.join(unknown.to_list()[:8])}"]
             if len(unknown) else [])
    built = gpu_metric_rows(rows.drop("_unknown"))
    flags = metric_names.clock_event_flag_rows(rows).height
    repeats = samples.height + flags - built.height
    if repeats:
        notes.append(f"skipped {repeats} repeated samples (same series and time, or a "
                     "counter's unchanged value)")
    return "gpu_metrics", built, notes, samples.height - repeats, flags


GPU_SERIES = ["host", "gpu", "gpu_uuid", "gpu_instance", "metric"]


def gpu_metric_rows(rows: pl.DataFrame) -> pl.DataFrame:
    """Canonical ``gpu_metrics`` from decoded samples: clock-event flags added, duplicate
    samples dropped, counter metrics collapsed and given rates."""
    with_flags = pl.concat([rows, metric_names.clock_event_flag_rows(rows)], how="vertical")
    is_counter = pl.col("metric").is_in(list(metric_names.COUNTER_METRICS))
    gauges = with_flags.filter(~is_counter).unique([*GPU_SERIES, "ts_ns"], keep="last",
                                                   maintain_order=True)
    counters = counter_rates(collapse_repeats(with_flags.filter(is_counter), GPU_SERIES),
                             GPU_SERIES)
    return pl.concat([schema.conform("gpu_metrics", gauges),
                      schema.conform("gpu_metrics", counters)], how="vertical")


IB_COUNTER_NAMES = {
    "np_cnp_packets_sent_total": "np_cnp_sent",
    "np_ecn_marked_roce_packets_received_total": "np_ecn_marked_roce_packets",
    "rp_cnp_packets_handled_total": "rp_cnp_handled",
    "rp_cnp_ignored_packets_received_total": "rp_cnp_ignored",
    "out_of_sequence_packets_received_total": "out_of_sequence",
    "packet_sequence_errors_total": "packet_seq_err",
    "out_of_buffer_drops_total": "out_of_buffer",
    "local_ack_timeout_errors_total": "local_ack_timeout_err",
    "implied_nak_seq_errors_total": "implied_nak_seq_err",
    "duplicate_requests_packets_total": "duplicate_request",
    "rnr_nak_retry_packets_received_total": "rnr_nak_retry_err",
    "roce_adp_retransmits_total": "roce_adp_retrans",
    "rx_read_requests_total": "rx_read_requests",
    "rx_write_requests_total": "rx_write_requests",
    "rx_atomic_requests_total": "rx_atomic_requests",
    "rx_icrc_encapsulated_errors_total": "rx_icrc_encapsulated",
    "port_data_received_bytes_total": "port_rcv_data",
    "port_data_transmitted_bytes_total": "port_xmit_data",
    "port_packets_received_total": "port_rcv_packets",
    "port_packets_transmitted_total": "port_xmit_packets",
    "port_transmit_wait_total": "port_xmit_wait",
}
"""node_exporter infiniband names (collector/infiniband_linux.go) -> the sysfs names mlx5
prints, so both sources give one counter. Other ``*_total`` keep their name minus ``_total``."""

IB_DATA_WORD_BYTES = 4
"""sysfs port_rcv_data / port_xmit_data count 4-byte words; node_exporter multiplies by 4."""


def _ib_rows(samples: pl.DataFrame) -> Built:
    short = pl.col("name").str.strip_prefix("node_infiniband_")
    counters = samples.filter(short.str.ends_with("_total")).with_columns(
        short.replace_strict(IB_COUNTER_NAMES, default=short.str.strip_suffix("_total"))
        .alias("counter"),
    ).with_columns(
        pl.when(pl.col("counter").is_in(["port_rcv_data", "port_xmit_data"]))
        .then(pl.col("value") / IB_DATA_WORD_BYTES).otherwise(pl.col("value")).alias("value"),
    )
    rows = counters.select(
        "ts_ns", "host", label(samples, "device").alias("device"),
        label(samples, "port").cast(pl.Int32, strict=False).alias("port"),
        "counter", pl.col("value").round(0).cast(pl.Int64).alias("value"),
    )
    built = nic_rows(rows)
    repeats = rows.height - built.height
    notes = [f"skipped {repeats} repeated counter samples"] if repeats else []
    return "nic_counters", built, notes, built.height, 0


CPU_IDLE_MODES = ("idle", "iowait")
"""node_cpu_seconds_total modes that are not busy time (as ``mpstat`` / ``top`` count it)."""


def _cpu_rows(samples: pl.DataFrame) -> Built:
    """Host CPU from node_exporter: busy share of all CPUs between consecutive scrapes of
    ``node_cpu_seconds_total`` (cpu_util_pct, plus iowait and steal shares), and load. The
    cumulative busy and total CPU seconds are kept too, since a dump of one scrape per file
    has no consecutive scrapes within a file (the attribution derives shares across files)."""
    mode = label(samples, "mode")
    cpu = samples.filter(pl.col("name") == "node_cpu_seconds_total") \
        .with_columns(mode.alias("mode"))
    totals = cpu.group_by("host", "ts_ns").agg(
        pl.col("value").sum().alias("total"),
        pl.col("value").filter(~pl.col("mode").is_in(CPU_IDLE_MODES)).sum().alias("busy"),
        pl.col("value").filter(pl.col("mode") == "iowait").sum().alias("iowait"),
        pl.col("value").filter(pl.col("mode") == "steal").sum().alias("steal"),
    ).sort("host", "ts_ns")
    shares = totals.with_columns(*shares_of_increase(
        {"cpu_util_pct": "busy", "cpu_iowait_pct": "iowait", "cpu_steal_pct": "steal"},
        "total", "host"),
    ).unpivot(
        ["cpu_util_pct", "cpu_iowait_pct", "cpu_steal_pct"], index=["host", "ts_ns"],
        variable_name="metric", value_name="value",
    ).drop_nulls("value").with_columns(pl.lit("%").alias("unit"))
    cumulative = totals.select(
        "host", "ts_ns", pl.col("busy").alias("cpu_busy_seconds_total"),
        pl.col("total").alias("cpu_seconds_total"),
    ).unpivot(["cpu_busy_seconds_total", "cpu_seconds_total"], index=["host", "ts_ns"],
              variable_name="metric", value_name="value").with_columns(pl.lit("s").alias("unit"))
    load = samples.filter(pl.col("name").str.starts_with("node_load")).select(
        "host", "ts_ns", pl.col("name").str.strip_prefix("node_").alias("metric"), "value",
        pl.lit("").alias("unit"),
    )
    rows = pl.concat([shares, cumulative, load], how="vertical").with_columns(
        pl.lit("node-exporter").alias("source"))
    # the per-mode samples fold into each scrape's cumulative and share rows
    return "host_metrics", schema.conform("host_metrics", rows), [], samples.height, \
        rows.height - samples.height


IPMI_FAMILIES = {
    "ipmi_temperature_celsius": ("c", "C", 1.0),
    "ipmi_fan_speed_rpm": ("rpm", "RPM", 1.0),
    "ipmi_fan_speed_ratio": ("pct", "%", 100.0),
    "ipmi_voltage_volts": ("v", "V", 1.0),
    "ipmi_current_amperes": ("a", "A", 1.0),
    "ipmi_power_watts": ("w", "W", 1.0),
    "ipmi_sensor_value": ("", "", 1.0),
}
"""ipmi_exporter value families (collector_ipmi.go) -> (metric suffix, unit, factor); the
ratio family is a percentage x 0.01 in the exporter."""

IPMI_STATES = {0.0: "ok", 1.0: "nc", 2.0: "cr"}
"""ipmi_exporter ``*_state``: 0 nominal, 1 warning, 2 critical (NaN: not available)."""


def _ipmi_rows(samples: pl.DataFrame) -> Built:
    family = pl.col("name")
    sensor_id, sensor_name = label(samples, "id"), label(samples, "name")
    keyed = samples.with_columns(sensor_id.alias("_id"), sensor_name.alias("_sensor"))
    states = keyed.filter(family.str.ends_with("_state")).select(
        "host", "ts_ns", "_id",
        pl.col("value").replace_strict(IPMI_STATES, default="ns", return_dtype=pl.String)
        .alias("status"),
    ).unique(["host", "ts_ns", "_id"])
    values = keyed.filter(family.is_in(list(IPMI_FAMILIES)))
    spec = IPMI_FAMILIES
    readings = values.with_columns(
        sensor_metric(pl.col("_sensor"), family.replace_strict({k: v[0] for k, v in spec.items()}))
        .alias("metric"),
        family.replace_strict({k: v[1] for k, v in spec.items()}).alias("unit"),
        (pl.col("value") * family.replace_strict({k: v[2] for k, v in spec.items()}))
        .alias("value"),
    ).join(states, on=["host", "ts_ns", "_id"], how="left", nulls_equal=True)
    dcmi = keyed.filter(family == "ipmi_dcmi_power_consumption_watts").with_columns(
        pl.lit("dcmi_power_w").alias("metric"), pl.lit("W").alias("unit"),
        pl.lit(None, pl.String).alias("status"),
    )
    rows = pl.concat([readings.select(dcmi.columns), dcmi], how="vertical").with_columns(
        pl.when(pl.col("value").is_nan()).then(None).otherwise(pl.col("value")).alias("value"),
        pl.when(pl.col("value").is_nan() & pl.col("status").is_null()).then(pl.lit("ns"))
        .otherwise(pl.col("status")).alias("status"),
        pl.lit("ipmi-exporter").alias("source"),
    )
    rows = disambiguate(rows.sort("line_no") if "line_no" in rows.columns else rows,
                        ["host", "ts_ns", "metric"])
    used = values.height + dcmi.height + keyed.filter(family.str.ends_with("_state")).height
    # a *_state sample folds into its reading's status
    return "host_metrics", schema.conform("host_metrics", rows.select(
        "ts_ns", "host", "source", "metric", "value", "unit", "status")), [], used, \
        rows.height - used


def _timed(samples: pl.DataFrame, source: Source, what: str) -> pl.DataFrame:
    if samples.filter(pl.col("ts_ns").is_null()).height:
        raise missing_time_error(source, what)
    return samples


def _chunk(source: Source, routed: Routed, bad: pl.DataFrame | None, lines: int,
           skipped: int, bytes_read: int) -> Chunk:
    bad = pl.concat([frame.select("line_no", "line", "reason") for frame in (bad, routed.bad)
                     if frame is not None]).sort("line_no")
    return Chunk(
        tables=routed.tables,
        quarantine=quarantine_frame(source, bad) if bad.height else None,
        lines=lines, skipped=skipped, derived=routed.derived, bytes_read=bytes_read,
        notes=routed.notes, host_aliases=routed.aliases,
    )


def head_samples(source: Source) -> tuple[pl.Series, int]:
    """The metric names of the samples in a source's first bytes and how many lines there are
    no sample (a line cut by the sniff limit is left out): what both exposition readers sniff."""
    head = source.head_text.splitlines()
    whole = head[:-1] if len(source.head) < source.size else head
    parsed = parse_exposition(pl.DataFrame({"line": whole}, schema={"line": pl.String})
                              .with_row_index("line_no"))
    return parsed.samples["name"], parsed.bad.height


def nccl_only(names: pl.Series) -> bool:
    """Every sample is an ``nccl_*`` series: an NCCL Inspector file, not a monitoring export."""
    return bool(len(names)) and bool(names.str.starts_with("nccl_").all())


def _is_json(text: str) -> bool:
    """Whether one label set, as JSON, parses: the slow path, only for a batch that failed."""
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


class PrometheusTextReader(Reader):
    format = "prometheus-text"
    options = ("ts", "host", "identity_map")
    version = "2"
    tables = ("gpu_metrics", "nic_counters", "host_metrics")
    priority = 60
    rows_depend_on_name = True
    description = "Prometheus text exposition: dcgm-exporter, node_exporter (infiniband, cpu), " \
                  "ipmi_exporter, promtool tsdb dump"

    def sniff(self, source: Source) -> bool:
        if source.head.lstrip()[:1] in (b"{", b"[") and '"resultType"' in source.head_text:
            return False
        names, bad = head_samples(source)
        return len(names) >= max(1, bad) and not nccl_only(names)

    def read(self, source: Source, options: dict[str, str]) -> Iterator[Chunk]:
        clock = SnapshotClock.for_source(source, options)
        identity = IdentityMap.load(options.get("identity_map"))
        for batch in iter_line_batches(source):
            lines = clock.stamp(batch.frame())
            parsed = parse_exposition(lines.filter(~pl.col("is_marker")).select("line_no", "line"))
            stamped = parsed.samples.join(
                lines.select("line_no", "line", "snap_ts_ns", "snap_host"), on="line_no",
                how="left",
            ).with_columns(pl.coalesce(pl.col("ts_ms") * 1_000_000, "snap_ts_ns").alias("ts_ns"))
            routed = route_samples(stamped, identity)
            for table in routed.tables.values():
                _timed(table, source, "the samples")
            yield clock.annotate(_chunk(
                source, routed, parsed.bad, lines.height,
                parsed.skipped + lines["is_marker"].sum() + routed.skipped, batch.bytes_read))


class PrometheusJsonReader(Reader):
    format = "prometheus-json"
    options = ("host", "identity_map")
    version = "1"
    tables = ("gpu_metrics", "nic_counters", "host_metrics")
    priority = 30
    description = "Prometheus HTTP API query / query_range JSON (matrix or vector results)"

    def sniff(self, source: Source) -> bool:
        return source.head.lstrip()[:1] == b"{" and '"resultType"' in source.head_text

    def read(self, source: Source, options: dict[str, str]) -> Iterator[Chunk]:
        with source.open() as stream:
            check_json(source, stream)
            raw = stream.read()
        text = raw.decode("utf-8", errors="replace")
        try:
            document = pl.Series([text]).str.json_decode(infer_schema_length=None)
        except pl.exceptions.PolarsError as error:
            raise InputError(f"not valid JSON: {error}", source.name) from None
        top = pl.DataFrame({"d": document}).unnest("d")
        status = top["status"][0] if "status" in top.columns else None
        if status != "success" or "data" not in top.columns:
            detail = top["error"][0] if "error" in top.columns else f"status {status!r}"
            raise InputError(f"the query did not succeed ({detail}); re-export it", source.name)
        data = top.select("data").unnest("data")
        kind = data["resultType"][0] if "resultType" in data.columns else None
        if kind not in ("matrix", "vector"):
            raise InputError(f"resultType {kind!r} has no series; export a range query "
                             "(matrix) or an instant query (vector)", source.name)
        if "result" not in data.columns:
            raise InputError("the query's data has no result; re-export it", source.name)
        series = data.select("result").explode("result").unnest("result")
        if kind == "matrix":
            samples = series.explode("values").rename({"values": "pair"})
        else:
            samples = series.rename({"value": "pair"})
        samples = _numbered_by_line(samples, raw, PAIR_DEPTH[kind])
        samples = samples.drop_nulls("metric").rename({"metric": "labels"}).drop_nulls("pair")
        samples = samples.select(
            "line_no", "labels", pl.concat_str(
                pl.lit("["), pl.col("pair").cast(pl.List(pl.String)).list.join(", "), pl.lit("]"),
            ).alias("line"),
            pl.col("labels").struct.field("__name__").alias("name")
            if "__name__" in [f.name for f in samples.schema["labels"].fields]
            else pl.lit(None, pl.String).alias("name"),
            pl.col("pair").list.get(1).cast(pl.Float64, strict=False).alias("value"),
            epoch_ns(pl.col("pair").list.get(0)).alias("ts_ns"),
            pl.lit(options.get("host"), pl.String).alias("snap_host"),
        )
        unnamed = samples.filter(pl.col("name").is_null()).height
        routed = route_samples(samples.drop_nulls("name"), IdentityMap.load(
            options.get("identity_map")))
        if unnamed:
            routed.notes.append(f"{unnamed} points have no __name__ (a function such as rate() "
                                "dropped it); query the raw series instead")
        yield _chunk(source, routed, None, samples.height, routed.skipped + unnamed, source.size)


PAIR_DEPTH = {"matrix": 6, "vector": 5}
"""Nesting level of a sample's ``[time, "value"]`` pair: ``{"data": {"result": [{"values":
[[...]]}]}}`` for a range query (matrix), one level less for an instant query's ``value``."""


def _numbered_by_line(samples: pl.DataFrame, raw: bytes, depth: int) -> pl.DataFrame:
    """``samples`` (one row per pair, in document order) with the ``line_no`` of the file its
    pair starts on (:func:`~tracekit.ingest.limits.json_array_lines`), so a quarantined value
    is found where it is. A document with other lists at that depth (a label holding a list)
    does not pair up: its samples get the document's first line."""
    lines = json_array_lines(io.BytesIO(raw), depth)
    is_pair = pl.col("pair").is_not_null()
    if len(lines) != samples.select(is_pair.sum()).item():
        return samples.with_columns(pl.lit(1, pl.Int64).alias("line_no"))
    index = (is_pair.cum_sum() - 1).clip(0)
    return samples.with_columns(pl.lit(pl.Series(lines, dtype=pl.Int64)).gather(index)
                                .alias("line_no") if len(lines) else pl.lit(1, pl.Int64)
                                .alias("line_no"))


class PrometheusCsvReader(Reader):
    format = "prometheus-csv"
    options = ("host", "identity_map")
    version = "1"
    tables = ("gpu_metrics", "nic_counters", "host_metrics")
    priority = 30
    description = "long CSV dump of Prometheus series: timestamp,__name__,<labels...>,value"

    def sniff(self, source: Source) -> bool:
        header = source.head_text.split("\n", 1)[0].strip().split(",")
        return len(header) >= 3 and header[0] == "timestamp" and header[1] == "__name__" \
            and header[-1] == "value"

    def read(self, source: Source, options: dict[str, str]) -> Iterator[Chunk]:
        frame = read_csv_cells(source)
        require_columns(frame, ("timestamp", "__name__", "value"), source)
        label_columns = [c for c in frame.columns
                         if c not in ("line_no", "timestamp", "__name__", "value")]
        framed = frame.with_columns(
            epoch_ns(pl.col("timestamp")).alias("ts_ns"),
            pl.col("value").cast(pl.Float64, strict=False).alias("_value"),
        )
        reason = (pl.when(pl.col("ts_ns").is_null()).then(pl.lit("timestamp is not a time"))
                  .when(pl.col("_value").is_null()).then(pl.lit("value is not a number")))
        good, rejected = split_on_reason(framed, reason)
        bad = rejected.select(pl.col("line_no").cast(pl.Int64), "reason", csv_row_text(frame))
        samples = good.select(
            pl.col("line_no").cast(pl.Int64), csv_row_text(frame), pl.col("__name__").alias("name"),
            pl.struct([pl.col(c).replace("", None) for c in label_columns]).alias("labels"),
            pl.col("_value").alias("value"), "ts_ns",
            pl.lit(options.get("host"), pl.String).alias("snap_host"),
        )
        routed = route_samples(samples, IdentityMap.load(options.get("identity_map")))
        yield _chunk(source, routed, bad, frame.height + 1, routed.skipped + 1, source.size)


READERS = [PrometheusTextReader(), PrometheusJsonReader(), PrometheusCsvReader()]

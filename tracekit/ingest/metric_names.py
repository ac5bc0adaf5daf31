"""Canonical GPU metric names, keyed on DCGM field ids so every naming generation agrees.

dcgm-exporter names a series after the DCGM field name in its counters CSV. DCGM 4.6 renamed
many fields (``DCGM_FI_DEV_GPU_TEMP`` -> ``DCGM_FI_DEV_GPU_TEMP_CELSIUS``) and kept the old names
as aliases of the same field id; ``--use-old-namespace`` gives the 1.x names (``dcgm_gpu_temp``)
and ``dcgmi dmon`` prints short names (``TMPTR``). All of them map here to one canonical metric
whose name carries its unit. Sources: DCGM ``dcgmlib/dcgm_fields.h`` (v4.6.0) and
``dcgm_fields.cpp``; dcgm-exporter ``etc/default-counters.csv`` and
``etc/1.x-compatibility-metrics.csv``.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl


@dataclass(frozen=True)
class DcgmField:
    """One DCGM field: its id, canonical metric, whether it is a counter, every name it goes
    by, its ``dcgmi dmon`` short name, and the factor to the canonical unit."""

    field_id: int
    metric: str
    counter: bool
    names: tuple[str, ...]
    dmon: str | None = None
    scale: float = 1.0


DCGM_FIELDS: tuple[DcgmField, ...] = (
    DcgmField(100, "sm_clock_mhz", False, ("DCGM_FI_DEV_SM_CLOCK", "dcgm_sm_clock"), "SMCLK"),
    DcgmField(101, "mem_clock_mhz", False, ("DCGM_FI_DEV_MEM_CLOCK", "dcgm_mem_clock",
                                            "dcgm_memory_clock"), "MMCLK"),
    DcgmField(112, "clocks_event_reasons", False,
              ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
               "DCGM_FI_DEV_CLOCKS_THROTTLE_REASONS"), "DVCCTR"),
    DcgmField(140, "memory_temp_c", False, ("DCGM_FI_DEV_MEMORY_TEMP",
                                            "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS",
                                            "dcgm_memory_temp"), "MMTMP"),
    DcgmField(150, "gpu_temp_c", False, ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_TEMP_CELSIUS",
                                         "dcgm_gpu_temp"), "TMPTR"),
    DcgmField(155, "power_w", False, ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_BOARD_POWER_WATTS",
                                      "dcgm_power_usage"), "POWER"),
    DcgmField(156, "energy_mj", True, ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
                                       "dcgm_total_energy_consumption")),
    DcgmField(202, "pcie_replays", True, ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
                                          "dcgm_pcie_replay_counter")),
    DcgmField(203, "gpu_util_pct", False, ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL_RATIO",
                                           "dcgm_gpu_utilization"), "GPUTL"),
    DcgmField(204, "mem_copy_util_pct", False, ("DCGM_FI_DEV_MEM_COPY_UTIL",
                                                "dcgm_mem_copy_utilization"), "MCUTL"),
    DcgmField(206, "enc_util_pct", False, ("DCGM_FI_DEV_ENC_UTIL", "dcgm_enc_utilization")),
    DcgmField(207, "dec_util_pct", False, ("DCGM_FI_DEV_DEC_UTIL", "dcgm_dec_utilization")),
    DcgmField(230, "xid_last", False, ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_XID_ERROR",
                                       "dcgm_xid_errors"), "XIDER"),
    DcgmField(240, "power_violation_us", True, ("DCGM_FI_DEV_POWER_VIOLATION",
                                                "dcgm_power_violation")),
    DcgmField(241, "thermal_violation_us", True, ("DCGM_FI_DEV_THERMAL_VIOLATION",
                                                  "dcgm_thermal_violation")),
    DcgmField(251, "fb_free_mib", False, ("DCGM_FI_DEV_FB_FREE", "dcgm_fb_free"), "FBFRE"),
    DcgmField(252, "fb_used_mib", False, ("DCGM_FI_DEV_FB_USED", "dcgm_fb_used"), "FBUSD"),
    DcgmField(253, "fb_reserved_mib", False, ("DCGM_FI_DEV_FB_RESERVED",)),
    DcgmField(449, "nvlink_bandwidth_total", True, ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
                                                    "DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL",
                                                    "dcgm_nvlink_bandwidth_total")),
    DcgmField(1001, "gr_engine_active_ratio", False, ("DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                                                      "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO"),
              "GRACT"),
    DcgmField(1002, "sm_active_ratio", False, ("DCGM_FI_PROF_SM_ACTIVE",
                                               "DCGM_FI_PROF_SM_UTIL_RATIO"), "SMACT"),
    DcgmField(1003, "sm_occupancy_ratio", False, ("DCGM_FI_PROF_SM_OCCUPANCY",
                                                  "DCGM_FI_PROF_SM_OCCUPANCY_RATIO"), "SMOCC"),
    DcgmField(1004, "tensor_active_ratio", False, ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
                                                   "DCGM_FI_PROF_TENSOR_UTIL_RATIO"), "TENSO"),
    DcgmField(1005, "dram_active_ratio", False, ("DCGM_FI_PROF_DRAM_ACTIVE",
                                                 "DCGM_FI_PROF_DRAM_UTIL_RATIO"), "DRAMA"),
    DcgmField(1006, "fp64_active_ratio", False, ("DCGM_FI_PROF_PIPE_FP64_ACTIVE",), "FP64A"),
    DcgmField(1007, "fp32_active_ratio", False, ("DCGM_FI_PROF_PIPE_FP32_ACTIVE",), "FP32A"),
    DcgmField(1008, "fp16_active_ratio", False, ("DCGM_FI_PROF_PIPE_FP16_ACTIVE",), "FP16A"),
    DcgmField(1009, "pcie_tx_bytes_per_s", False, ("DCGM_FI_PROF_PCIE_TX_BYTES",), "PCITX"),
    DcgmField(1010, "pcie_rx_bytes_per_s", False, ("DCGM_FI_PROF_PCIE_RX_BYTES",), "PCIRX"),
    DcgmField(1011, "nvlink_tx_bytes_per_s", False, ("DCGM_FI_PROF_NVLINK_TX_BYTES",), "NVLTX"),
    DcgmField(1012, "nvlink_rx_bytes_per_s", False, ("DCGM_FI_PROF_NVLINK_RX_BYTES",), "NVLRX"),
    DcgmField(1603, "sm_clock_mhz", False, ("DCGM_FI_DEV_SM_CLOCK_HERTZ",), scale=1e-6),
    DcgmField(1604, "mem_clock_mhz", False, ("DCGM_FI_DEV_MEMORY_CLOCK_HERTZ",), scale=1e-6),
)

CLOCK_EVENT_FLAGS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x100: "display_clocks",
}
"""Bits of DCGM_FI_DEV_CLOCKS_EVENT_REASONS (field 112; NVML ``nvmlClocksEventReason*``)."""

EXPORTER_CLOCK_EVENTS = {"power_cap": "sw_power_cap"}
"""dcgm-exporter's ``clock_event`` label values that differ from the flag names above."""

CLOCK_EVENT_METRIC = "clocks_event_reasons"


def _by_name() -> dict[str, DcgmField]:
    return {name: f for f in DCGM_FIELDS for name in f.names}


FIELD_BY_NAME: dict[str, DcgmField] = _by_name()
FIELD_BY_DMON: dict[str, DcgmField] = {f.dmon: f for f in DCGM_FIELDS if f.dmon}
COUNTER_METRICS: frozenset[str] = frozenset(f.metric for f in DCGM_FIELDS if f.counter)


def dcgm_lookup(names: pl.Expr, by: str = "name") -> tuple[pl.Expr, pl.Expr]:
    """(canonical metric, scale) for a column of exporter names (``by="name"``) or dmon short
    names (``by="dmon"``); null for names the table does not know."""
    table = FIELD_BY_NAME if by == "name" else FIELD_BY_DMON
    metric = names.replace_strict({k: f.metric for k, f in table.items()}, default=None,
                                  return_dtype=pl.String)
    scale = names.replace_strict({k: f.scale for k, f in table.items()}, default=None,
                                 return_dtype=pl.Float64)
    return metric, scale


def unknown_dcgm_metric(names: pl.Expr) -> pl.Expr:
    """Fields the table does not know keep their own name, lower case without the prefix
    (``DCGM_FI_DEV_VGPU_LICENSE_STATUS`` -> ``dev_vgpu_license_status``)."""
    return names.str.to_lowercase().str.replace(r"^dcgm_(fi_)?", "")


def clock_event_flag_rows(samples: pl.DataFrame) -> pl.DataFrame:
    """One 0/1 ``clock_event_<flag>`` row per flag for every ``clocks_event_reasons`` sample,
    so "was GPU 2 thermally throttled at t" is a filter, not bit arithmetic."""
    masks = samples.filter(
        (pl.col("metric") == CLOCK_EVENT_METRIC) & pl.col("value").is_finite()
    )
    if masks.height == 0:
        return samples.clear()
    bits = pl.DataFrame({
        "_bit": list(CLOCK_EVENT_FLAGS),
        "_flag": [f"clock_event_{name}" for name in CLOCK_EVENT_FLAGS.values()],
    })
    flags = masks.join(bits, how="cross").with_columns(
        pl.col("_flag").alias("metric"),
        ((pl.col("value").cast(pl.Int64) & pl.col("_bit")) != 0).cast(pl.Float64).alias("value"),
    )
    return flags.select(samples.columns)

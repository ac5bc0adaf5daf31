"""Small synthesized cases for the attribution tests: one episode, its timing and its
monitoring at 15 s scrapes."""

from __future__ import annotations

import polars as pl

from tracekit.attribute.evidence import Window
from tracekit.attribute.timing import EpisodeTiming
from tracekit.attribute.verdict import Signals
from tracekit.core import schema
from tracekit.core.thresholds import SUSPECT_RATIO

S = 10**9
SCRAPES = range(0, 600, 15)
WINDOW = Window(300 * S, 420 * S, 100 * S, 300 * S)
"""The episode runs 300-420 s, its baseline 100-300 s; DCGM reads 4 scrapes past its end."""


def cnp_rows(host: str, during: float) -> list[dict]:
    """CNP counters of one NIC at 100/s, and ``during``/s for the rates that end in the
    episode's span (300-435 s: a rate describes the scrape interval ending at its sample)."""
    rows, count = [], 1_000
    for t in SCRAPES:
        count += int((during if 300 < t <= 435 else 100) * 15)
        rows.append({"ts_ns": t * S, "host": host, "device": "mlx5_0", "port": 1,
                     "counter": "np_cnp_sent", "value": count, "rate_per_s": None})
    return rows


def nic_counters(during: dict[str, float]) -> pl.DataFrame:
    """The NIC counters of hosts -> their CNP rate during the episode (:func:`cnp_rows`)."""
    return pl.DataFrame([row for host, rate in during.items() for row in cnp_rows(host, rate)],
                        schema_overrides={"rate_per_s": pl.Float64})


HOSTS = {0: "h1", 1: "h2", 2: "h3", 3: "h4"}


def episode_signals(groups: list[tuple[list[int], float]], cnp: dict[str, float],
                    relative: dict[int, float] | None = None) -> Signals:
    """An episode with call ends on four ranks, one per host: its groups (members, transfer
    ratio over their own before, slow above SUSPECT_RATIO), each rank's own-time ratio over
    the median rank's (``relative``, default 1) and the NICs' CNP rates during it (100/s
    before; no GPU or host samples)."""
    ranks = pl.DataFrame({"rank": list(HOSTS), "host": list(HOSTS.values()),
                          "cuda_dev": [0] * 4, "gpu": [0] * 4},
                         schema_overrides={"rank": pl.Int32, "cuda_dev": pl.Int32,
                                           "gpu": pl.Int32})
    frame = pl.DataFrame({"group": range(len(groups)), "members": [m for m, _ in groups],
                          "self_ratio": [r for _, r in groups],
                          "cluster_ratio": [1.0] * len(groups)},
                         schema_overrides={"members": pl.List(pl.Int32)})
    own = ranks.select("rank", "host", "cuda_dev").with_columns(
        own_share=pl.lit(0.5), own_share_before=pl.lit(0.5), ratio=pl.lit(1.0),
        relative=pl.Series([(relative or {}).get(r, 1.0) for r in HOSTS]))
    skew = ranks.select("rank", last_share=pl.lit(0.25), last_share_before=pl.lit(0.25))
    timing = EpisodeTiming(100, 100, skew,
                           frame.with_columns(suspect=pl.col("self_ratio") > SUSPECT_RATIO),
                           own, frame.select("group", "members"))
    return Signals(WINDOW, timing, ranks, HOSTS, pl.DataFrame(schema=schema.GPU_METRICS.schema),
                   pl.DataFrame(schema=schema.HOST_METRICS.schema), nic_counters(cnp))

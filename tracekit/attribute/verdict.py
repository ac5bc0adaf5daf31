"""One verdict per episode: combine timing (who is late, which groups are slow) with monitoring
(why), and never guess: a culprit that timing names but monitoring cannot explain gets the
cause ``insufficient-evidence`` with what is missing.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from tracekit.attribute import evidence as ev
from tracekit.attribute.arrival import own_time_change, skew_change
from tracekit.attribute.links import localise
from tracekit.attribute.profiling import SUSPECT_RATIO, suspect_groups

INSUFFICIENT = "insufficient-evidence"

MIN_INSTANCES = 20
"""Fewer matched collective instances than this in the episode cannot support a verdict."""

BASE_CONFIDENCE = 0.5
"""Confidence of a culprit named by timing alone; a unique localisation and a confirming
monitoring signal each add :data:`CONFIRMATION_BONUS`."""
CONFIRMATION_BONUS = 0.25


ARRIVAL_LAST_SHARE = 0.9
ARRIVAL_RISE = 1.5
"""Without call end times (NCCL_DEBUG COLL lines print issue times only) a rank is a straggler
by arrival alone when it arrives last in at least 90 % of its collectives and at least 1.5x as
often as before. Waiting spreads along the pipeline, so weaker skew is not blamed."""


@dataclass(frozen=True)
class Verdict:
    kind: str
    cause: str
    target: str | None
    confidence: float
    evidence: str


@dataclass(frozen=True)
class Signals:
    """Everything the verdict of one episode reads, already cut to its windows."""

    window: ev.Window
    during: pl.DataFrame
    before: pl.DataFrame
    gaps: pl.DataFrame
    ranks: pl.DataFrame
    """rank, host, cuda_dev of every rank with matched collectives."""
    rank_hosts: dict[int, str]
    gpu_metrics: pl.DataFrame
    host_metrics: pl.DataFrame
    nic_counters: pl.DataFrame


def decide(signals: Signals) -> Verdict:
    """The verdict of one episode from its signals."""
    if signals.during.height < MIN_INSTANCES or signals.before.height < MIN_INSTANCES:
        return Verdict("unknown", INSUFFICIENT, None, 0.0,
                       f"too few matched collectives: {signals.during.height} in the episode, "
                       f"{signals.before.height} before it (need {MIN_INSTANCES} each, with the "
                       "communicator of every call)")
    culprits = _compute_culprits(signals) + _communication_culprits(signals)
    if not culprits and signals.gaps.is_empty():
        return Verdict("unknown", INSUFFICIENT, None, 0.0,
                       "the collective calls have no end times (NCCL_DEBUG COLL lines print "
                       "issue times only): no own compute or transfer time to compare, and no "
                       f"rank arrived last in {ARRIVAL_LAST_SHARE:.0%} of its collectives; "
                       "ingest the hook CSV or a profiler trace with call durations")
    if not culprits:
        return Verdict("unknown", "unknown", None, 0.0,
                       f"no rank's own compute time and no group's transfer time changed by more "
                       f"than {SUSPECT_RATIO - 1:.0%}: the slowdown is not localised by timing")
    kinds = {c.kind for c in culprits}
    kind = kinds.pop() if len(kinds) == 1 and len(culprits) == 1 else "compound"
    causes = [c.cause for c in culprits]
    cause = INSUFFICIENT if INSUFFICIENT in causes else "+".join(sorted(set(causes)))
    targets = [c.target for c in culprits if c.target]
    return Verdict(kind, cause, "+".join(targets) or None,
                   round(min(c.confidence for c in culprits), 2),
                   "; ".join(c.evidence for c in culprits))


def _compute_culprits(signals: Signals) -> list[Verdict]:
    """Ranks whose own compute share grew more than the threshold over their peers (by arrival
    alone when calls have no end times); all the ranks of one host (with more than one rank)
    make that host the culprit."""
    w = signals.window
    skew = skew_change(signals.during, signals.before, (w.end_ns - w.start_ns) / 1e9,
                       (w.start_ns - w.before_start_ns) / 1e9)
    arrival = pl.format("arrived last in {}% of its collectives vs {}% before",
                        (pl.col("last_share") * 100).round(0).cast(pl.Int64),
                        (pl.col("last_share_before") * 100).round(0).cast(pl.Int64))
    if signals.gaps.is_empty():
        own = signals.ranks.join(skew, on="rank", how="inner")
        late = own.filter(pl.col("last_share") >= ARRIVAL_LAST_SHARE,
                          pl.col("last_share") >= ARRIVAL_RISE * pl.col("last_share_before"))
        late = late.with_columns(pl.format("rank {} ({}/{}) ", "rank", "host", "cuda_dev")
                                 .add(arrival).alias("text"))
    else:
        own = own_time_change(signals.gaps, signals.ranks, (w.start_ns, w.end_ns),
                              (w.before_start_ns, w.start_ns))
        late = own.filter(pl.col("relative") > SUSPECT_RATIO).join(skew, on="rank", how="left")
        late = late.with_columns(pl.format(
            "rank {} ({}/{}) spent {}% of the time computing vs {}% before (x{} relative to its "
            "peers)", "rank", "host", "cuda_dev",
            (pl.col("own_share") * 100).round(0).cast(pl.Int64),
            (pl.col("own_share_before") * 100).round(0).cast(pl.Int64),
            pl.col("relative").round(2)).add(pl.lit(", ").add(arrival).fill_null(""))
            .alias("text"))
    if late.is_empty():
        return []
    ranks_per_host = own.group_by("host").len()
    whole = (late.group_by("host").len().join(ranks_per_host, on="host", suffix="_all")
             .filter((pl.col("len") == pl.col("len_all")) & (pl.col("len_all") > 1))
             ["host"].to_list())
    out = []
    for host in sorted(whole):
        rows = late.filter(pl.col("host") == host)
        timing = f"all {rows.height} ranks of host {host} were stragglers: " + "; ".join(
            rows["text"].to_list())
        finding = ev.host_finding(signals.host_metrics, host, w)
        out.append(_culprit("compute", f"host:{host}", timing, finding, unique=True))
    for row in late.filter(~pl.col("host").is_in(whole)).iter_rows(named=True):
        finding = ev.gpu_finding(signals.gpu_metrics, row["host"], row["cuda_dev"], w)
        out.append(_culprit("compute", f"rank:{row['rank']}", row["text"], finding, unique=True))
    return out


def _communication_culprits(signals: Signals) -> list[Verdict]:
    """The link or NIC where the groups with a slower transfer meet."""
    groups = suspect_groups(signals.during, signals.before)
    slow = groups.filter("suspect")
    if slow.is_empty():
        return []
    link = localise(groups, signals.rank_hosts)
    worst = slow.sort("self_ratio", descending=True, nulls_last=True).row(0, named=True)
    timing = (f"{slow.height} of {groups.height} communication groups transfer more than "
              f"{SUSPECT_RATIO - 1:.0%} slower (worst x{worst['self_ratio'] or 0:.2f} over its own "
              f"time before, x{worst['cluster_ratio']:.2f} over its comparable cluster)")
    if link.target is None and not link.hosts:
        return [Verdict("communication", INSUFFICIENT, None, BASE_CONFIDENCE,
                        timing + "; the slow groups do not cross hosts, no link to blame")]
    finding = ev.nic_finding(signals.nic_counters, link.hosts, signals.window)
    target = link.target
    if target is None:
        timing += (f"; {', '.join(link.candidates)} explain the {link.slow_groups} slow groups "
                   "equally well")
        target = _surged_candidate(link.candidates, finding.hosts)
        if target is not None:
            timing += f"; only {target} has congestion notifications at both ends"
    else:
        timing += (f"; {link.target} is crossed by all {link.slow_groups} slow groups and by "
                   f"none of the {link.healthy_groups} healthy ones")
    return [_culprit("communication", target, timing, finding, unique=target is not None)]


def _surged_candidate(candidates: tuple[str, ...], surged: tuple[str, ...]) -> str | None:
    """The one candidate link (or NIC) whose every host shows a CNP surge, if exactly one."""
    named = {f"nic:{h}" for h in surged} | {f"link:{a}-{b}" for a in surged for b in surged}
    fitting = [c for c in candidates if c in named]
    return fitting[0] if len(fitting) == 1 else None


def _culprit(kind: str, target: str | None, timing: str, finding: ev.Finding,
             unique: bool) -> Verdict:
    confidence = BASE_CONFIDENCE + CONFIRMATION_BONUS * unique
    if finding.cause is None:
        reason = finding.missing or "monitoring does not explain it"
        text = f"{timing}; {finding.text + '; ' if finding.text else ''}{reason}"
        return Verdict(kind, INSUFFICIENT, target, confidence, text)
    return Verdict(kind, finding.cause, target, confidence + CONFIRMATION_BONUS,
                   f"{timing}; {finding.text}")


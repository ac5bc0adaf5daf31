"""One verdict per episode: combine timing (who is late, which groups are slow) with monitoring
(why), and never guess: a culprit that timing names but monitoring cannot explain gets the
cause ``insufficient-evidence`` with what is missing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

import polars as pl

from tracekit.attribute import evidence as ev
from tracekit.attribute.links import LinkVerdict, localise, member_links
from tracekit.attribute.profiling import SUSPECT_RATIO
from tracekit.attribute.telemetry import Suspect, link_suspects, monitoring_suspects
from tracekit.attribute.timing import EpisodeTiming
from tracekit.core.identity import link_target

INSUFFICIENT = "insufficient-evidence"

MIN_INSTANCES = 20
"""Fewer matched collective instances than this in the episode cannot support a verdict."""

CONFIDENCE_TIMING_AND_SIGNAL = 0.95
"""Confidence of a culprit that timing alone names (its own compute or transfer time grew)
and whose cause a monitoring signal of its own shows: two independent observations of one
physical cause. Each confidence is the share of such verdicts that were right on fresh
synthesized jobs (``python -m benchmarks accuracy``; the table in docs/attribution.md)."""
CONFIDENCE_SIGNAL = 0.9
"""A culprit and cause that monitoring shows (the thermal reasons of one GPU, the CPU of one
host, the congestion notifications of one link) where timing cannot localise on its own
(issue times only, or ring links that tie). The readings of one cause (a throttle flag, its
clock drop and temperature rise; CNP at both ends of a link) count once."""
CONFIDENCE_TIMING = 0.85
"""A culprit that call ends name (its own compute or transfer time grew) with no signal that
shows why: the cause is ``insufficient-evidence``, and only the culprit is claimed."""
CONFIDENCE_ARRIVAL = 0.5
"""A culprit from issue times alone: the rank the others waited for (:data:`WAIT_MARGIN`),
no signal showing why. A rank late behind a congested link, or one of a contended host's
ranks, is waited for as a slow GPU is."""
CONFIDENCE_INFERRED = 0.5
"""A cause concluded by elimination (``inferred``): a slower GPU where its clocks, throttle
reasons and its host's CPU look normal; at most its culprit's timing value."""
CONFIDENCE_UNCHECKED = 0.2
"""A verdict shown by a signal that leaves out a part timing also named but could not place
and no monitoring could check (slow groups whose candidate links tie, with no RNIC counters
to tell them apart): that part may be a second cause, and on fresh seeds it always was."""
CONFIDENCE_COMPOUND = 0.9
"""A compound verdict's ceiling; below it, its least sure part's value. Its parts are read
from one window by the same rules, so their errors are not independent (a product under-
stated them)."""


WAIT_RISE_MIN = 0.05
WAIT_MARGIN = 2.0
"""Without call ends, a rank is the straggler by timing when the wait it imposes on the others
(seconds per second its peers spend waiting for it, :func:`.arrival.skew_change`) rose most,
by at least 5 % of wall time (half a fail-slow's 10 %), and its share of last arrivals rose at
least twice as much as any other rank's. Who arrives last alone does not separate: a slow GPU's
CPU runs ahead of it, and a victim that waited for the straggler inside one group is late to
the next group's call, so it inherits imposed wait; but its own last arrivals fall, since it
now waits inside the calls, while the straggler's rise."""



@dataclass(frozen=True)
class Verdict:
    kind: str
    cause: str
    target: str | None
    confidence: float
    evidence: str
    inferred: bool = False
    """The cause was concluded by elimination, not shown by a signal of its own."""
    unseen: bool = False
    """No monitoring of the culprit's cause was there to read (not: read and showing
    nothing)."""


@dataclass(frozen=True)
class Signals:
    """Everything the verdict of one episode reads, already cut to its windows: the timing
    reduced from the instances and own times (:mod:`.timing`), the ranks and the monitoring."""

    window: ev.Window
    timing: EpisodeTiming
    ranks: pl.DataFrame
    """rank, host, cuda_dev and gpu (the physical GPU index) of every rank with matched
    collectives."""
    rank_hosts: dict[int, str]
    gpu_metrics: pl.DataFrame
    host_metrics: pl.DataFrame
    nic_counters: pl.DataFrame


def decide(signals: Signals) -> Verdict:
    """The verdict of one episode from its signals."""
    return _baseline_named(_decided(signals), signals.window)


def _baseline_named(verdict: Verdict, window: ev.Window) -> Verdict:
    """``verdict`` saying, when it was judged against the time after its episode, why."""
    if not window.baseline_after:
        return verdict
    return replace(verdict, evidence=f"{verdict.evidence} (judged against the "
                   f"{(window.baseline_end_ns - window.baseline_start_ns) / 1e9:.0f} s after the "
                   "episode: too little healthy time past the warm-up before it)")


def _decided(signals: Signals) -> Verdict:
    timing = signals.timing
    if timing.instances_during < MIN_INSTANCES or timing.instances_before < MIN_INSTANCES:
        return Verdict("unknown", INSUFFICIENT, None, 0.0,
                       f"too few matched collectives: {timing.instances_during} in the episode, "
                       f"{timing.instances_before} {signals.window.then} it (need "
                       f"{MIN_INSTANCES} each, with the communicator of every call)")
    if timing.own is None:
        return _from_telemetry(signals)
    culprits = _compute_culprits(signals) + _communication_culprits(signals)
    if not culprits:
        return Verdict("unknown", "unknown", None, 0.0,
                       f"no rank's own compute time and no group's transfer time changed by more "
                       f"than {SUSPECT_RATIO - 1:.0%}: the slowdown is not localised by timing")
    return _combined(culprits)


def _combined(culprits: list[Verdict]) -> Verdict:
    """One verdict from its culprits: several make a compound one (targets and causes joined
    by ``+``, the cause ``insufficient-evidence`` when a part's is), as sure as its least sure
    part (:data:`CONFIDENCE_COMPOUND`); it is inferred when any part is. A part that timing
    alone points at does not hide the parts a signal confirms: a thermal GPU slows the groups
    it is in, and a slow group whose links show no congestion notifications is no second cause,
    so it is left out as "not confirmed". But a part whose monitoring is missing (``unseen``)
    stays in, claimed as a culprit only: on fresh seeds every such part was a real second
    cause, so naming only the shown one named a wrong culprit. One with no target to keep
    caps the verdict at :data:`CONFIDENCE_UNCHECKED`."""
    confirmed = [c.cause != INSUFFICIENT for c in culprits]
    kept = [c for c, shown in zip(culprits, confirmed, strict=True)
            if shown or not any(confirmed) or (c.unseen and c.target is not None)]
    dropped = [c for c in culprits if not any(c is k for k in kept)]
    verdict = kept[0] if len(kept) == 1 else _compound(kept)
    if not dropped:
        return verdict
    confidence = (min(verdict.confidence, CONFIDENCE_UNCHECKED)
                  if any(c.unseen for c in dropped) else verdict.confidence)
    return replace(verdict, confidence=confidence, evidence=(
        f"{verdict.evidence}; not confirmed: {'; '.join(c.evidence for c in dropped)}"))


def _compound(parts: list[Verdict]) -> Verdict:
    causes = [c.cause for c in parts]
    cause = INSUFFICIENT if INSUFFICIENT in causes else "+".join(sorted(set(causes)))
    targets = [c.target for c in parts if c.target]
    return Verdict("compound", cause, "+".join(targets) or None,
                   min(CONFIDENCE_COMPOUND, *(c.confidence for c in parts)),
                   "; ".join(c.evidence for c in parts),
                   any(c.inferred for c in parts), any(c.unseen for c in parts))


def _compute_culprits(signals: Signals) -> list[Verdict]:
    """Ranks whose own compute share grew more than the threshold over their peers; all the
    ranks of one host (with more than one rank) make that host the culprit."""
    w = signals.window
    skew = signals.timing.skew
    arrival = pl.format(f"arrived last in {{}}% of its collectives vs {{}}% {w.then}",
                        (pl.col("last_share") * 100).round(0).cast(pl.Int64),
                        (pl.col("last_share_before") * 100).round(0).cast(pl.Int64))
    own = signals.timing.own
    late = (own.filter(pl.col("relative") > SUSPECT_RATIO).join(skew, on="rank", how="left")
            .join(signals.ranks.select("rank", "gpu"), on="rank", how="left"))
    late = late.with_columns(pl.format(
        f"rank {{}} ({{}}/{{}}) spent {{}}% of the time computing vs {{}}% {w.then} (x{{}} "
        "relative to its peers)", "rank", "host", "gpu",
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
        finding = ev.gpu_finding(signals.gpu_metrics, row["host"], row["gpu"], w)
        if finding.cause is None or finding.inferred:
            # before concluding anything by elimination: its host's CPU may show the cause
            cpu = ev.host_finding(signals.host_metrics, row["host"], w)
            if cpu.cause is not None:
                if f"host:{row['host']}" not in {c.target for c in out}:
                    out.append(_culprit("compute", f"host:{row['host']}",
                                        f"{row['text']}; {finding.text or 'no GPU cause'}",
                                        cpu, unique=False))
                continue
            finding = _eliminated(finding, [cpu.missing] if cpu.missing else [])
        out.append(_culprit("compute", f"rank:{row['rank']}", row["text"], finding, unique=True))
    return out


def _from_telemetry(signals: Signals) -> Verdict:
    """The verdict when the calls carry issue times only: the GPUs, hosts and links whose
    telemetry moved with the slowdown (:mod:`.telemetry`); with none, what is missing, or that
    nothing moved."""
    w = signals.window
    links = _rings_links(signals.timing.members["members"], signals.rank_hosts)
    suspects = monitoring_suspects(w, signals.ranks, links, signals.gpu_metrics,
                                   signals.host_metrics, signals.nic_counters)
    skew = signals.timing.skew
    if suspects:
        return _combined([_suspect_verdict(s, _arrival_text(skew, s.target, w.then))
                          for s in suspects])
    straggler = _waited_for(skew, signals.rank_hosts, w.then)
    if straggler is not None:
        rank, timing = straggler
        host = signals.rank_hosts[rank]
        gpu = signals.ranks.filter(pl.col("rank") == rank)["gpu"][0]
        cpu = ev.host_finding(signals.host_metrics, host, signals.window)
        unseen = [cpu.missing] if cpu.missing else []
        if signals.nic_counters.is_empty():
            unseen.append("no RNIC congestion counters (nic_counters): a rank can be late "
                          "behind a congested link")
        finding = _eliminated(ev.gpu_finding(signals.gpu_metrics, host, gpu, signals.window),
                              unseen)
        return _culprit("compute", f"rank:{rank}", timing, finding, unique=True,
                        by_arrival=True)
    missing = [what for what, frame in (
        ("DCGM samples (gpu_metrics)", signals.gpu_metrics),
        ("host CPU samples (node_exporter, host_metrics)", signals.host_metrics),
        ("RNIC congestion counters (nic_counters)", signals.nic_counters)) if frame.is_empty()]
    no_ends = ("the collective calls have no end times (NCCL_DEBUG COLL lines print issue "
               "times only), so timing does not say whose compute or transfer grew")
    if missing:
        return Verdict("unknown", INSUFFICIENT, None, 0.0,
                       f"{no_ends}, and the dump has no {', no '.join(missing)} to tell which "
                       "GPU, host or link slowed; add the missing monitoring, or the hook CSV with "
                       "call ends")
    return Verdict("unknown", "unknown", None, 0.0,
                   f"{no_ends}; no GPU's thermal reasons, no host's CPU busy share and no "
                   "link's congestion notifications moved with the slowdown")


def _rings_links(rings: Iterable[list[int]], rank_hosts: dict[int, str]
                 ) -> set[tuple[str, str]]:
    """The host pairs that the rings (member ranks in ring order) cross."""
    return set().union(*(member_links(members, rank_hosts) for members in rings))


NO_TIMED_CALLS = ("no collective calls with timestamps: no timing per group or rank (NCCL "
                  "before 2.26 prints Init and Channel lines but no call times), so only "
                  "monitoring can tell the culprit")


def from_monitoring(window: ev.Window, ranks: pl.DataFrame, rings: list[list[int]],
                    gpu_metrics: pl.DataFrame, host_metrics: pl.DataFrame,
                    nic_counters: pl.DataFrame) -> Verdict:
    """The verdict of an episode of a job without timed collective calls: the GPUs, hosts
    and links whose telemetry moved with it (:func:`.telemetry.monitoring_suspects`; ``ranks``
    from the NCCL Init lines, ``rings``: the communicators' members in rank order), at the
    confidence of a signal alone; with none, insufficient evidence, saying what was read."""
    rank_hosts = dict(ranks.select("rank", "host").iter_rows())
    suspects = monitoring_suspects(window, ranks, _rings_links(rings, rank_hosts),
                                   gpu_metrics, host_metrics, nic_counters)
    if suspects:
        return _baseline_named(_combined([_suspect_verdict(
            s, "", "no timed collective calls: from monitoring alone") for s in suspects]),
            window)
    missing = [what for what, frame in (
        ("DCGM samples (gpu_metrics)", gpu_metrics),
        ("host CPU samples (host_metrics)", host_metrics),
        ("RNIC congestion counters (nic_counters)", nic_counters)) if frame.is_empty()]
    seen = ("no GPU's thermal reasons or clock, no host's CPU busy share and no crossed link's "
            "congestion notifications moved with the slowdown" if not missing else
            f"the dump has no {', no '.join(missing)}" if len(missing) == 3 else
            f"no monitoring moved with the slowdown, and the dump has no {', no '.join(missing)}")
    return Verdict("unknown", INSUFFICIENT, None, 0.0,
                   f"{NO_TIMED_CALLS}; {seen} (ingest NCCL 2.26+ logs or the hook CSV for call "
                   "times)")


def _eliminated(gpu: ev.Finding, unseen: list[str]) -> ev.Finding:
    """A slower GPU concluded by elimination, withdrawn where an alternative has no monitoring
    to rule it out (``unseen``: what is missing): normal clocks rule out throttling, not a
    contended CPU, nor, where calls have issue times only, a congested link the rank waits
    behind. On fresh seeds every such conclusion was one of those."""
    if not gpu.inferred or not unseen:
        return gpu
    return ev.Finding(None, gpu.text.removesuffix(ev.INFERRED_DEGRADATION)
                      + "; clocks and throttle reasons normal",
                      f"{'; '.join(unseen)}; so a slower GPU is not concluded: normal clocks "
                      "rule out throttling only")


def _waited_for(skew: pl.DataFrame, rank_hosts: dict[int, str], then: str
                ) -> tuple[int, str] | None:
    """The rank the others waited for (see :data:`WAIT_MARGIN`), with the numbers, or None;
    ``then`` names the baseline (:attr:`.evidence.Window.then`)."""
    skew = skew.drop_nulls(
        ["excess_rate", "last_share_before"]).with_columns(
        (pl.col("last_share") - pl.col("last_share_before")).alias("last_rise"))
    if skew.height < 2:
        return None
    top = skew.sort("excess_rate", descending=True).row(0, named=True)
    others = skew.filter(pl.col("rank") != top["rank"])["last_rise"]
    runner_up = max(others.max(), 0.0)
    if top["excess_rate"] < WAIT_RISE_MIN or top["last_rise"] <= 0 \
            or top["last_rise"] < WAIT_MARGIN * runner_up:
        return None
    return top["rank"], (
        f"rank {top['rank']} ({rank_hosts[top['rank']]}) made its peers wait "
        f"{top['blame_rate']:.0%} of the time vs {top['blame_rate_before']:.0%} {then} and "
        f"arrived last in {top['last_share']:.0%} of its collectives vs "
        f"{top['last_share_before']:.0%} {then} (+{top['last_rise']:.0%}; no other rank more than "
        f"+{runner_up:.0%}), from issue times")


def _arrival_text(skew: pl.DataFrame, target: str, then: str) -> str:
    """How often a suspect rank arrived last at its collectives, during and ``then`` (its
    baseline, :attr:`.evidence.Window.then`): the timing
    that issue times do give, quoted beside the telemetry (it alone is too weak to blame: CPU
    run-ahead and waiting along the pipeline blur who arrives last)."""
    if not target.startswith("rank:"):
        return ""
    row = skew.filter(pl.col("rank") == int(target.removeprefix("rank:")))
    if row.is_empty() or row["last_share_before"][0] is None:
        return ""
    return (f"; it arrived last in {row['last_share'][0]:.0%} of its collectives vs "
            f"{row['last_share_before'][0]:.0%} {then}")


def _suspect_verdict(suspect: Suspect, timing: str,
                     source: str = "the calls have issue times only") -> Verdict:
    return Verdict(suspect.kind, suspect.cause, suspect.target, CONFIDENCE_SIGNAL,
                   f"{suspect.text}{timing} ({source})")


def _communication_culprits(signals: Signals) -> list[Verdict]:
    """The link or NIC where the groups with a slower transfer meet."""
    groups = signals.timing.groups
    slow = groups.filter("suspect")
    if slow.is_empty():
        return []
    link = localise(groups, signals.rank_hosts)
    worst = slow.sort("self_ratio", descending=True, nulls_last=True).row(0, named=True)
    timing = (f"{slow.height} of {groups.height} communication groups transfer more than "
              f"{SUSPECT_RATIO - 1:.0%} slower (worst x{worst['self_ratio'] or 0:.2f} over its "
              f"own time {signals.window.then}, x{worst['cluster_ratio']:.2f} over its "
              "comparable cluster)")
    if not link.crossed:
        return [Verdict("communication", INSUFFICIENT, None, 0.0,
                        timing + "; the slow groups do not cross hosts, no link to blame")]
    if link.target is None and not link.candidates:
        return [_surged_crossed_link(signals, link, timing)]
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
    return [_culprit("communication", target, timing, finding,
                     unique=link.target is not None)]


def _surged_crossed_link(signals: Signals, link: LinkVerdict, timing: str) -> Verdict:
    """Where no link or NIC is on every slow group and on no healthy one (a healthy group
    crosses the congested link but moves too little through it to slow by 10 %, or the slow
    groups share no link): the link a slow group crosses whose two ends report a congestion
    surge with the episode (:func:`.telemetry.link_suspects`). The signal localises it, as
    on issue times only; with no such link, nothing is named."""
    timing += (f"; no link or NIC is on all {link.slow_groups} slow groups and on none of the "
               f"{link.healthy_groups} healthy ones")
    hosts = sorted(set(signals.rank_hosts.values()))
    surged = link_suspects(signals.nic_counters, hosts, signals.window, set(link.crossed))
    if not surged:
        reason = ("no RNIC congestion counters (nic_counters) to tell which"
                  if signals.nic_counters.is_empty() else
                  "no link they cross has congestion notifications surging at both ends")
        return Verdict("communication", INSUFFICIENT, None, 0.0, f"{timing}; {reason}")
    suspect = surged[0]
    return Verdict("communication", suspect.cause, suspect.target, CONFIDENCE_SIGNAL,
                   f"{timing}; of the links they cross, {suspect.target} has congestion "
                   f"notifications at both ends: {suspect.text}")


def _surged_candidate(candidates: tuple[str, ...], surged: tuple[str, ...]) -> str | None:
    """The one candidate link (or NIC) whose every host shows a CNP surge, if exactly one."""
    named = {f"nic:{h}" for h in surged} | {link_target(a, b) for a in surged for b in surged}
    fitting = [c for c in candidates if c in named]
    return fitting[0] if len(fitting) == 1 else None


def _culprit(kind: str, target: str | None, timing: str, finding: ev.Finding,
             unique: bool, by_arrival: bool = False) -> Verdict:
    """The verdict on a culprit that timing named (``unique``: alone; else monitoring chose
    ``target`` among the candidates timing left, or none; ``by_arrival``: timing from issue
    times, whom the others waited for) with its monitoring finding."""
    timed = CONFIDENCE_ARRIVAL if by_arrival else CONFIDENCE_TIMING
    if target is None:
        confidence = 0.0
    elif finding.cause is None:
        confidence = timed
    elif finding.inferred:
        confidence = min(timed, CONFIDENCE_INFERRED)
    else:
        # a wait from issue times is too weak to count as the second instrument
        confidence = (CONFIDENCE_TIMING_AND_SIGNAL if unique and not by_arrival
                      else CONFIDENCE_SIGNAL)
    if finding.cause is None:
        reason = finding.missing or "monitoring does not explain it"
        text = f"{timing}; {finding.text + '; ' if finding.text else ''}{reason}"
        return Verdict(kind, INSUFFICIENT, target, confidence, text,
                       unseen=not finding.text)
    return Verdict(kind, finding.cause, target, confidence, f"{timing}; {finding.text}",
                   finding.inferred)

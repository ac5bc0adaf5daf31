"""The job's verdict in plain words: what an on-call engineer reads first.

One sentence per fail-slow episode says when it started, how much slower the job ran and for
how long, who and why (the attribution's culprit and cause, with the telemetry numbers that
decided it) and what it cost (the time lost, and as a share of the job: its JCT slowdown); the
evidence follows as a list of the clauses attribution joined with ``"; "``.
"""

from __future__ import annotations

import re

import polars as pl

from tracekit.core.identity import link_hosts
from tracekit.report.series import SeriesAxis

EVIDENCE_SEPARATOR = "; "
"""How attribution joins the clauses of an episode's ``evidence``."""

QUOTED_CLAUSES = 2
"""Telemetry clauses (those with a before -> during value) quoted in the verdict sentence;
the rest are in the evidence list."""

_CHANGE = re.compile(r"->")
_MISSING = re.compile(r"\bno ([^;:,()]+?) \((?:[^)]*\b)?"
                      r"(?:gpu_metrics|host_metrics|nic_counters)\b")
"""Attribution names monitoring that a verdict needed and the dump lacks as ``no WHAT (TABLE
...)``, its table in the parenthesis (``no DCGM samples (gpu_metrics) for GPU h2/0``)."""
_GPU = re.compile(r"\bgpu[: ]([\w.-]+/\d+)", re.IGNORECASE)

CLOCKED = SeriesAxis(clock=True, seconds=True, logged=0, first=None, last=None, covered=0,
                     ranks=0)
"""The axis a sentence assumes when the caller gives none: a clock, seconds, every iteration."""

CAUSE_WORDS = {"gpu-thermal": "GPU thermal throttling", "gpu-degradation": "GPU degradation",
               "cpu-contention": "CPU contention", "network-congestion": "network congestion"}
"""Causes as a sentence says them; others lose their hyphens."""


def culprits(episodes: pl.DataFrame) -> dict[str, set[str]]:
    """What the episodes name: ranks, GPUs (``host/gpu``, from the target or the evidence) and
    hosts (of links, NICs, hosts and named GPUs)."""
    found: dict[str, set[str]] = {"rank": set(), "gpu": set(), "host": set()}
    for row in episodes.iter_rows(named=True):
        for part in (row.get("target") or "").split("+"):
            kind, _, name = part.partition(":")
            if kind == "rank":
                found["rank"].add(name)
            elif kind in ("link", "host", "nic"):
                found["host"].update((link_hosts(name) or (name,)) if kind == "link"
                                     else [name])
        found["gpu"].update(_GPU.findall(f"{row.get('target') or ''} {row.get('evidence') or ''}"))
    found["host"].update(g.split("/")[0] for g in found["gpu"])
    return found



def culprit_in_words(target: str | None) -> str | None:
    """``link:gpu01<->gpu02`` -> ``the link gpu01–gpu02``, ``rank:13`` -> ``rank 13``,
    ``rank:6+rank:7+rank:9`` -> ``ranks 6, 7 and 9``, ..."""
    if not target:
        return None
    parts, ranks = [], []
    for part in target.split("+"):
        kind, _, name = part.partition(":")
        if kind == "rank" and name:
            if not ranks:
                parts.append(None)  # the ranks, in words, where the first one was
            ranks.append(name)
        elif kind == "link":
            hosts = link_hosts(name)
            parts.append("the link " + ("–".join(hosts) if hosts else name))
        elif kind == "gpu":
            parts.append(f"GPU {name}")
        else:
            parts.append(f"{kind} {name}" if name else kind)
    named = (f"rank {ranks[0]}" if len(ranks) == 1
             else f"ranks {', '.join(ranks[:-1])} and {ranks[-1]}" if ranks else None)
    return " and ".join(named if p is None else p for p in parts)


def evidence_clauses(evidence: str | None) -> list[str]:
    """The clauses of an episode's evidence, in attribution's order."""
    return [c.strip() for c in (evidence or "").split(EVIDENCE_SEPARATOR) if c.strip()]


def missing_monitoring(evidence: str | None) -> list[str]:
    """What monitoring the evidence says is missing, in its order, each once: ``DCGM
    samples``, ``RNIC congestion counters``, ..."""
    return list(dict.fromkeys(_MISSING.findall(evidence or "")))


def _unattributed_reason(evidence: str | None) -> str:
    """Why a cause is not attributed: attribution's last clause where it names all the
    monitoring missing, else all of it (``no DCGM samples and no RNIC congestion counters to
    tell why``)."""
    clauses = evidence_clauses(evidence)
    last = clauses[-1] if clauses else ""
    missing = missing_monitoring(evidence)
    if set(missing) <= set(missing_monitoring(last)):
        return last
    named = [f"no {what}" for what in missing]
    return ", ".join(named[:-1]) + " and " + named[-1] + " to tell why" if len(named) > 1 \
        else f"{named[0]} to tell why"


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 120 else f"{seconds:.0f} s"


NOT_ATTRIBUTED_REASON = "no culprit or cause was found"
"""Why an episode has no cause, when nothing more specific is known."""


NOT_FOUND = ("insufficient-evidence", "unknown")
"""Causes that name no cause: attribution found a culprit but not why, or nothing."""

KIND_WORDS = {"compute": "own compute", "communication": "communication"}
"""Where a culprit's extra time went, as a sentence says it when the cause is not known."""


def _when(row: dict, axis: SeriesAxis) -> str:
    """How long and from when: ``for 4.5 min from 09:04:15 UTC`` on a clock, else ``for 28
    iterations (42 s) from iteration 62 to 89``."""
    start = axis.at(row.get("start_iteration"), row.get("t_start_ns"))
    if axis.clock and row.get("t_start_ns") is not None:
        span = f" for {_duration(row['duration_s'])}" if row.get("duration_s") is not None else ""
        return f"{span} from {start}"
    count = axis.counted(row)
    seconds = (f" ({_duration(row['duration_s'])})"
               if axis.whole_job and row.get("duration_s") is not None else "")
    span = f" for {count} {axis.noun()}{'s' if count != 1 else ''}{seconds}" if count else ""
    end = row.get("end_iteration")
    return f"{span} from {start}" + (f" to {end}" if end is not None else "")


def episode_sentence(row: dict, axis: SeriesAxis = CLOCKED,
                     unattributed: str = NOT_ATTRIBUTED_REASON) -> str:
    """One episode as a sentence: when, how much, how long, who and why, what it cost;
    ``unattributed`` says why an episode without a cause has none."""
    slower = f"{100 * (row['slowdown'] - 1):.0f} % slower" if row.get("slowdown") else "slower"
    text = f"The job ran {slower}{_when(row, axis)}"
    cause, who = row.get("cause"), culprit_in_words(row.get("target"))
    clauses = evidence_clauses(row.get("evidence"))
    if cause and cause not in NOT_FOUND:
        text += " because of " + " and ".join(CAUSE_WORDS.get(c, c.replace("-", " "))
                                              for c in cause.split("+"))
        if who:
            gpus = sorted(culprits(pl.DataFrame([row]))["gpu"])
            named = row.get("target") or ""
            text += f" on {who}" + (f", GPU {', '.join(gpus)}"
                                    if gpus and "gpu:" not in named else "")
        quoted = [c for c in clauses if _CHANGE.search(c)]
        if quoted:
            text += " (" + "; ".join(quoted[:QUOTED_CLAUSES]) + ")"
    elif who:
        where = KIND_WORDS.get(row.get("kind") or "")
        text += f" on {who}" + (f", in its {where}" if where else "")
        # what monitoring did show (a thermal GPU beside a link no counters could check)
        reason = _unattributed_reason(row.get("evidence"))
        quoted = [c for c in clauses if _CHANGE.search(c) and c != reason][:QUOTED_CLAUSES]
        said = (reason if reason.startswith("cause ")
                else f"cause not attributed: {reason}" if reason else "cause not attributed")
        text += " (" + "; ".join([*quoted, said]) + ")"
    elif cause in NOT_FOUND and clauses:
        text += f" (not attributed: {_unattributed_reason(row.get('evidence'))})"
    else:
        text += f" (not attributed: {unattributed})"
    return f"{text}; {axis.cost(row.get('lost_s'), row.get('jct_slowdown'))}."


def by_start(episodes: pl.DataFrame) -> pl.DataFrame:
    """Episodes in the order they started: by iteration, which every episode has, then by
    time (episodes of step-only data have none)."""
    return episodes.sort([c for c in ("start_iteration", "t_start_ns") if c in episodes.columns])


def verdict_sentences(episodes: pl.DataFrame, median_iteration_s: float | None,
                      axis: SeriesAxis = CLOCKED,
                      unattributed: str = NOT_ATTRIBUTED_REASON) -> list[str]:
    """The verdict: a sentence per episode (by start) and, for several, their total; a job
    without episodes says it ran at its own pace."""
    if episodes.is_empty():
        pace = (f" (median iteration {axis.value(median_iteration_s)})"
                if median_iteration_s is not None else "")
        return [f"No fail-slow: the job ran at its own pace{pace}."]
    rows = list(by_start(episodes).iter_rows(named=True))
    sentences = [episode_sentence(row, axis, unattributed) for row in rows]
    if len(rows) > 1:
        lost = sum(r["lost_s"] or 0.0 for r in rows)
        share = sum(r["jct_slowdown"] or 0.0 for r in rows)
        sentences.append(f"In all, {len(rows)} episodes "
                         f"{axis.cost(lost, share).removeprefix('it ')}.")
    return sentences

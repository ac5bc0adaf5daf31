"""The job's verdict in plain words: what an on-call engineer reads first.

One sentence per fail-slow episode says when it started, how much slower the job ran and for
how long, who and why (the attribution's culprit and cause, with the telemetry numbers that
decided it) and what it cost (the time lost, and as a share of the job: its JCT slowdown); the
evidence follows as a list of the clauses attribution joined with ``"; "``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

import polars as pl

from tracekit.core.identity import link_hosts

EVIDENCE_SEPARATOR = "; "
"""How attribution joins the clauses of an episode's ``evidence``."""

QUOTED_CLAUSES = 2
"""Telemetry clauses (those with a before -> during value) quoted in the verdict sentence;
the rest are in the evidence list."""

_CHANGE = re.compile(r"->")
_GPU = re.compile(r"\bgpu[: ]([\w.-]+/\d+)", re.IGNORECASE)

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
    """``link:gpu01<->gpu02`` -> ``the link gpu01–gpu02``, ``rank:13`` -> ``rank 13``, ..."""
    if not target:
        return None
    parts = []
    for part in target.split("+"):
        kind, _, name = part.partition(":")
        if kind == "link":
            hosts = link_hosts(name)
            parts.append("the link " + ("–".join(hosts) if hosts else name))
        elif kind == "gpu":
            parts.append(f"GPU {name}")
        else:
            parts.append(f"{kind} {name}" if name else kind)
    return " and ".join(parts)


def evidence_clauses(evidence: str | None) -> list[str]:
    """The clauses of an episode's evidence, in attribution's order."""
    return [c.strip() for c in (evidence or "").split(EVIDENCE_SEPARATOR) if c.strip()]


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 120 else f"{seconds:.0f} s"


def episode_sentence(row: dict) -> str:
    """One episode as a sentence: when, how much, how long, who and why, what it cost."""
    start = datetime.fromtimestamp(row["t_start_ns"] / 1e9, UTC).strftime("%H:%M:%S UTC")
    slower = f"{100 * (row['slowdown'] - 1):.0f} % slower" if row.get("slowdown") else "slower"
    span = f" for {_duration(row['duration_s'])}" if row.get("duration_s") is not None else ""
    text = f"The job ran {slower}{span} from {start}"
    cause, who = row.get("cause"), culprit_in_words(row.get("target"))
    if cause:
        text += " because of " + " and ".join(CAUSE_WORDS.get(c, c.replace("-", " "))
                                              for c in cause.split("+"))
        if who:
            gpus = sorted(culprits(pl.DataFrame([row]))["gpu"])
            named = row.get("target") or ""
            text += f" on {who}" + (f", GPU {', '.join(gpus)}"
                                    if gpus and "gpu:" not in named else "")
        quoted = [c for c in evidence_clauses(row.get("evidence")) if _CHANGE.search(c)]
        if quoted:
            text += " (" + "; ".join(quoted[:QUOTED_CLAUSES]) + ")"
    else:
        text += " (not attributed: no culprit or cause was found)"
    if row.get("lost_s") is None:
        return text + "; its cost was not measured."
    share = (f" ({100 * row['jct_slowdown']:.1f} % of the job)"
             if row.get("jct_slowdown") is not None else "")
    return text + f"; it cost {row['lost_s']:.1f} s{share}."


def verdict_sentences(episodes: pl.DataFrame, median_iteration_s: float | None) -> list[str]:
    """The verdict: a sentence per episode (by start) and, for several, their total; a job
    without episodes says it ran at its own pace."""
    if episodes.is_empty():
        pace = (f" (median iteration {median_iteration_s:.3f} s)"
                if median_iteration_s is not None else "")
        return [f"No fail-slow: the job ran at its own pace{pace}."]
    rows = list(episodes.sort("t_start_ns").iter_rows(named=True))
    sentences = [episode_sentence(row) for row in rows]
    if len(rows) > 1:
        lost = sum(r["lost_s"] or 0.0 for r in rows)
        share = sum(r["jct_slowdown"] or 0.0 for r in rows)
        sentences.append(f"In all, {len(rows)} episodes cost {lost:.1f} s "
                         f"({100 * share:.1f} % of the job).")
    return sentences

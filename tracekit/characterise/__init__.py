"""Characterisation of many jobs or nodes: the Greyhound-style job summaries, cause table and
CDFs (:mod:`~tracekit.characterise.jobs`), and node fault durations and relapses
(:mod:`~tracekit.characterise.faults`). Each reads tables a reader produced."""

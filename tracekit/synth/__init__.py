"""Labeled trace synthesizer: simulated Megatron-style hybrid-parallel jobs with injected
fail-slows and natural noise, written in the raw formats real tools print.

Start from :func:`tracekit.synth.job.generate_job` (one job folder) or
:func:`tracekit.synth.corpus.generate_corpus` (a labeled corpus shaped like the Greyhound
probing campaigns). docs/synth.md describes the model and the label policy.
"""

"""Evaluation: detected episodes scored against labels (:mod:`tracekit.evaluate.scoring`).
Scoring reads datasets; it never runs the pipeline (``tracekit eval`` does that first)."""

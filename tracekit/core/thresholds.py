"""Thresholds that more than one stage judges by, named once so that detection and attribution
cannot drift apart."""

SUSPECT_RATIO = 1.10
"""Greyhound's profiling threshold: more than 10 % over the comparable cluster's median."""

"""The pipeline on top of the stages: one job from dump to report
(:mod:`~tracekit.pipeline.analyze`) and a corpus of jobs analysed, scored or reported
(:mod:`~tracekit.pipeline.corpus`)."""

"""Read cluster dumps (collective logs, training logs, monitoring exports) into a dataset.

One module per source family implements :class:`tracekit.ingest.base.Reader`; the pipeline in
:mod:`tracekit.ingest.pipeline` walks inputs, sniffs formats and writes tables.
"""

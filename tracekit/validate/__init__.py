"""Confirm a trace-based suspicion on hardware: GEMM and P2P micro-benchmarks shaped like the
job's own work, each GPU and link compared with its peers, and a verdict per episode suspect.

Modules: ``schedule`` (ring / tree pass schedules), ``gemm`` and ``p2p`` (the checks), ``peers``
(the peer-median comparison), ``job`` (what a dataset says about the job), ``verdict`` (the
``validations`` table). PyTorch is the optional ``gpu`` extra, imported only when a check runs.
"""

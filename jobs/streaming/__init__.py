"""``kappa stream``: live and replay runs of a pipeline's records, the fenced Redis sink, checkpoints.

The pipeline is the one whose ``streaming.job`` is ``kappa-stream`` (:mod:`jobs.streaming.codec`);
contracts in docs/streaming.md.
"""

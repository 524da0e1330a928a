"""``kappa pipelines load | gold | reconcile``: a pipeline's lake tables (filled in by the lake tier)."""

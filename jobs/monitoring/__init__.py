"""Monitoring: a Prometheus exporter of what the tiers publish (``kappa metrics serve``)."""

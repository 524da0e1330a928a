"""Collection tier: the collector that gets a pipeline's events into Kafka, and `kappa generate`."""

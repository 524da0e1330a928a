"""Collection tier: RSVP event generator and the collector that gets events into Kafka."""

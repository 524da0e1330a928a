"""The embedded local stack (a Kafka-protocol broker and Redis) and its health probes."""

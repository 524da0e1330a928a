"""Kafka -> Delta batch loader: exactly-once loads, quality gates, maintenance, BI SQL (docs/tables.md)."""

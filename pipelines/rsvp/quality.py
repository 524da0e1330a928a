"""The RSVP pipeline's data-quality suites, one per loaded table (docs/tables.md lists them).

Each is built when a load or a quality run starts (freshness and event-time bounds follow the
clock and ``loader`` config); the rule kinds are jobs/loader/suites.py's.
"""

from __future__ import annotations

from jobs.config.load import KappaConfig
from jobs.loader.suites import DLQ_COLUMNS, Rule, between, column_set, event_ms, fresh, not_null
from pipelines.rsvp.tables import ANALYZED_SCHEMA, SUMMARY_SCHEMA

BRONZE_COLUMNS = ("rsvp_id", "mtime", "event_time", "value", "kafka_topic", "kafka_partition",
                  "kafka_offset", "kafka_timestamp", "event_date")
KINDS = ("city_window", "trending", "top_topics", "members_window", "event")
"""The summary kinds the streaming job emits (gold.rsvp_summaries ``kind``)."""


def bronze(cfg: KappaConfig) -> list[Rule]:
    """bronze.rsvps_raw: every record keyed and timed."""
    return [column_set(BRONZE_COLUMNS), not_null("rsvp_id"), not_null("mtime"),
            event_ms(cfg, "mtime"), not_null("kafka_offset"), fresh(cfg, "mtime", 1000)]


def dlq(cfg: KappaConfig) -> list[Rule]:
    """ops.dlq: every dead letter has its reason."""
    return [column_set(DLQ_COLUMNS), not_null("reason"), not_null("kafka_offset")]


def silver(cfg: KappaConfig) -> list[Rule]:
    """silver.rsvps: one valid row per RSVP."""
    return [
        column_set([f.name for f in ANALYZED_SCHEMA.fields]), not_null("rsvp_id"),
        Rule("rsvp_id is unique", "ExpectColumnValuesToBeUnique", {"column": "rsvp_id"}),
        not_null("event_time_ms"), event_ms(cfg, "event_time_ms"),
        Rule("response is yes or no", "ExpectColumnValuesToBeInSet",
             {"column": "response", "value_set": ["yes", "no"]}),
        between("guests", 0, None), between("lat", -90, 90), between("lon", -180, 180),
        fresh(cfg, "event_time_ms", 1000),
    ]


def gold(cfg: KappaConfig) -> list[Rule]:
    """gold.rsvp_summaries: one row per summary key, of a documented kind."""
    return [
        column_set([f.name for f in SUMMARY_SCHEMA.fields]), not_null("key"),
        Rule("kind is a documented kind", "ExpectColumnValuesToBeInSet",
             {"column": "kind", "value_set": list(KINDS)}),
        between("count", 0, None), fresh(cfg, "emitted_ms", 1000),
    ]

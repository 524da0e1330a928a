"""One declarative data-quality suite per loaded table (built at run time, human-readable names).

A :class:`Rule` is one Great Expectations expectation plus what a failure means: row-level
rules (``ExpectColumnValuesTo*``) name the failing rows, which policy ``quarantine`` moves to
``quarantine.<table>``; table-level rules (schema, freshness) fail the whole batch when
``blocking`` (freshness is reported only, unless ``loader.freshness_blocking``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from jobs.common.config import KappaConfig

BRONZE_COLUMNS = ("rsvp_id", "mtime", "event_time", "value", "kafka_topic", "kafka_partition",
                  "kafka_offset", "kafka_timestamp", "event_date")
DLQ_COLUMNS = ("reason_code", "reason", "source", "source_topic", "source_partition", "source_offset",
               "value", "kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp", "dlq_date")
KINDS = ("city_window", "trending", "top_topics", "members_window", "event")


@dataclass(frozen=True)
class Rule:
    """One expectation of a suite.

    Attributes:
        name: what it checks, in words (reports, quarantine rows).
        expectation: the GX expectation class name, e.g. ``ExpectColumnValuesToNotBeNull``.
        kwargs: its arguments.
        row_level: failing rows can be named (and quarantined).
        blocking: a failure fails the batch under every policy.
    """

    name: str
    expectation: str
    kwargs: dict[str, Any]
    row_level: bool = True
    blocking: bool = False


def not_null(column: str) -> Rule:
    """The column holds no null."""
    return Rule(f"{column} is not null", "ExpectColumnValuesToNotBeNull", {"column": column})


def _between(column: str, low: float | None, high: float | None) -> Rule:
    if high is None:
        name = f"{column} at least {low}"
    elif low is None:
        name = f"{column} at most {high}"
    else:
        name = f"{column} between {low} and {high}"
    return Rule(name, "ExpectColumnValuesToBeBetween",
                {"column": column, "min_value": low, "max_value": high})


def column_set(columns: tuple[str, ...] | list[str]) -> Rule:
    """The table has (at least) these columns; blocking."""
    return Rule("schema: the table's columns", "ExpectTableColumnsToMatchSet",
                {"column_set": list(columns), "exact_match": False}, row_level=False, blocking=True)


def _fresh(cfg: KappaConfig, column: str, scale: float) -> Rule:
    oldest = (time.time() - cfg.loader.freshness_max_age_s) * scale
    return Rule(f"freshness: newest {column} at most {cfg.loader.freshness_max_age_s}s old",
                "ExpectColumnMaxToBeBetween", {"column": column, "min_value": oldest},
                row_level=False, blocking=cfg.loader.freshness_blocking)


def event_ms(cfg: KappaConfig, column: str) -> Rule:
    """Epoch milliseconds from ``loader.min_event_ms`` to ``loader.future_skew_s`` ahead of now."""
    return _between(column, cfg.loader.min_event_ms, (time.time() + cfg.loader.future_skew_s) * 1000)


def suite_rules(cfg: KappaConfig, table: str, declared: Sequence[Rule] = ()) -> list[Rule]:
    """The suite of one table (docs/tables.md lists them); ``declared`` when a spec carries its own."""
    from jobs.loader.transforms import ANALYZED_SCHEMA, SUMMARY_SCHEMA

    if declared:
        return list(declared)
    if table == "bronze.rsvps_raw":
        return [column_set(BRONZE_COLUMNS), not_null("rsvp_id"), not_null("mtime"),
                event_ms(cfg, "mtime"), not_null("kafka_offset"), _fresh(cfg, "mtime", 1000)]
    if table == "ops.dlq":
        return [column_set(DLQ_COLUMNS), not_null("reason"), not_null("kafka_offset")]
    if table == "silver.rsvps":
        return [
            column_set([f.name for f in ANALYZED_SCHEMA.fields]), not_null("rsvp_id"),
            Rule("rsvp_id is unique", "ExpectColumnValuesToBeUnique", {"column": "rsvp_id"}),
            not_null("event_time_ms"), event_ms(cfg, "event_time_ms"),
            Rule("response is yes or no", "ExpectColumnValuesToBeInSet",
                 {"column": "response", "value_set": ["yes", "no"]}),
            _between("guests", 0, None), _between("lat", -90, 90), _between("lon", -180, 180),
            _fresh(cfg, "event_time_ms", 1000),
        ]
    if table == "gold.rsvp_summaries":
        return [
            column_set([f.name for f in SUMMARY_SCHEMA.fields]), not_null("key"),
            Rule("kind is a documented kind", "ExpectColumnValuesToBeInSet",
                 {"column": "kind", "value_set": list(KINDS)}),
            _between("count", 0, None), _fresh(cfg, "emitted_ms", 1000),
        ]
    return []

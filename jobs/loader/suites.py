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

from jobs.config.load import KappaConfig

DLQ_COLUMNS = ("reason_code", "reason", "source", "source_topic", "source_partition", "source_offset",
               "value", "kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp", "dlq_date")


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


def between(column: str, low: float | None, high: float | None) -> Rule:
    """The column's values lie from ``low`` to ``high`` (None: unbounded on that side)."""
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


def fresh(cfg: KappaConfig, column: str, scale: float) -> Rule:
    """The newest ``column`` (seconds times ``scale``) is at most ``loader.freshness_max_age_s`` old."""
    oldest = (time.time() - cfg.loader.freshness_max_age_s) * scale
    return Rule(f"freshness: newest {column} at most {cfg.loader.freshness_max_age_s}s old",
                "ExpectColumnMaxToBeBetween", {"column": column, "min_value": oldest},
                row_level=False, blocking=cfg.loader.freshness_blocking)


def event_ms(cfg: KappaConfig, column: str) -> Rule:
    """Epoch milliseconds from ``loader.min_event_ms`` to ``loader.future_skew_s`` ahead of now."""
    return between(column, cfg.loader.min_event_ms, (time.time() + cfg.loader.future_skew_s) * 1000)


def suite_rules(cfg: KappaConfig, table: str, declared: Sequence[Rule] = ()) -> list[Rule]:
    """The suite of one table: ``declared`` when a spec carries its own, else the pipeline's.

    The pipeline's suites are the ones its code registers with ``@pipeline.quality(table)``
    (docs/tables.md lists them); a table without one has an empty suite.
    """
    from jobs.loader.pipeline import loaded_code

    if declared:
        return list(declared)
    build = loaded_code(cfg).quality_fns.get(table)
    return build(cfg) if build is not None else []

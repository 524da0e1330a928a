"""The driver's side of a batch's task output (jobs/streaming/task.py): counts and timings.

Every task returns increment rows, one :data:`~jobs.streaming.task.STATS_KIND` row per (topic,
partition, applicable) and one :data:`~jobs.streaming.task.TASK_KIND` row of timings; the driver
sums the first two across tasks and keeps each timing phase's largest value.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from jobs.streaming.aggregates import INCREMENT_COLUMNS, SUMS, increments_table
from jobs.streaming.task import STAT_COUNTS, STATS_KIND, TASK_KIND


def split_output(table: pa.Table) -> tuple[list[dict[str, Any]], pa.Table]:
    """Task output -> (per-partition stats summed across tasks, increments summed by key).

    The increments are summed in Arrow (one hash aggregation in C++, not a Python loop over
    every task's rows): the counts and sums add up, ``label`` is the greatest. They stay
    a table (:func:`~jobs.streaming.aggregates.increment_arrow_schema`) up to the Redis apply,
    which formats the events' writes column-wise.
    """
    is_stats = pc.equal(table["kind"], STATS_KIND)
    is_counted = pc.and_(pc.invert(is_stats), pc.not_equal(table["kind"], TASK_KIND))
    summed = (table.filter(is_counted)
              .group_by(["kind", "window_start", "item"], use_threads=False)
              .aggregate([*((name, "sum") for name in SUMS), ("label", "max")])
              .rename_columns(list(INCREMENT_COLUMNS)))
    return _sum_stats(table.filter(is_stats)["label"].to_pylist()), increments_table(summed)


def task_timings(table: pa.Table) -> dict[str, Any]:
    """The tasks' phase timings in a batch's output: how many tasks, each phase's largest ms.

    Phases: ``read`` (waiting for records, the spill writes included), ``process`` (validate,
    produce, count), ``flush``, ``members`` (the HyperLogLog adds), ``output`` (building the
    counts), ``trim`` (handing memory back) and ``task`` (the whole task).
    """
    labels = [json.loads(label) for label in
              table.filter(pc.equal(table["kind"], TASK_KIND))["label"].to_pylist()]
    names = sorted({name for label in labels for name in label})
    return {"count": len(labels),
            "max_ms": {name: max(label.get(name, 0) for label in labels) for name in names}}


def _sum_stats(labels: list[str]) -> list[dict[str, Any]]:
    stats: dict[tuple[str, int, bool], dict[str, Any]] = {}
    for label in labels:
        st = json.loads(label)
        key = (st["topic"], st["partition"], st["applicable"])
        into = stats.get(key)
        if into is None:
            stats[key] = st
            continue
        for name in STAT_COUNTS:
            into[name] += st[name]
        into["min_offset"] = min(into["min_offset"], st["min_offset"])
        into["max_offset"] = max(into["max_offset"], st["max_offset"])
        events = [v for v in (into["max_event_ms"], st["max_event_ms"]) if v is not None]
        into["max_event_ms"] = max(events) if events else None
    return list(stats.values())

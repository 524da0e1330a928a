"""``kappa stream status``: every query that reported its metrics to Redis, and how it is doing.

A row per query: running or not (its lock), the last batch, rows/s, lag, watermark, where the
last batch's time went (docs/streaming.md, ``platform.metrics``) and a Redis apply left pending
by a stop or crash (docs/streaming.md, "Applied in the background").
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from jobs.common.config import KappaConfig
from jobs.streaming.state import PendingApplyFile, checkpoint_path, lock_holder
from jobs.streaming.summaries import query_metrics


def status_rows(cfg: KappaConfig) -> list[dict[str, Any]]:
    """One row per query (the ``--json`` output)."""
    rows = []
    for metrics in query_metrics(cfg):
        query = metrics.get("query", "?")
        checkpoint = checkpoint_path(cfg.lake.checkpoint_root, query)
        pid = lock_holder(checkpoint)
        pending = PendingApplyFile(checkpoint).read()
        age = (time.time() * 1000 - float(metrics.get("emitted_ms", 0))) / 1000
        rows.append({"query": query, "running": pid is not None, "pid": pid,
                     "last_batch": _int(metrics.get("batch_id")), "last_batch_age_s": round(age, 1),
                     "rows_per_s": float(metrics.get("rows_per_s", 0)),
                     "offsets_behind_latest": _int(metrics.get("offsets_behind_latest")),
                     "watermark_ms": _int(metrics.get("watermark_ms")),
                     "input_rows": _int(metrics.get("input_rows")),
                     "dlq_rows": _int(metrics.get("dlq_rows")), "late_rows": _int(metrics.get("late_rows")),
                     "batch_duration_ms": _int(metrics.get("batch_duration_ms")),
                     "phases_ms": _json(metrics.get("phases_ms")), "tasks": _json(metrics.get("tasks")),
                     "apply_ms": _json(metrics.get("apply_ms")),
                     "pending_apply_batch": pending.get("batch_id") if pending else None})
    return rows


def status_lines(row: dict[str, Any]) -> list[str]:
    """The text lines of one row: the query's state, then where its last batch's time went."""
    assert isinstance(row["watermark_ms"], int | None)
    state = f"running (pid {row['pid']})" if row["running"] else "NOT running"
    watermark = (datetime.fromtimestamp(row["watermark_ms"] / 1000, tz=UTC).isoformat()
                 if row["watermark_ms"] is not None else "-")
    lines = [f"{row['query']}: {state}; last batch {row['last_batch']} {row['last_batch_age_s']} s "
             f"ago, {row['rows_per_s']:.0f} rows/s, {row['offsets_behind_latest']} behind latest, "
             f"watermark {watermark}"]
    if row["phases_ms"]:
        lines.append(f"  {_where_the_time_went(row)}")
    if row["pending_apply_batch"] is not None and not row["running"]:
        lines.append(f"  the Redis effects of batch {row['pending_apply_batch']} are pending: the next "
                     "start applies them (docs/streaming.md, \"Applied in the background\")")
    return lines


def _where_the_time_went(row: dict[str, Any]) -> str:
    """One line: the last batch's driver phases and its slowest task's phases (docs/streaming.md)."""
    phases, tasks = row["phases_ms"] or {}, (row["tasks"] or {}).get("max_ms", {})
    line = f"last batch {row['batch_duration_ms']} ms: Spark job {phases.get('read_process_produce', '?')} ms"
    if tasks:
        parts = ", ".join(f"{name} {tasks[name]}" for name in ("read", "process", "flush", "members")
                          if name in tasks)
        line += f" (slowest task {tasks.get('task', '?')} ms: {parts})"
    applied = (row.get("apply_ms") or {}) | phases  # apply_ms: the (background) Redis apply
    return line + "".join(f", {name.replace('_', ' ')} {applied[name]} ms"
                          for name in ("wait_apply", "redis_apply", "summaries") if name in applied)


def _json(value: Any) -> Any:
    """A metrics hash field holding JSON (dicts and lists are stored as JSON text), or None."""
    if value in (None, "None", ""):
        return None
    try:
        return json.loads(value)
    except (TypeError, ValueError):
        return None


def _int(value: Any) -> int | None:
    if value in (None, "None", ""):
        return None
    return int(float(value))

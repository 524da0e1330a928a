"""``kappa stream status``: every query that reported its metrics or state to Redis, and how it is.

A row per query: its state (its lease on any host, its local lock and its state record,
jobs/streaming/watch.py), the last batch, rows/s, lag, watermark, where the last batch's time
went (docs/streaming.md, ``platform.metrics``) and a Redis apply left pending by a stop or crash
(docs/streaming.md, "Applied in the background").
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from jobs.config.load import KappaConfig
from jobs.streaming.lease import host_name, lease_holder
from jobs.streaming.state import PendingApplyFile, checkpoint_path, lock_holder
from jobs.streaming.summaries import query_metrics, query_states

VIEWS_TIMEOUT_S = 3.0
"""How long status waits for the view pointer before it shows the configured version alone."""


def version_status_rows(cfg: KappaConfig, *, finished: bool = True) -> list[dict[str, Any]]:
    """:func:`status_rows` of every view version with outputs, the current one first.

    Each row also says its ``view_version`` and whether that version is the ``current`` one
    (docs/reprocess.md): after a promote the live job writes under the new version's prefix.
    """
    from jobs.views.versions import ViewsError, read_views, version_config

    try:
        views = read_views(cfg, timeout_s=VIEWS_TIMEOUT_S)
    except ViewsError:   # Kafka down: the configured version's queries, as Redis has them
        return status_rows(cfg, finished=finished)
    rows = []
    for version in sorted(views.live(), key=lambda v: (v != views.current, v)):
        for row in status_rows(version_config(cfg, version), finished=finished):
            rows.append(row | {"view_version": version, "current": version == views.current,
                               "version_state": views.state(version)})
    return rows


def status_rows(cfg: KappaConfig, *, finished: bool = True) -> list[dict[str, Any]]:
    """One row per query of one view version's prefix; ``finished=False`` leaves finished replays out."""
    states = query_states(cfg)
    by_query = {metrics.get("query", "?"): metrics for metrics in query_metrics(cfg)}
    rows = []
    for query in sorted(by_query.keys() | states.keys()):
        metrics, state = by_query.get(query, {}), states.get(query, {})
        checkpoint = checkpoint_path(cfg.lake.checkpoint_root, query)
        holder = lease_holder(cfg, str(checkpoint), query)   # on any host
        local = lock_holder(checkpoint)
        pid = local if local is not None else (holder.pid if holder is not None else None)
        pending = PendingApplyFile(checkpoint).read()
        emitted = metrics.get("emitted_ms")
        age = (time.time() * 1000 - float(emitted)) / 1000 if emitted else None
        row = {"query": query, "running": pid is not None, "pid": pid,
               "host": holder.host if holder is not None else None,
               "state": _state(pid, state.get("state")), "mode": state.get("mode"),
               "state_since_ms": _int(state.get("since_ms")), "state_detail": state.get("detail") or None,
               "last_batch": _int(metrics.get("batch_id")),
               "last_batch_age_s": round(age, 1) if age is not None else None,
               "rows_per_s": float(metrics.get("rows_per_s", 0)),
               "offsets_behind_latest": _int(metrics.get("offsets_behind_latest")),
               "watermark_ms": _int(metrics.get("watermark_ms")),
               "input_rows": _int(metrics.get("input_rows")),
               "dlq_rows": _int(metrics.get("dlq_rows")), "late_rows": _int(metrics.get("late_rows")),
               "batch_duration_ms": _int(metrics.get("batch_duration_ms")),
               "phases_ms": _json(metrics.get("phases_ms")), "tasks": _json(metrics.get("tasks")),
               "apply_ms": _json(metrics.get("apply_ms")),
               "pending_apply_batch": pending.get("batch_id") if pending else None}
        if finished or row["state"] != "finished":
            rows.append(row)
    return rows


def _state(pid: int | None, recorded: str | None) -> str:
    """The query's state: its lock says whether it runs, its record what it does or how it ended.

    ``running`` / ``waiting`` (for Kafka) while the lock is held; ``finished`` (a replay that
    reached its end), ``stopped`` (a live query stopped on request), ``failed``; ``ended`` when the
    record still says it runs but nobody holds the lock (killed, or the machine went down);
    ``not running`` when there is no record.
    """
    if pid is not None:
        return "waiting" if recorded == "waiting" else "running"
    if recorded in ("finished", "stopped", "failed"):
        return recorded
    return "ended" if recorded else "not running"


def status_lines(row: dict[str, Any]) -> list[str]:
    """The text lines of one row: the query's state, then where its last batch's time went."""
    assert isinstance(row["watermark_ms"], int | None)
    watermark = (datetime.fromtimestamp(row["watermark_ms"] / 1000, tz=UTC).isoformat()
                 if row["watermark_ms"] is not None else "-")
    version = row.get("view_version")
    tag = ""   # only where versions matter: another version than 1, or one that is not current
    if version is not None and (version != 1 or not row.get("current")):
        tag = f" [view v{version}, {'current' if row.get('current') else row.get('version_state')}]"
    head = f"{row['query']}{tag}: {_state_text(row)}"
    if row["last_batch"] is None:  # no metrics in Redis: none yet, or a run without the redis sink
        lines = [head if row.get("state") in ("finished", "stopped", "failed") else f"{head}; no batch yet"]
    else:
        lines = [f"{head}; last batch {row['last_batch']} {row['last_batch_age_s']} s ago, "
                 f"{row['rows_per_s']:.0f} rows/s, {row['offsets_behind_latest']} behind latest, "
                 f"watermark {watermark}"]
    if row["phases_ms"]:
        lines.append(f"  {_where_the_time_went(row)}")
    if row["pending_apply_batch"] is not None and not row["running"]:
        lines.append(f"  the Redis effects of batch {row['pending_apply_batch']} are pending: the next "
                     "start applies them (docs/streaming.md, \"Applied in the background\")")
    return lines


def _state_text(row: dict[str, Any]) -> str:
    state = row.get("state") or ("running" if row["running"] else "not running")
    since = row.get("state_since_ms")
    detail = row.get("state_detail")
    where = f"pid {row['pid']}"
    if row.get("host") and row["host"] != host_name():   # a driver on another host
        where = f"host {row['host']}, {where}"
    texts = {
        "running": f"running ({where})",
        "waiting": f"running ({where}), WAITING for {detail or 'Kafka'} since {_iso(since)}",
        "finished": f"finished ({row.get('mode') or 'replay'}) at {_iso(since)}"
                    + (f": {detail}" if detail else ""),
        "stopped": f"stopped at {_iso(since)}",
        "failed": f"FAILED at {_iso(since)}: {detail}",
        "ended": "NOT running (ended without a final state: killed, or its machine went down)"}
    return texts.get(state, "NOT running")


def _iso(ms: int | None) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="seconds") if ms else "-"


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

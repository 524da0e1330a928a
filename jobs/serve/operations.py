"""``GET /api/v1/operations``: the dashboard's operations view, from the exporter's own reads.

The route runs the exporter's collector (jobs/monitoring/exporter.py: the same reads of Redis,
Kafka, the lake and the view pointer, cached as the exporter caches them) and picks out what an
operator looks at first: input lag per partition, batch duration, the dead-letter rate, the
current view version and the last load per table. The dead-letter rate is the rise of the
exporter's counters between this route's reads, over up to :data:`RATE_WINDOW_S`, as
Prometheus's ``rate()`` computes it between scrapes.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

from fastapi import APIRouter
from prometheus_client.core import Metric

from jobs.config.load import KappaConfig
from jobs.monitoring.exporter import KappaCollector
from jobs.serve.errors import RESPONSES

RATE_WINDOW_S = 300.0  # the dead-letter alert's rate() window (infra/monitoring/rules/kappa.rules.yml)
Samples = dict[str, list[tuple[dict[str, str], float]]]


def samples(metrics: list[Metric]) -> Samples:
    """Every sample of ``metrics`` by sample name (``_total``, ``_bucket`` included)."""
    out: Samples = {}
    for family in metrics:
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    return out


def _one(found: Samples, name: str) -> float | None:
    rows = found.get(name, [])
    return rows[0][1] if rows else None


def _by(found: Samples, name: str, label: str) -> dict[str, float]:
    return {labels[label]: value for labels, value in found.get(name, [])}


def _ms(seconds: float | None) -> int | None:
    return None if seconds is None else int(seconds * 1000)


class Operations:
    """The operations view: the exporter's collector plus the counters' recent samples."""

    def __init__(self, cfg: KappaConfig, collector: KappaCollector | None = None) -> None:
        self.collector = collector if collector is not None else KappaCollector(cfg)
        self._totals: deque[tuple[float, float, float]] = deque()  # (read at, input, dead letters)
        self._lock = threading.Lock()

    def close(self) -> None:
        """Release the collector's clients."""
        self.collector.close()

    def read(self) -> dict[str, Any]:
        """The view as JSON (a read of the exporter's sources at most every ``monitoring.cache_s``)."""
        found = samples(self.collector.collect())
        return {"read_at_ms": int(time.time() * 1000),
                "sources": {name: bool(up) for name, up in _by(found, "kappa_exporter_source_up",
                                                               "source").items()},
                "queries": _queries(found), "lag": _lag(found), "dead_letters": self._dead_letters(found),
                "views": {"current_version": _one(found, "kappa_views_current_version")},
                "loads": _loads(found)}

    def _dead_letters(self, found: Samples) -> dict[str, Any]:
        dlq = _one(found, "kappa_stream_dead_letter_records_total")
        records = _one(found, "kappa_stream_input_records_total")
        out: dict[str, Any] = {"total": dlq, "input_total": records, "per_s": None, "ratio": None,
                               "window_s": None}
        at = self.collector.read_at
        if dlq is None or records is None or at is None:
            return out
        with self._lock:
            if not self._totals or self._totals[-1][0] != at:
                self._totals.append((at, records, dlq))
            while len(self._totals) > 2 and at - self._totals[1][0] >= RATE_WINDOW_S:
                self._totals.popleft()
            first, last = self._totals[0], self._totals[-1]
        span = last[0] - first[0]
        if span > 0 and last[1] >= first[1] and last[2] >= first[2]:  # a reset (new prefix) has no rate
            read = last[1] - first[1]
            out.update(per_s=(last[2] - first[2]) / span, window_s=round(span, 1),
                       ratio=(last[2] - first[2]) / read if read else None)
        return out


def _queries(found: Samples) -> list[dict[str, Any]]:
    up = _by(found, "kappa_stream_up", "query")
    batch = _by(found, "kappa_stream_last_batch_id", "query")
    at = _by(found, "kappa_stream_last_batch_timestamp_seconds", "query")
    states = {labels["query"]: labels["state"] for labels, value in found.get("kappa_stream_state", [])
              if value == 1}
    durations: dict[str, dict[str, float]] = {}
    for labels, value in found.get("kappa_stream_recent_batch_duration_seconds", []):
        durations.setdefault(labels["query"], {})[labels["quantile"]] = value
    return [{"query": query, "up": bool(up[query]), "state": states.get(query),
             "last_batch_id": None if query not in batch else int(batch[query]),
             "last_batch_at_ms": _ms(at.get(query)), "batch_duration_s": durations.get(query, {})}
            for query in sorted(up)]


def _lag(found: Samples) -> dict[str, Any]:
    partitions = [{"topic": labels["topic"], "partition": int(labels["partition"]), "records": int(value)}
                  for labels, value in found.get("kappa_stream_lag_records", [])]
    return {"records": sum(row["records"] for row in partitions) if partitions else None,
            "partitions": partitions}


def _loads(found: Samples) -> list[dict[str, Any]]:
    runs = _by(found, "kappa_loader_last_run_timestamp_seconds", "table")
    commits = _by(found, "kappa_loader_last_commit_timestamp_seconds", "table")
    rows = _by(found, "kappa_loader_last_run_rows", "table")
    quarantined = _by(found, "kappa_loader_last_run_quarantined_rows", "table")
    outcomes = {labels["table"]: labels["outcome"]
                for labels, value in found.get("kappa_loader_last_outcome", []) if value == 1}
    behind: dict[str, float] = {}
    for labels, value in found.get("kappa_loader_offsets_behind", []):
        behind[labels["table"]] = behind.get(labels["table"], 0) + value
    return [{"table": table, "last_run_at_ms": _ms(runs.get(table)),
             "last_commit_at_ms": _ms(commits.get(table)), "outcome": outcomes.get(table),
             "rows": rows.get(table), "quarantined": quarantined.get(table),
             "offsets_behind": behind.get(table)}
            for table in sorted({*runs, *commits, *behind})]


def router(operations: Operations) -> APIRouter:
    """``GET /api/v1/operations`` (a plain ``def``: the reads block, FastAPI runs it on a thread)."""
    api = APIRouter(prefix="/api/v1", tags=["operations"], responses=RESPONSES)
    api.add_api_route("/operations", operations.read, methods=["GET"],
                      summary="Operations view: lag, batch duration, dead letters, view version, last loads "
                              "(the exporter's metrics, docs/runbooks/monitoring.md)")
    return api

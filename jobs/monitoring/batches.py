"""The live job's batches as Prometheus histograms, and its pending Redis apply.

The job keeps its last :data:`HISTORY` batches' metrics in ``<prefix>:metrics:<query>:history``
(newest first, jobs/streaming/redis_sink.py). :class:`BatchHistograms` observes each batch once,
on the first read that finds it, into cumulative histograms: the batch duration
(``batch_duration_ms``) and the Redis apply time (``apply_ms.redis_apply``, the fenced script
and the read-back, jobs/streaming/applier.py). They count the batches seen since the exporter
started (its first read takes the history it finds); a batch is missed only when more than
:data:`HISTORY` batches run between two reads (100 s at the 1 s trigger, against reads every
``monitoring.cache_s``).

:func:`pending_metrics` reads the pending apply file (``<checkpoint>/kappa-state/pending-apply.json``):
a batch whose Redis effects are written there and not yet applied. With the background apply one
is pending for a moment every batch; an old one means the apply is stuck or failing.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from typing import Any

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric

from jobs.config.load import KappaConfig

HISTORY = 100  # batches the job keeps in <prefix>:metrics:<query>:history
DURATION_BUCKETS = (0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
APPLY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class _Histogram:
    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.buckets, value)] += 1
        self.sum += value

    def cumulative(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip([*map(str, self.buckets), "+Inf"], self.counts, strict=True):
            running += count
            out.append((bound, running))
        return out


class BatchHistograms:
    """Batch duration and Redis apply time per query, each batch observed once."""

    def __init__(self) -> None:
        self._seen: dict[str, int] = {}
        self._duration: dict[str, _Histogram] = {}
        self._apply: dict[str, _Histogram] = {}

    def observe(self, query: str, history: list[dict[str, Any]]) -> None:
        """Observe the batches of ``history`` (newest first) not seen before."""
        ids = [int(item.get("batch_id", -1)) for item in history]
        if not ids:
            return
        seen = self._seen.get(query, -1)
        if max(ids) < seen:  # a new checkpoint: batch ids start again
            seen = -1
        for batch_id, item in reversed(list(zip(ids, history, strict=True))):
            if batch_id <= seen:
                continue
            seen = batch_id
            duration = self._duration.setdefault(query, _Histogram(DURATION_BUCKETS))
            duration.observe(int(item.get("batch_duration_ms", 0)) / 1000)
            applied = (item.get("apply_ms") or {}).get("redis_apply")
            if applied is not None:
                self._apply.setdefault(query, _Histogram(APPLY_BUCKETS)).observe(int(applied) / 1000)
        self._seen[query] = seen

    def metrics(self) -> list[Metric]:
        """``kappa_stream_batch_duration_seconds`` and ``kappa_stream_redis_apply_seconds``."""
        out: list[Metric] = []
        for name, doc, by_query in (
                ("kappa_stream_batch_duration_seconds", "Duration of the live job's batches", self._duration),
                ("kappa_stream_redis_apply_seconds", "Time of a batch's fenced Redis apply and read-back",
                 self._apply)):
            family = HistogramMetricFamily(name, f"{doc} (batches seen since the exporter started)",
                                           labels=["query"])
            for query, histogram in sorted(by_query.items()):
                family.add_metric([query], histogram.cumulative(), histogram.sum)
            out.append(family)
        return out


def pending_metrics(cfg: KappaConfig, queries: list[str]) -> list[Metric]:
    """Per query: whether a batch's Redis effects wait in the pending file, and since when."""
    from jobs.lake import statefs
    from jobs.streaming.state import PendingApplyFile, checkpoint_path

    pending = GaugeMetricFamily("kappa_stream_pending_applies", "Batches whose Redis effects wait in "
                                "the pending apply file (0 or 1), read where lake.checkpoint_root points",
                                labels=["query"])
    age = GaugeMetricFamily("kappa_stream_pending_apply_age_seconds",
                            "Seconds since the pending apply file was written", labels=["query"])
    now = time.time()
    for query in queries:
        path = PendingApplyFile(checkpoint_path(str(cfg.lake.checkpoint_root), query)).path
        try:
            written = statefs.modified(path)
        except (FileNotFoundError, NotADirectoryError):
            pending.add_metric([query], 0)
            continue
        pending.add_metric([query], 1)
        age.add_metric([query], max(0.0, now - written))
    return [pending, age]

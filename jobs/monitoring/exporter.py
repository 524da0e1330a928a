"""The tiers' published state as Prometheus metrics, read on scrape (``kappa metrics serve``).

:class:`KappaCollector` is a custom prometheus_client collector. A scrape reads the streaming
job's records in Redis (``<prefix>:metrics:<query>``, ``:status``, ``:history``, the totals and
the fence, docs/streaming.md "Redis keys") and each fenced partition's end offset from Kafka;
scrapes within ``monitoring.cache_s`` of the last one reuse its metrics. The live job's batches
become histograms (jobs/monitoring/batches.py); the pipelines on the engine are read on every
read (jobs/monitoring/pipelines.py). The slower tiers (the loader's tables, retention headroom,
the last reconcile, view versions, the batch tier's tables: jobs/monitoring/lake.py, control.py,
batch_tier.py) are read at most every :data:`SLOW_EVERY_S`. Labels are bounded: query, state,
topic, partition, quantile, le, table, outcome, version, source, pipeline, kind.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from jobs.config.load import KappaConfig
from jobs.host.processes import alive
from jobs.monitoring.batch_tier import batch_tier_metrics
from jobs.monitoring.batches import HISTORY, BatchHistograms, pending_metrics
from jobs.monitoring.control import airflow_failed_tasks, airflow_metrics, local_airflow_login, views_metrics
from jobs.monitoring.lake import loader_metrics, reconcile_metrics, retention_metrics, scrape_errors
from jobs.monitoring.pipelines import PipelineMetrics
from jobs.streaming.fence_fields import parse_fence, parse_stream_points

logger = logging.getLogger(__name__)

STATES = ("running", "waiting", "finished", "stopped", "failed")
UP_STATES = ("running", "waiting")
TOTALS = {"input": "input_records", "valid": "valid_records", "dlq": "dead_letter_records",
          "late": "late_records"}
KAFKA_TIMEOUT_S = 2.0  # also Redis's socket timeouts
SLOW_EVERY_S = 60.0  # the lake, retention, reconcile and views are read at most this often


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of non-empty ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


class KappaCollector:
    """Reads Redis and Kafka on scrape (at most once per ``cache_s``) and yields metric families."""

    def __init__(self, cfg: KappaConfig, clock: Any = time.monotonic) -> None:
        self.cfg = cfg
        self._clock = clock
        self._lock = threading.Lock()
        self._cached: list[Metric] = []
        self._at: float | None = None
        self._redis: Any = None
        self._consumer: Any = None
        self._slow: list[Metric] = []
        self._slow_at: float | None = None
        self._errors: dict[str, int] = {}
        self._up = GaugeMetricFamily("kappa_exporter_source_up", "", labels=["source"])
        self._batches = BatchHistograms()
        self._pipelines = PipelineMetrics(cfg)

    def collect(self) -> list[Metric]:
        """The metrics of the last read, reading again when it is older than ``cache_s``."""
        with self._lock:
            now = self._clock()
            if self._at is None or now - self._at >= self.cfg.monitoring.cache_s:
                self._cached = self._read()
                self._at = now
            return self._cached

    @property
    def read_at(self) -> float | None:
        """When (on the collector's clock) the metrics :meth:`collect` returns were read."""
        return self._at

    def close(self) -> None:
        """Release the Redis and Kafka clients."""
        if self._consumer is not None:
            self._consumer.close()
        if self._redis is not None:
            self._redis.close()

    def _read(self) -> list[Metric]:
        self._up = GaugeMetricFamily("kappa_exporter_source_up", "1 when the exporter's last read of the "
                                     "source worked", labels=["source"])
        metrics: list[Metric] = []
        fence = self._source("redis", metrics, self._read_redis) or {}
        self._source("kafka", metrics, lambda out: self._read_kafka(out, fence))
        self._source("pipelines", metrics,
                     lambda out: out.extend(self._pipelines.read(self._client(), self._kafka())))
        if self._slow_at is None or self._clock() - self._slow_at >= SLOW_EVERY_S:
            self._slow = []
            positions = dict(fence)
            self._source("loader", self._slow, lambda out: out.extend(loader_metrics(self.cfg, positions)))
            self._source("retention", self._slow,
                         lambda out: out.extend(retention_metrics(self.cfg, positions)))
            self._source("reconcile", self._slow, lambda out: out.extend(reconcile_metrics(self.cfg)))
            self._source("batch", self._slow, lambda out: out.extend(batch_tier_metrics(self.cfg)))
            airflow = self.cfg.monitoring.airflow_url
            if airflow:
                self._source("airflow", self._slow, lambda out: out.extend(
                    airflow_failed_tasks(airflow, *local_airflow_login(self.cfg))))
            self._source("views", self._slow,
                         lambda out: out.extend(views_metrics(self.cfg, self._client())))
            self._slow_at = self._clock()
        metrics.extend(self._slow)
        if self.cfg.monitoring.airflow_url:
            metrics.extend(airflow_metrics(self.cfg.monitoring.airflow_url))
        max_clients = GaugeMetricFamily("kappa_serve_max_clients",
                                        "serve.max_clients: stream clients kappa serve admits")
        max_clients.add_metric([], self.cfg.serve.max_clients)
        return [*metrics, max_clients, self._up, scrape_errors(self._errors)]

    def _source(self, name: str, out: list[Metric], read: Callable[[list[Metric]], Any]) -> Any:
        """Run one source's ``read`` into ``out``; a failure is a metric and a warning, not an error."""
        part: list[Metric] = []
        try:
            result = read(part)
        except Exception as exc:
            logger.warning("metrics: %s could not be read: %s", name, exc)
            self._errors[name] = self._errors.get(name, 0) + 1
            self._up.add_metric([name], 0)
            return None
        out.extend(part)
        self._up.add_metric([name], 1)
        return result

    def _client(self) -> Any:
        if self._redis is None:
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry

            # no retries: a scrape must answer within Prometheus's scrape timeout with Redis down
            self._redis = redis.Redis(**self.cfg.redis.client_kwargs(), decode_responses=True,
                                      socket_timeout=KAFKA_TIMEOUT_S, socket_connect_timeout=KAFKA_TIMEOUT_S,
                                      retry=Retry(NoBackoff(), 0))
        return self._redis

    def _read_redis(self, metrics: list[Metric]) -> dict[tuple[str, int], int]:
        client, prefix = self._client(), self.cfg.streaming.redis_prefix
        queries = sorted(key.removeprefix(f"{prefix}:metrics:").removesuffix(":status")
                         for key in client.scan_iter(match=f"{prefix}:metrics:*:status", count=100))
        metrics.extend(self._query_metrics(client, prefix, queries))
        metrics.extend(self._batches.metrics())
        metrics.extend(pending_metrics(self.cfg, queries))
        totals = client.hgetall(f"{prefix}:totals")
        for field, name in TOTALS.items():
            family = CounterMetricFamily(f"kappa_stream_{name}",
                                         f"Records ({field}) over every applied batch")
            family.add_metric([], float(totals.get(field, 0)))
            metrics.append(family)
        raw = client.hgetall(f"{prefix}:fence:summaries")
        fence = parse_fence(raw)
        offset = GaugeMetricFamily("kappa_stream_fence_offset", "Next offset the Redis fence applies",
                                   labels=["topic", "partition"])
        stream = GaugeMetricFamily("kappa_stream_time_seconds", "Stream time at the fence (event time)",
                                   labels=["topic", "partition"])
        for (topic, partition), at in sorted(fence.items()):
            offset.add_metric([topic, str(partition)], at)
        for (topic, partition), point in sorted(parse_stream_points(raw).items()):
            value = next(iter(point.values()))
            if value is not None:
                stream.add_metric([topic, str(partition)], value / 1000)
        applied = GaugeMetricFamily("kappa_stream_fence_updated_timestamp_seconds",
                                    "When the fence last moved (Unix time)")
        if raw.get("updated_ms"):
            applied.add_metric([], int(raw["updated_ms"]) / 1000)
        metrics.extend([offset, stream, applied])
        return fence

    def _query_metrics(self, client: Any, prefix: str, queries: list[str]) -> list[Metric]:
        up = GaugeMetricFamily("kappa_stream_up", "1 while the query runs (state running or waiting, "
                               "its process alive on this host)", labels=["query"])
        state = GaugeMetricFamily("kappa_stream_state", "1 for the query's current state",
                                  labels=["query", "state"])
        batch = GaugeMetricFamily("kappa_stream_last_batch_id", "Id of the last batch", labels=["query"])
        at = GaugeMetricFamily("kappa_stream_last_batch_timestamp_seconds",
                               "When the last batch's metrics were emitted (Unix time)", labels=["query"])
        behind = GaugeMetricFamily("kappa_stream_offsets_behind_latest",
                                   "Records behind the latest offsets after the last batch", labels=["query"])
        duration = GaugeMetricFamily(
            "kappa_stream_recent_batch_duration_seconds",
            f"Batch duration over the last {HISTORY} batches (the job keeps no more): quantiles",
            labels=["query", "quantile"])
        for query in queries:
            base = f"{prefix}:metrics:{query}"
            status = client.hgetall(f"{base}:status")
            current = status.get("state", "")
            pid = int(status.get("pid") or 0)
            up.add_metric([query], int(current in UP_STATES and pid > 0 and alive(pid)))
            for name in STATES:
                state.add_metric([query, name], int(current == name))
            last = client.hgetall(base)
            if last.get("batch_id"):
                batch.add_metric([query], int(last["batch_id"]))
            if last.get("emitted_ms"):
                at.add_metric([query], int(last["emitted_ms"]) / 1000)
            if last.get("offsets_behind_latest") not in (None, "", "None", "null"):
                behind.add_metric([query], float(last["offsets_behind_latest"]))
            history = [json.loads(item) for item in client.lrange(f"{base}:history", 0, HISTORY - 1)]
            self._batches.observe(query, history)
            seconds = [int(item.get("batch_duration_ms", 0)) / 1000 for item in history]
            if seconds:
                for q in ("0.5", "0.9", "0.99"):
                    duration.add_metric([query, q], quantile(seconds, float(q)))
        return [up, state, batch, at, behind, duration]

    def _kafka(self) -> Any:
        from confluent_kafka import Consumer

        if self._consumer is None:
            self._consumer = Consumer({**self.cfg.kafka.client_config(), "group.id": "kappa-metrics",
                                       "enable.auto.commit": False})
        return self._consumer

    def _read_kafka(self, metrics: list[Metric], fence: dict[tuple[str, int], int]) -> None:
        from confluent_kafka import TopicPartition

        self._kafka()
        end = GaugeMetricFamily("kappa_kafka_end_offset", "A fenced partition's end offset",
                                labels=["topic", "partition"])
        lag = GaugeMetricFamily("kappa_stream_lag_records", "End offset minus the Redis fence",
                                labels=["topic", "partition"])
        for (topic, partition), at in sorted(fence.items()):
            _, high = self._consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=KAFKA_TIMEOUT_S, cached=False)
            end.add_metric([topic, str(partition)], high)
            lag.add_metric([topic, str(partition)], max(0, high - at))
        metrics.extend([end, lag])

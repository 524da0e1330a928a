"""Metrics of the pipelines on the engine: each one's last batch and its input lag.

The pipelines are found as ``kappa pipelines`` finds them (jobs/pipelines/registry.py: the
project's ``pipelines/`` and ``KAPPA_PIPELINES_PATH``), their specs only; those whose streaming
job is the engine count. Each read takes the current view version's prefix (jobs/engine/versions.py,
the pointer read at most every :data:`VERSION_EVERY_S`) and reads:

- ``HGETALL <prefix>:metrics``: one JSON record per query, written by every batch
  (jobs/engine/batch.py: batch_id, elapsed_ms, input/valid/dlq/late/skipped rows, emitted_ms);
- ``HGETALL <prefix>:fence`` (``<topic>:<partition>`` = next offset) against the source topic's
  end offsets: records not yet applied, per partition (a partition without a fence entry counts
  from the log's start).

Labels: pipeline, query, topic, partition, kind: bounded by the pipelines and their partitions.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric

from jobs.config.load import KappaConfig
from jobs.pipelines.spec import PipelineSpec
from jobs.streaming.fence_fields import parse_fence

ROWS = ("input", "valid", "dlq", "late", "skipped")
VERSION_EVERY_S = 60.0
TIMEOUT_S = 2.0


def engine_pipelines() -> list[PipelineSpec]:
    """The valid pipelines whose streaming job is the engine (specs only: no pipeline code runs)."""
    from jobs.pipelines.registry import discover, load_spec

    found = [load_spec(folder) for folder in discover()]
    return [item.spec for item in found
            if item.spec is not None and not item.problems and item.spec.streaming.job == "engine"]


class PipelineMetrics:
    """Reads the engine pipelines' batch records and fences; caches each one's current prefix."""

    def __init__(self, cfg: KappaConfig, specs: list[PipelineSpec] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cfg, self._specs, self._clock = cfg, specs, clock
        self._prefixes: dict[str, tuple[float, str]] = {}

    def specs(self) -> list[PipelineSpec]:
        """The pipelines read (found once, on the first read)."""
        if self._specs is None:
            self._specs = engine_pipelines()
        return self._specs

    def prefix(self, spec: PipelineSpec) -> str:
        """The Redis prefix of the pipeline's current view version (the last one known if Kafka fails)."""
        from jobs.engine.versions import pipeline_views, version

        held = self._prefixes.get(spec.name)
        if held is not None and self._clock() - held[0] < VERSION_EVERY_S:
            return held[1]
        try:
            views = pipeline_views(self.cfg, spec, timeout_s=TIMEOUT_S)
            chosen = version(spec, views.current, views).prefix
        except Exception:
            if held is None:
                raise
            chosen = held[1]
        self._prefixes[spec.name] = (self._clock(), chosen)
        return chosen

    def read(self, client: Any, consumer: Any) -> list[Metric]:
        """The metric families of every engine pipeline (``consumer``: a confluent_kafka Consumer)."""
        from confluent_kafka import KafkaException, TopicPartition

        labels = ["pipeline", "query"]
        batch = GaugeMetricFamily("kappa_pipeline_last_batch_id", "Id of the pipeline's last batch",
                                  labels=labels)
        at = GaugeMetricFamily("kappa_pipeline_last_batch_timestamp_seconds",
                               "When the pipeline's last batch was applied (Unix time)", labels=labels)
        took = GaugeMetricFamily("kappa_pipeline_last_batch_duration_seconds",
                                 "Duration of the pipeline's last batch", labels=labels)
        rows = GaugeMetricFamily("kappa_pipeline_last_batch_rows", "Rows of the pipeline's last batch, "
                                 "by kind (input, valid, dlq, late, skipped)", labels=[*labels, "kind"])
        lag = GaugeMetricFamily("kappa_pipeline_lag_records", "Source records the pipeline's fence has not "
                                "passed (end offset minus fence)", labels=["pipeline", "topic", "partition"])
        for spec in self.specs():
            prefix = self.prefix(spec)
            for query, text in sorted(client.hgetall(f"{prefix}:metrics").items()):
                record, key = json.loads(text), [spec.name, query]
                batch.add_metric(key, int(record.get("batch_id", 0)))
                at.add_metric(key, int(record.get("emitted_ms", 0)) / 1000)
                took.add_metric(key, int(record.get("elapsed_ms", 0)) / 1000)
                for kind in ROWS:
                    rows.add_metric([*key, kind], int(record.get(f"{kind}_rows", 0)))
            fence = parse_fence(client.hgetall(f"{prefix}:fence"))
            topic = spec.source.topic
            for partition in range(spec.source.partitions):
                try:
                    low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                               timeout=TIMEOUT_S, cached=False)
                except KafkaException:  # the source topic is not there (yet): no lag to tell
                    break
                behind = high - max(fence.get((topic, partition), low), low)
                lag.add_metric([spec.name, topic, str(partition)], max(0, behind))
        return [batch, at, took, rows, lag]

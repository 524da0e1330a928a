"""One task's pass over its share of a pipeline's micro-batch: parse, analyze, produce, count.

The job runs ``df.mapInArrow(pipeline_task(plan), ROW_SCHEMA)`` once per micro-batch over the
Kafka source's offset ranges; each partition's records of the batch come to one task, in offset
order. Per record: the pipeline's ``parse`` (a :class:`~jobs.pipelines.Reject` goes to the
dead-letter topic with its reason), the stream time and lateness, the keyed state (the key's
previous value, jobs/engine/keyed.py), the pipeline's ``analyze``, the analyzed record to its
topic and its counts for every view (jobs/engine/views.py). Records below the partition's
fence were applied, and their outputs delivered, by an earlier attempt of the batch: they are
skipped. Only counts, the keyed state's new entries and per-partition stats go back to the
driver, which applies them to Redis in one fenced apply.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa

from jobs.engine.keyed import FUTURE_EVENT_TIME, KeyedState, fold_before, too_far_ahead
from jobs.engine.plan import Partition, PipelinePlan
from jobs.engine.views import ROW_SCHEMA, ViewCounts
from jobs.kafka.sink import TaskProducer
from jobs.pipelines.define import Definitions, Reject
from jobs.pipelines.spec import PipelineSpec
from jobs.streaming.dead_letters import dead_letter_headers, dead_letter_value
from jobs.streaming.task import kafka_millis, task_records

_encode = msgspec.json.Encoder().encode
_LOADED: dict[str, tuple[PipelineSpec, Definitions]] = {}


def loaded(folder: str) -> tuple[PipelineSpec, Definitions]:
    """The pipeline's spec and code, loaded once per process."""
    found = _LOADED.get(folder)
    if found is None:
        from jobs.pipelines.registry import load

        item = load(Path(folder))
        if item.problems or item.spec is None or item.code is None:
            raise RuntimeError(f"pipeline at {folder} is not valid: {'; '.join(item.problems)}; "
                               "run `kappa pipelines validate`")
        found = _LOADED[folder] = (item.spec, item.code)
    return found


def pipeline_task(plan: PipelinePlan) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function of a batch (:data:`~jobs.engine.views.ROW_SCHEMA` out)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        spec, code = loaded(plan.folder)
        producer = TaskProducer(plan.kafka, plan.flush_timeout_ms) if plan.produce else None
        counts = ViewCounts(spec.views, spec.event_time.field)
        runs: dict[Partition, PartitionRun] = {}
        try:
            for batch in task_records(batches, plan.source):
                if not batch.num_rows:
                    continue
                tp = (batch.column("topic")[0].as_py(), batch.column("partition")[0].as_py())
                part = runs.get(tp)
                if part is None:
                    first = int(batch.column("offset")[0].as_py())
                    part = runs[tp] = PartitionRun(tp, plan, spec, code, first)
                part.process(batch, producer, counts)
                if producer is not None:
                    producer.poll()
        except BaseException:
            if producer is not None:
                producer.discard()
            raise
        if producer is not None:
            producer.finish()
        rows = counts.rows()
        for part in runs.values():
            rows += part.rows()
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=ROW_SCHEMA)

    return run


class PartitionRun:
    """One partition's records of the batch, in offset order, and what they changed."""

    def __init__(self, tp: Partition, plan: PipelinePlan, spec: PipelineSpec, code: Definitions,
                 first: int) -> None:
        self.tp, self.plan, self.spec, self.code = tp, plan, spec, code
        self.fence = plan.fence.get(tp)
        counted = ("input_rows", "valid_rows", "dlq_rows", "late_rows", "skipped_rows")
        self.stats: dict[str, Any] = dict.fromkeys(counted, 0)
        self.stats |= {"min_offset": None, "max_offset": None, "max_event_ms": None}
        self.grace_ms = spec.event_time.watermark_s * 1000
        declared = (spec.outputs.analyzed.topic, spec.outputs.dlq.topic)
        self.analyzed_topic, self.dlq_topic = plan.outputs or declared
        self.state = KeyedState(plan, spec, self.fence)
        if self.fence is None:
            start = plan.earliest.get(tp, first)
            self.stream_ms, folded = (fold_before(plan, spec, code, tp, start=start, end=first)
                                      if first > start else (None, {}))
            self.state.start_from(folded)
        else:
            self.stream_ms = plan.stream_ms.get(tp)

    def process(self, batch: pa.RecordBatch, producer: TaskProducer | None, counts: ViewCounts) -> None:
        """Parse, decide, produce and count a source batch of this partition."""
        topic, partition = self.tp
        offsets = batch.column("offset").to_pylist()
        keys, values = batch.column("key").to_pylist(), batch.column("value").to_pylist()
        millis = kafka_millis(batch)
        parsed: list[tuple[int, Any, Any, dict[str, Any]]] = []
        for key, value, offset, kafka_ms in zip(keys, values, offsets, millis, strict=True):
            if self.fence is not None and offset < self.fence:
                self.stats["skipped_rows"] += 1
                continue
            self._seen(offset)
            try:
                record = self.code.parse_fn(value, key, {**self.plan.params, "kafka_ms": kafka_ms})  # type: ignore[misc]
            except Reject as reject:
                self.stats["dlq_rows"] += 1
                if producer is not None:
                    producer.produce(self.dlq_topic, dead_letter_value(value), key,
                                     headers=dead_letter_headers(reject.reason, topic, partition, offset,
                                                                 len(value) if value is not None else 0))
                continue
            if too_far_ahead(record, self.spec, kafka_ms):
                self.stats["dlq_rows"] += 1
                if producer is not None:
                    producer.produce(self.dlq_topic, dead_letter_value(value), key,
                                     headers=dead_letter_headers(FUTURE_EVENT_TIME, topic, partition, offset,
                                                                 len(value) if value is not None else 0))
                continue
            parsed.append((offset, key, value, record))
        self.state.prefetch([record for _, _, _, record in parsed])
        event_field, out_key = self.spec.event_time.field, self.spec.outputs.analyzed.key
        for offset, _key, _value, record in parsed:
            assert record is not None
            event_ms = int(record[event_field])
            late = self.stream_ms is not None and event_ms < self.stream_ms - self.grace_ms
            if self.stream_ms is None or event_ms > self.stream_ms:
                self.stream_ms = event_ms
            out, new_state = self.code.analyze_fn(record, self.state.get(record), dict(self.plan.params))  # type: ignore[misc]
            self.state.put(record, new_state, offset)
            out = {**out, "source_topic": topic, "source_partition": partition, "source_offset": offset,
                   "late": late}
            self.stats["valid_rows"] += 1
            self.stats["late_rows"] += late
            if self.stats["max_event_ms"] is None or event_ms > self.stats["max_event_ms"]:
                self.stats["max_event_ms"] = event_ms
            if producer is not None:
                okey = out.get(out_key) if out_key else None
                producer.produce(self.analyzed_topic, _encode(out),
                                 None if okey is None else str(okey).encode())
            counts.add(out, late=late, partition=partition, offset=offset)

    def _seen(self, offset: int) -> None:
        st = self.stats
        st["input_rows"] += 1
        st["min_offset"] = offset if st["min_offset"] is None else min(st["min_offset"], offset)
        st["max_offset"] = offset if st["max_offset"] is None else max(st["max_offset"], offset)

    def rows(self) -> list[dict[str, Any]]:
        """The partition's stats row and its keyed state's new entries."""
        label = {"topic": self.tp[0], "partition": self.tp[1], "stream_ms": self.stream_ms, **self.stats}
        stats = {"kind": "stats", "view": "", "op": "", "rkey": f"{self.tp[0]}/{self.tp[1]}", "field": "",
                 "window": 0, "n": 0, "text": json.dumps(label)}
        return [stats, *self.state.rows()]

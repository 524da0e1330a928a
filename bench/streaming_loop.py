"""The baseline of bench/streaming.py: the job's per-record work in one hand-written process.

One confluent-kafka consumer on every partition of the topic; per record the same plain-Python
functions the job's tasks call (``validate.parse``: typed msgspec decode with the exact-reason
fallback; ``records.analyzed`` and its JSON; the dead-letter headers; ``Increments``), the
analyzed record or the dead letter produced to a topic, lateness by each partition's stream time
as the job decides it (docs/streaming.md, "Late records: stream time"). No Spark and no Redis: the
strongest fair baseline for the job's throughput, since any faster per-record code would be used
by the job too.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from jobs.common.config import KappaConfig
from jobs.common.kafka.client import producer_config
from jobs.streaming.batch import rules_from, windows_from
from jobs.streaming.records import (
    Increments,
    analyzed,
    analyzed_value,
    dead_letter_headers,
    dead_letter_value,
)
from jobs.streaming.validate import parse

CONSUME_BATCH = 20_000


def run_loop(cfg: KappaConfig, source: str, partitions: int, records: int,
             analyzed_topic: str, dlq_topic: str, output: bool = True) -> dict[str, Any]:
    """Consume ``records`` from ``source``; validate, produce the outputs (unless not ``output``), count."""
    props = cfg.kafka.client_config()
    rules, windows = rules_from(cfg), windows_from(cfg)
    grace_ms = cfg.streaming.watermark_s * 1000
    consumer = Consumer({**props, "group.id": f"bench-{uuid.uuid4().hex}", "enable.auto.commit": False,
                         "receive.message.max.bytes": 1_000_000_000,
                         "fetch.max.bytes": 100 * 1024 * 1024})
    consumer.assign([TopicPartition(source, p, 0) for p in range(partitions)])
    producer = Producer(producer_config(props))
    increments = Increments(windows)
    count = valid = dlq = late = 0
    stream_ms: list[int | None] = [None] * partitions  # per partition: the greatest valid event time
    began = time.monotonic()
    while count < records:
        for message in consumer.consume(CONSUME_BATCH, timeout=1.0):
            if message.error() is not None:
                continue
            count += 1
            value, kafka_ms = message.value(), message.timestamp()[1]
            partition, offset = message.partition(), message.offset()
            rsvp, reason = parse(value, kafka_ms, rules)
            if reason is not None:
                dlq += 1
                if output:
                    _send(producer, dlq_topic, dead_letter_value(value), message.key(), dead_letter_headers(
                        reason, source, partition, offset, len(value) if value is not None else 0))
                continue
            before = stream_ms[partition]
            record = analyzed(rsvp, source, partition, offset, kafka_ms,
                              late=before is not None and rsvp.mtime < before - grace_ms)
            valid += 1
            late += record["late"]
            if output:
                _send(producer, analyzed_topic, analyzed_value(record), record["event_id"].encode(), None)
            increments.add(record)
            if before is None or rsvp.mtime > before:
                stream_ms[partition] = rsvp.mtime
        producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("the loop's producer could not flush in 120 s")
    elapsed = time.monotonic() - began
    consumer.close()
    return {"records": count, "valid": valid, "dlq": dlq, "late": late, "seconds": round(elapsed, 2),
            "rows_per_s": round(count / elapsed), "increment_keys": len(increments),
            "load_avg_1m": round(os.getloadavg()[0], 2)}


def _send(producer: Producer, topic: str, value: bytes | None, key: bytes | None, headers) -> None:
    while True:
        try:
            producer.produce(topic, value, key, headers=headers)
            return
        except BufferError:
            producer.poll(0.05)


def main() -> None:
    """The loop as a process of its own (bench/replay_cli.py times it from start to exit)."""
    import argparse
    import json

    from jobs.common.config import load_config

    parser = argparse.ArgumentParser(description="the hand-written one-process loop over a topic")
    parser.add_argument("--source", required=True)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--analyzed", required=True)
    parser.add_argument("--dlq", required=True)
    args = parser.parse_args()
    print(json.dumps(run_loop(load_config(), args.source, args.partitions, args.records, args.analyzed,
                              args.dlq)))


if __name__ == "__main__":
    main()

"""The baseline of bench/streaming.py: the job's per-record work in one hand-written process.

One confluent-kafka consumer on every partition of the topic; per record the same plain-Python
functions the job's tasks call (``validate.parse``: typed msgspec decode with the exact-reason
fallback; ``records.analyzed`` and its JSON; the dead-letter headers; ``Increments``), the
analyzed record or the dead letter produced to a topic, lateness by each partition's stream time
as the job decides it (docs/streaming.md, "Late records: stream time"). No Spark and no Redis: the
strongest fair baseline for the job's throughput, since any faster per-record code would be used
by the job too.

With ``--views`` the loop also keeps the job's Redis views and publishes its summaries, with the
job's own code (:class:`LoopViews`): the baseline for everything a replay writes, not only its
Kafka outputs.
"""

from __future__ import annotations

import os
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import msgspec
from confluent_kafka import Consumer, Producer, TopicPartition

from jobs.config.load import KappaConfig
from jobs.kafka.client import producer_config
from jobs.streaming.applier import BatchEffects, EffectsWriter
from jobs.streaming.dead_letters import dead_letter_headers, dead_letter_value
from jobs.streaming.members import add_members
from jobs.streaming.redis_sink import Keys, RedisSummarySink
from jobs.streaming.task import members_added
from pipelines.rsvp.aggregates import windows_from
from pipelines.rsvp.records import Increments, analyzed, analyzed_value
from pipelines.rsvp.redis_views import MEMBERS
from pipelines.rsvp.validate import parse, rules_from

CONSUME_BATCH = 20_000
_encode = msgspec.json.Encoder().encode


class LoopViews:
    """What the job's driver does with a batch, done by the loop with the job's code.

    Every ``streaming.max_offsets_per_trigger`` records the loop hands its summed increments over:
    the member ids go to the HyperLogLogs (``add_members``, as the job's tasks add them), and
    :class:`~jobs.streaming.applier.EffectsWriter` makes the fenced Redis apply, reads the changed
    summaries back and produces them to ``summaries_topic``. One batch at a time runs in a thread
    while the loop reads on, as the job's background apply does.
    """

    def __init__(self, cfg: KappaConfig, source: str, prefix: str, summaries_topic: str) -> None:
        s = cfg.streaming.model_copy(update={"redis_prefix": prefix})
        cfg = cfg.model_copy(update={"streaming": s})
        self.source, self.batch_records, self.keys = source, s.max_offsets_per_trigger, Keys(prefix)
        self.sink = RedisSummarySink(cfg)
        self.producer = Producer(producer_config(cfg.kafka.client_config()))
        self.writer = EffectsWriter(
            self.sink, query=f"loop-{prefix}", top_n=s.top_n, summaries_topic=summaries_topic,
            windows_ms=windows_from(cfg).sizes_ms(),
            produce=lambda topic, key, value: _send(self.producer, topic, _encode(value), key.encode(), None),
            publish_metrics=lambda metrics: None, flush=self._flush)
        self.fence: dict[tuple[str, int], int] = {}
        self.batch_id, self.summaries = 0, 0
        self._executor = ThreadPoolExecutor(max_workers=1)
        self._future: Future[int] | None = None

    def hand_over(self, increments: Increments, positions: dict[int, int], totals: dict[str, int]) -> None:
        """Apply one batch's increments (read up to ``positions``, the next offset per partition)."""
        self.wait()
        new_fence = {(self.source, p): offset for p, offset in positions.items()}
        members = increments.take_members()  # added apart, as the tasks add them
        effects = BatchEffects(batch_id=self.batch_id, increments=increments.rows() + members_added(members),
                               expected=dict(self.fence), new_fence=new_fence, totals=totals, metrics={})
        self._future = self._executor.submit(self._write, effects, members)
        self.fence, self.batch_id = new_fence, self.batch_id + 1

    def _write(self, effects: BatchEffects, members: dict[int, list[str]]) -> int:
        with self.sink.client.pipeline(transaction=False) as pipe:
            add_members(pipe, self.keys, members, MEMBERS)
            pipe.execute()
        return self.writer.write(effects)

    def wait(self) -> None:
        """Wait for the batch in flight (raise its error)."""
        future, self._future = self._future, None
        if future is not None:
            self.summaries += future.result()

    def close(self) -> None:
        self.wait()
        self._executor.shutdown()
        self.sink.close()

    def _flush(self) -> None:
        if self.producer.flush(120):
            raise RuntimeError("the loop's summaries producer could not flush in 120 s")


def run_loop(cfg: KappaConfig, source: str, partitions: int, records: int,
             analyzed_topic: str, dlq_topic: str, output: bool = True,
             views: LoopViews | None = None) -> dict[str, Any]:
    """Consume ``records`` from ``source``; validate, produce the outputs (unless not ``output``), count.

    With ``views``, hand each batch's increments to it (:class:`LoopViews`).
    """
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
    positions: dict[int, int] = {}
    cut = {"input": 0, "valid": 0, "dlq": 0, "late": 0}  # the counts at the last hand-over
    chunk = min(CONSUME_BATCH, views.batch_records) if views is not None else CONSUME_BATCH
    began = time.monotonic()
    while count < records:
        for message in consumer.consume(chunk, timeout=1.0):
            if message.error() is not None:
                continue
            count += 1
            value, kafka_ms = message.value(), message.timestamp()[1]
            partition, offset = message.partition(), message.offset()
            positions[partition] = offset + 1
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
        if views is not None and (count - cut["input"] >= views.batch_records or count >= records):
            now = {"input": count, "valid": valid, "dlq": dlq, "late": late}
            producer.flush(120)  # as a task: the batch's Kafka outputs are delivered before it counts
            views.hand_over(increments, dict(positions), {k: now[k] - cut[k] for k in now})
            increments, cut = Increments(windows), now
    if producer.flush(120):
        raise RuntimeError("the loop's producer could not flush in 120 s")
    if views is not None:
        views.close()
    elapsed = time.monotonic() - began
    consumer.close()
    return {"records": count, "valid": valid, "dlq": dlq, "late": late, "seconds": round(elapsed, 2),
            "rows_per_s": round(count / elapsed), "increment_keys": len(increments),
            "summaries": views.summaries if views is not None else 0,
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

    from jobs.config.load import load_config

    parser = argparse.ArgumentParser(description="the hand-written one-process loop over a topic")
    parser.add_argument("--source", required=True)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--analyzed", required=True)
    parser.add_argument("--dlq", required=True)
    parser.add_argument("--views", metavar="PREFIX", help="also keep the job's Redis views under this prefix")
    parser.add_argument("--summaries", help="the summaries topic (with --views)")
    args = parser.parse_args()
    cfg = load_config()
    views = LoopViews(cfg, args.source, args.views, args.summaries) if args.views else None
    print(json.dumps(run_loop(cfg, args.source, args.partitions, args.records, args.analyzed, args.dlq,
                              views=views)))


if __name__ == "__main__":
    main()

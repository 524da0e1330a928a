"""The baseline of bench/pipeline_cards.py: the card pipeline's work in one hand-written process.

One confluent-kafka consumer on every partition of the source topic; per record the card
pipeline's own rules (``pipelines.cards.rules.parse`` and ``analyze``: the same validation and
decision as the engine's tasks, so any faster per-record code would serve the engine too), the
card's previous transaction from a dict, lateness by each partition's stream time, the decision
(or the dead letter) produced as the engine produces it. With ``--prefix`` the loop also writes
the pipeline's Redis views (pipelines/cards/pipeline.yaml, written here by hand, not with the
engine's code) every ``--chunk`` records in one pipelined round trip without a transaction: the
last use per card (a hash replaced whole), flags per country per minute, flags per merchant per
minute (the sliding view's buckets), distinct cards per minute (HyperLogLog), amount and count per
currency. No fence, no checkpoint, no keyed state outside the process: a crash loses the dict and
a rerun counts twice. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from collections import defaultdict
from typing import Any

import msgspec
import redis
from confluent_kafka import Consumer, Producer, TopicPartition
from streaming_loop import CONSUME_BATCH, _send

from jobs.config.load import load_config
from jobs.kafka.client import producer_config
from jobs.streaming.dead_letters import dead_letter_headers, dead_letter_value
from pipelines.cards import rules
from pipelines.cards.pipeline import STATE_TTL_S

_encode = msgspec.json.Encoder().encode
WATERMARK_MS = 60_000  # event_time.watermark_s
MINUTE_MS = 60_000  # flags_by_country and cards_seen windows, top_merchants' slide
WINDOW_TTL_S = 172_800
LAST_USE_TTL_S = 604_800
LAST_USE_FIELDS = ("merchant_id", "country", "lat", "lon", "amount", "currency", "event_time_ms", "decision",
                   "reason")


class Views:
    """The card views of a chunk of decisions, written by hand in one pipelined round trip."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.client, self.prefix = client, prefix
        self.clear()

    def clear(self) -> None:
        self.last: dict[str, tuple[str, dict[str, Any]]] = {}
        self.flags: dict[tuple[str, int, str], int] = defaultdict(int)
        self.cards: dict[int, set[str]] = defaultdict(set)
        self.amount: dict[str, list[int]] = defaultdict(lambda: [0, 0])

    def add(self, out: dict[str, Any], late: bool, partition: int, offset: int) -> None:
        event_ms = out["event_time_ms"]
        minute = event_ms - event_ms % MINUTE_MS
        order = f"{max(event_ms, 0):020d}:{partition:06d}:{offset:020d}"
        held = self.last.get(out["card_id"])
        if held is None or order > held[0]:
            self.last[out["card_id"]] = (order, out)
        if out["flagged"] and not late:
            self.flags[("flags_by_country", minute, out["country"])] += 1
            self.flags[("top_merchants", minute, out["merchant_id"])] += 1
        if not late:
            self.cards[minute].add(out["card_id"])
        summed = self.amount[out["currency"]]
        summed[0] += round(out["amount"] * 100)
        summed[1] += 1

    def write(self) -> None:
        p = self.prefix
        with self.client.pipeline(transaction=False) as pipe:
            for card, (order, out) in self.last.items():
                key = f"{p}:last_use:{card}"
                pipe.delete(key)
                pipe.hset(key, mapping={"_order": order, **{f: json.dumps(out[f]) for f in LAST_USE_FIELDS}})
                pipe.expire(key, LAST_USE_TTL_S)
            windows: dict[str, set[int]] = defaultdict(set)
            for (view, minute, item), n in self.flags.items():
                pipe.hincrby(f"{p}:{view}:{minute}", item, n)
                windows[view].add(minute)
            for minute, cards in self.cards.items():
                pipe.pfadd(f"{p}:cards_seen:{minute}", *cards)
                windows["cards_seen"].add(minute)
            for view, minutes in windows.items():
                pipe.zadd(f"{p}:{view}:windows", {str(m): m for m in minutes})
                for minute in minutes:
                    pipe.expire(f"{p}:{view}:{minute}", WINDOW_TTL_S)
            for currency, (cents, count) in self.amount.items():
                pipe.hincrby(f"{p}:amount_by_currency:{currency}", "amount", cents)
                pipe.hincrby(f"{p}:amount_by_currency:{currency}", "transactions", count)
            pipe.execute()
        self.clear()


def run(source: str, partitions: int, records: int, decisions: str, dlq: str, prefix: str | None,
        chunk: int) -> dict[str, Any]:
    """Decide ``records`` of ``source``; produce the decisions and dead letters; views under ``prefix``."""
    cfg = load_config()
    props = cfg.kafka.client_config()
    params = rules.CardParams(state_ttl_s=STATE_TTL_S)
    consumer = Consumer({**props, "group.id": f"bench-{uuid.uuid4().hex}", "enable.auto.commit": False,
                         "receive.message.max.bytes": 1_000_000_000, "fetch.max.bytes": 100 * 1024 * 1024})
    consumer.assign([TopicPartition(source, p, 0) for p in range(partitions)])
    producer = Producer(producer_config(props))
    client = redis.Redis(**cfg.redis.client_kwargs()) if prefix else None
    views = Views(client, prefix) if client is not None and prefix else None
    previous: dict[str, dict[str, Any]] = {}
    stream_ms: list[int | None] = [None] * partitions
    count = valid = dlq_count = late_count = flagged = written = 0
    began = time.monotonic()
    while count < records:
        for message in consumer.consume(CONSUME_BATCH, timeout=1.0):
            if message.error() is not None:
                continue
            count += 1
            value, key = message.value() or b"", message.key()
            partition, offset = message.partition() or 0, message.offset() or 0
            try:
                record = rules.parse(value, key)
            except rules.CardReject as reject:
                dlq_count += 1
                _send(producer, dlq, dead_letter_value(value), key, dead_letter_headers(
                    reject.reason, source, partition, offset, len(value)))
                continue
            event_ms, before = record["event_time_ms"], stream_ms[partition]
            late = before is not None and event_ms < before - WATERMARK_MS
            if before is None or event_ms > before:
                stream_ms[partition] = event_ms
            out, previous[record["card_id"]] = rules.analyze(record, previous.get(record["card_id"]), params)
            out |= {"source_topic": source, "source_partition": partition, "source_offset": offset,
                    "late": late}
            valid, late_count, flagged = valid + 1, late_count + late, flagged + out["flagged"]
            _send(producer, decisions, _encode(out), key, None)
            if views is not None:
                views.add(out, late, partition, offset)
        producer.poll(0)
        if views is not None and (count - written >= chunk or count >= records):
            views.write()
            written = count
    if producer.flush(120):
        raise RuntimeError("the loop's producer could not flush in 120 s")
    elapsed = time.monotonic() - began
    consumer.close()
    if client is not None:
        client.close()
    return {"records": count, "valid": valid, "dlq": dlq_count, "late": late_count, "flagged": flagged,
            "cards": len(previous), "seconds": round(elapsed, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description="the card pipeline's work in one hand-written process")
    parser.add_argument("--source", required=True)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--decisions", required=True)
    parser.add_argument("--dlq", required=True)
    parser.add_argument("--prefix", help="also write the card views under this Redis prefix")
    parser.add_argument("--chunk", type=int, default=100_000, help="records per Redis round trip")
    args = parser.parse_args()
    print(json.dumps(run(args.source, args.partitions, args.records, args.decisions, args.dlq, args.prefix,
                         args.chunk)))


if __name__ == "__main__":
    main()

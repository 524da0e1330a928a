"""Benchmark: the kafka-py Spark source and sink against raw confluent-kafka, same run, same topic.

Starts an embedded broker on a free port (or uses ``--bootstrap``), produces ``--records``
records of ``--record-bytes`` to a 3-partition topic with a raw confluent-kafka producer (the
produce baseline), consumes them with one raw consumer that also builds the source's Arrow
record batches (the consume baseline: equal work), then reads the same topic with Spark: a batch
read (``read_kafka(...).write.format("noop")``), and a streaming availableNow read of
``--per-trigger`` records per micro-batch to a noop sink, with the executor consumer pool and the
fetch spill (``stream``), with the pool only (``stream_no_spill``: ``fetchSpill.maxBytes=0``) and
with neither (``stream_no_pool``: also ``consumerCache.capacity=0``, one consumer per task as
before the pool). Writes the
same number of rows with ``write_kafka``. Prints one JSON object. Never run as a timed test.

    .venv/bin/python bench/kafka_source.py --records 1000000 --record-bytes 250
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from jobs.config.load import KappaConfig, load_config
from jobs.kafka.arrow import arrow_schema, to_record_batch

PARTITIONS = 3
PER_TRIGGER = 50_000
WARMUP_RECORDS = 10_000


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its JSON result."""
    args = _parse(argv)
    with tempfile.TemporaryDirectory(prefix="kappa-bench-") as folder:
        cfg = _config(args.bootstrap, Path(folder))
        stack = None
        if args.bootstrap is None:
            from jobs.stack.embedded import EmbeddedStack

            stack = EmbeddedStack(cfg)
        try:
            if stack is not None:
                stack.up(progress=lambda message: None)
            result = run(cfg, args, Path(folder))
        finally:
            if stack is not None:
                stack.down(progress=lambda message: None)
    print(json.dumps(result, indent=2))
    return 0


def run(cfg: KappaConfig, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """Measure raw consume vs the Spark source and raw produce vs the Spark sink, interleaved."""
    from jobs.spark.kafka_io import read_kafka, write_kafka
    from jobs.spark.session import build_spark

    records, record_bytes, repeats = args.records, args.record_bytes, args.repeats
    props = cfg.kafka.client_config()
    topic = _topic(props)
    value = (b"x" * record_bytes)[: max(1, record_bytes - 8)]
    first_produce_s = _raw_produce(props, topic, records, value)
    began = time.monotonic()
    spark = build_spark(cfg, app_name="bench-kafka-source")
    source_df = read_kafka(spark, cfg, topics=topic)
    first_source_s = _timed(lambda: source_df.write.format("noop").mode("overwrite").save())
    rows = _sink_rows(spark, records, value)
    write_kafka(rows.limit(WARMUP_RECORDS), cfg, topic=_topic(props))
    warmup_s = time.monotonic() - began

    context = {"props": props, "topic": topic, "records": records, "value": value, "cfg": cfg,
               "rows": rows, "source_df": source_df,
               "streams": _Streams(spark, cfg, topic, args.per_trigger, folder)}
    times: dict[str, list[float]] = {name: [] for name in ROUNDS if name not in args.skip}
    failures: list[str] = []
    for round_no in range(repeats):
        for name, seconds in times.items():
            try:
                seconds.append(ROUNDS[name](context))
            except Exception as exc:  # a failed run is reported, the other measurements go on
                failures.append(f"round {round_no + 1} {name}: {str(exc).splitlines()[0][:300]}")
            print(f"round={round_no + 1} {name} seconds={seconds[-1:]}", file=sys.stderr, flush=True)
    spark.stop()
    rate = {name: records / median(values) for name, values in times.items() if values}
    return {
        "benchmark": "kafka_source", "records": records, "record_bytes": record_bytes,
        "partitions": PARTITIONS, "spark_master": cfg.spark.master, "per_trigger": args.per_trigger,
        "broker": "embedded noida-db" if cfg.kafka.embedded else cfg.kafka.bootstrap_servers,
        "rows_per_s": {name: round(value) for name, value in rate.items()},
        "vs_raw_consume_arrow": {name: round(rate[name] / rate["raw_consume_arrow"], 2)
                                 for name in ("source", "stream", "stream_no_spill", "stream_no_pool")
                                 if name in rate and "raw_consume_arrow" in rate},
        "sink_vs_raw_produce": (round(rate["sink"] / rate["raw_produce"], 2)
                                if "sink" in rate and "raw_produce" in rate else None),
        "seconds": {name: _rounded(values) for name, values in times.items()}
        | {"first_raw_produce": round(first_produce_s, 2),
           "first_source_cold_jvm": round(first_source_s, 2),
           "spark_start_and_warmup": round(warmup_s, 2)},
        "stream_trigger_ms": context["streams"].trigger_ms,
        "failures": failures,
        "method": "rates are medians of the runs under seconds; each round measures, in order, "
                  "raw consume + Arrow, the batch source, the stream with pool and spill, with the "
                  "pool only and with neither (each from a fresh checkpoint) on the same topic, "
                  "then raw produce and the "
                  "sink on fresh topics; all after one untimed full source read (JVM warm-up)",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }


class _Streams:
    """availableNow streaming reads of the topic to a noop sink, each from a fresh checkpoint."""

    def __init__(self, spark, cfg: KappaConfig, topic: str, per_trigger: int, folder: Path) -> None:
        self.spark, self.cfg, self.topic, self.per_trigger = spark, cfg, topic, per_trigger
        self.folder = folder
        self.trigger_ms: dict[str, dict[str, float]] = {}

    def run(self, name: str, options: dict[str, Any]) -> float:
        from jobs.spark.kafka_io import read_kafka

        df = read_kafka(self.spark, self.cfg, topics=self.topic, stream=True,
                        options={"maxOffsetsPerTrigger": self.per_trigger, **options})
        checkpoint = str(self.folder / f"ckpt-{uuid.uuid4().hex[:8]}")
        began = time.monotonic()
        query = (df.writeStream.format("noop").trigger(availableNow=True)
                 .option("checkpointLocation", checkpoint).start())
        query.awaitTermination()
        elapsed = time.monotonic() - began
        progress = [p for p in query.recentProgress if p["numInputRows"]]
        durations = [p["durationMs"] for p in progress]
        self.trigger_ms[name] = {key: round(median(d.get(key, 0) for d in durations), 1)
                                 for key in ("latestOffset", "queryPlanning", "walCommit",
                                             "addBatch", "commitOffsets", "triggerExecution")}
        self.trigger_ms[name]["triggers"] = len(progress)
        return elapsed


ROUNDS: dict[str, Callable[[dict[str, Any]], float]] = {
    "raw_consume_arrow": lambda v: _raw_consume_arrow(v["props"], v["topic"], v["records"]),
    "source": lambda v: _timed(lambda: v["source_df"].write.format("noop").mode("overwrite").save()),
    "stream": lambda v: v["streams"].run("stream", {}),
    "stream_no_spill": lambda v: v["streams"].run("stream_no_spill", {"fetchSpill.maxBytes": 0}),
    "stream_no_pool": lambda v: v["streams"].run("stream_no_pool", {"consumerCache.capacity": 0,
                                                                     "fetchSpill.maxBytes": 0}),
    "raw_produce": lambda v: _raw_produce(v["props"], _topic(v["props"]), v["records"], v["value"]),
    "sink": lambda v: _timed(lambda: write_sink(v)),
}


def write_sink(v: dict[str, Any]) -> None:
    """The sink round: ``write_kafka`` of the cached rows to a fresh topic."""
    from jobs.spark.kafka_io import write_kafka

    write_kafka(v["rows"], v["cfg"], topic=_topic(v["props"]))


def _sink_rows(spark, records: int, value: bytes):
    """``records`` rows of key/value like the produced ones, cached so the sink timing is the write."""
    from pyspark.sql import functions as F

    rows = (spark.range(0, records, 1, PARTITIONS)
            .select(F.col("id").cast("string").alias("key"),
                    F.concat(F.lit(value.decode()), F.col("id").cast("string")).alias("value"))
            .cache())
    rows.count()
    return rows


def _timed(action: Callable[[], object]) -> float:
    began = time.monotonic()
    action()
    return time.monotonic() - began


def _rounded(values: list[float]) -> list[float]:
    return [round(v, 2) for v in values]


def _raw_produce(props: dict[str, str], topic: str, records: int, value: bytes) -> float:
    producer = Producer({**props, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                         "queue.buffering.max.messages": 1_000_000})
    began = time.monotonic()
    for index in range(records):
        key = str(index).encode()
        produce_one(producer, topic, value + key, key, index % PARTITIONS, index)
    if producer.flush(300):
        raise RuntimeError("raw producer could not flush within 300 s")
    return time.monotonic() - began


def produce_one(producer: Producer, topic: str, value: bytes, key: bytes, partition: int, index: int) -> None:
    """Produce one record, waiting while the producer's queue is full; serve callbacks now and then."""
    while True:
        try:
            producer.produce(topic, value, key, partition)
            break
        except BufferError:
            producer.poll(0.05)
    if index % 10_000 == 0:
        producer.poll(0)


def _raw_consume_arrow(props: dict[str, str], topic: str, records: int) -> float:
    """One consumer on all partitions building the source's Arrow batches (equal work).

    Each ``consume()`` result is split by partition and turned into record batches with the
    source's own ``to_record_batch``, so the baseline pays for the same columns as Spark's tasks.
    """
    consumer = Consumer({**props, "group.id": f"bench-{uuid.uuid4().hex}", "enable.auto.commit": False,
                         "receive.message.max.bytes": 1_000_000_000,
                         "fetch.max.bytes": 100 * 1024 * 1024})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    schema = arrow_schema(include_headers=False)
    count, began = 0, time.monotonic()
    while count < records:
        by_partition: dict[int, list[Any]] = {}
        for message in consumer.consume(20_000, timeout=1.0):
            if message.error() is None:
                by_partition.setdefault(message.partition(), []).append(message)
        for partition, messages in by_partition.items():
            count += to_record_batch(messages, topic, partition, schema).num_rows
    elapsed = time.monotonic() - began
    consumer.close()
    return elapsed


def _topic(props: dict[str, str]) -> str:
    name = f"bench.{uuid.uuid4().hex[:10]}"
    admin = AdminClient(props)
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(30)
    return name


def _config(bootstrap: str | None, folder: Path) -> KappaConfig:
    def free_port() -> int:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]

    overrides: dict[str, Any] = {"redis.embedded": False, "spark.ui_enabled": False,
                                 "stack.data_dir": str(folder / "stack"), "spark.master": "local[2]"}
    if bootstrap:
        overrides |= {"kafka.bootstrap_servers": bootstrap, "kafka.embedded": False}
    else:
        overrides["kafka.bootstrap_servers"] = f"127.0.0.1:{free_port()}"
    return load_config("test", overrides=overrides, environ={})


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--record-bytes", type=int, default=250)
    parser.add_argument("--repeats", type=int, default=3, help="timed source / raw consume runs")
    parser.add_argument("--per-trigger", type=int, default=PER_TRIGGER,
                        help="maxOffsetsPerTrigger of the streaming reads")
    parser.add_argument("--skip", action="append", default=[], choices=sorted(ROUNDS),
                        help="leave out a measurement (repeatable)")
    parser.add_argument("--bootstrap", help="an existing Kafka (default: start an embedded broker)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())

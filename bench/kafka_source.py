"""Benchmark: the kafka-py Spark source and sink against raw confluent-kafka, same run, same topic.

Starts an embedded broker on a free port (or uses ``--bootstrap``), produces ``--records``
records of ``--record-bytes`` to a 3-partition topic with a raw confluent-kafka producer (the
produce baseline), consumes them with one raw consumer (the consume baseline), then reads the
same topic with Spark (``read_kafka(...).write.format("noop")``) and writes the same number of
rows with ``write_kafka``. Prints one JSON object. Never run as a timed test.

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

from jobs.common.config import KappaConfig, load_config

PARTITIONS = 3
WARMUP_RECORDS = 10_000


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its JSON result."""
    args = _parse(argv)
    with tempfile.TemporaryDirectory(prefix="kappa-bench-") as folder:
        cfg = _config(args.bootstrap, Path(folder))
        stack = None
        if args.bootstrap is None:
            from jobs.common.stack import EmbeddedStack

            stack = EmbeddedStack(cfg)
        try:
            if stack is not None:
                stack.up(progress=lambda message: None)
            result = run(cfg, args.records, args.record_bytes, args.repeats)
        finally:
            if stack is not None:
                stack.down(progress=lambda message: None)
    print(json.dumps(result, indent=2))
    return 0


def run(cfg: KappaConfig, records: int, record_bytes: int, repeats: int) -> dict[str, Any]:
    """Measure raw consume vs the Spark source and raw produce vs the Spark sink, interleaved."""
    from jobs.common.kafka.adapter import read_kafka, write_kafka
    from jobs.common.spark import build_spark

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

    times: dict[str, list[float]] = {"raw_consume": [], "source": [], "raw_produce": [], "sink": []}
    for _ in range(repeats):
        times["raw_consume"].append(_raw_consume(props, topic, records))
        times["source"].append(_timed(lambda: source_df.write.format("noop").mode("overwrite")
                                      .save()))
        produce_topic, sink_topic = _topic(props), _topic(props)
        times["raw_produce"].append(_raw_produce(props, produce_topic, records, value))
        times["sink"].append(_timed(lambda t=sink_topic: write_kafka(rows, cfg, topic=t)))
    spark.stop()
    rate = {name: records / median(values) for name, values in times.items()}
    return {
        "benchmark": "kafka_source", "records": records, "record_bytes": record_bytes,
        "partitions": PARTITIONS, "spark_master": cfg.spark.master,
        "broker": "embedded noida-db" if cfg.kafka.embedded else cfg.kafka.bootstrap_servers,
        "raw_consume_rows_per_s": round(rate["raw_consume"]),
        "source_rows_per_s": round(rate["source"]),
        "source_vs_raw_consume": round(rate["source"] / rate["raw_consume"], 2),
        "raw_produce_rows_per_s": round(rate["raw_produce"]),
        "sink_rows_per_s": round(rate["sink"]),
        "sink_vs_raw_produce": round(rate["sink"] / rate["raw_produce"], 2),
        "seconds": {name: _rounded(values) for name, values in times.items()}
        | {"first_raw_produce": round(first_produce_s, 2),
           "first_source_cold_jvm": round(first_source_s, 2),
           "spark_start_and_warmup": round(warmup_s, 2)},
        "method": "rates are medians of the runs under seconds; each round measures raw consume "
                  "then the source on the same topic, raw produce then the sink on fresh topics; "
                  "all after one untimed full source read (JVM warm-up)",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }


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
        while True:
            try:
                producer.produce(topic, value + key, key, index % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
        if index % 10_000 == 0:
            producer.poll(0)
    if producer.flush(300):
        raise RuntimeError("raw producer could not flush within 300 s")
    return time.monotonic() - began


def _raw_consume(props: dict[str, str], topic: str, records: int) -> float:
    """One consumer on all partitions; it reads each value's length, as any real consumer would."""
    consumer = Consumer({**props, "group.id": f"bench-{uuid.uuid4().hex}", "enable.auto.commit": False,
                         "receive.message.max.bytes": 1_000_000_000,
                         "fetch.max.bytes": 100 * 1024 * 1024})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    count, size, began = 0, 0, time.monotonic()
    while count < records:
        for message in consumer.consume(20_000, timeout=1.0):
            if message.error() is None:
                count += 1
                size += len(message.value())
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
    parser.add_argument("--bootstrap", help="an existing Kafka (default: start an embedded broker)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())

"""A pipeline defined inside a test runs live and replays on the engine with no change outside its files."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter

import pytest
import redis
from confluent_kafka import Producer

from jobs.engine.reads import read_view, snapshot
from jobs.engine.run import PipelineRun, run_pipeline
from jobs.pipelines.registry import load
from tests.integration.pipelines.tiny import write_tiny

pytestmark = pytest.mark.integration
COLOURS = ["red", "green", "blue", "black", "white"]


def _produce(props: dict[str, str], topic: str, records: list[bytes], keys: list[str]) -> None:
    producer = Producer(props)
    for key, value in zip(keys, records, strict=True):
        producer.produce(topic, value, key.encode())
    assert producer.flush(30) == 0


def _records(start: int, count: int) -> tuple[list[bytes], list[str]]:
    values, keys = [], []
    for i in range(start, start + count):
        values.append(json.dumps({"id": i, "colour": COLOURS[(i * 7) % 5 if i % 3 else 0],
                                  "t": 1_700_000_000_000 + i * 1000}).encode())
        keys.append(str(i))
    return values, keys


def test_tiny_pipeline_live_and_replay_agree(stack, spark, tmp_path, kafka_props, redis_client) -> None:
    folder, name, source = write_tiny(tmp_path)
    pipeline = load(folder)
    assert not pipeline.problems
    values, keys = _records(0, 400)
    values.insert(17, b"{not json")
    keys.insert(17, "bad")
    expected = Counter(json.loads(v)["colour"] for v in values if v != b"{not json")

    report = run_pipeline(stack, pipeline, PipelineRun(mode="replay", ending="latest", fresh=True,
                                                       prefix=f"{name}r", query=f"{name}-r0",
                                                       max_offsets_per_trigger=60))
    assert report["input_rows"] == 0  # topics made by the run, nothing produced yet
    _produce(kafka_props, source, values, keys)

    replayed = run_pipeline(stack, pipeline, PipelineRun(mode="replay", ending="latest", fresh=True,
                                                         prefix=f"{name}r", query=f"{name}-r",
                                                         max_offsets_per_trigger=60))
    assert (replayed["valid_rows"], replayed["dlq_rows"]) == (400, 1)
    assert replayed["batches"] >= 3
    view = pipeline.spec.views["colours"]
    top = read_view(redis_client, f"{name}r", "colours", view)["top"]
    assert dict(top) == dict(expected)

    stop = threading.Event()
    live_report: dict = {}
    live = threading.Thread(target=lambda: live_report.update(run_pipeline(
        stack, pipeline, PipelineRun(mode="live", prefix=f"{name}l", query=f"{name}-l",
                                     max_offsets_per_trigger=45, trigger_s=0.2), stop=stop)))
    live.start()
    client = redis.Redis(**stack.redis.client_kwargs())
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        fence = client.hgetall(f"{name}l:fence")
        if sum(int(v) for k, v in fence.items() if k.decode().startswith(source + ":")
               and k.decode().count(":") == 1) >= len(values):
            break
        time.sleep(0.5)
    stop.set()
    live.join(120)
    assert live_report["valid_rows"] == 400
    views = pipeline.spec.views
    assert snapshot(client, f"{name}l", views) == snapshot(client, f"{name}r", views)

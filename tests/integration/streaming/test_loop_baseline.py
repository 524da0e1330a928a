"""The replay benchmark's full-work baseline (bench/streaming_loop.py ``--views``) does the job's
work: on the embedded stack its Kafka outputs and Redis views equal the independent computation,
so the benchmark compares the job against a loop that writes everything the job writes."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from jobs.config.load import PROJECT_ROOT
from tests.integration.streaming.conftest import produce
from tests.integration.streaming.expected import compute, read_topic
from tests.integration.streaming.test_end_to_end import check_kafka, check_redis, generate


def _loop_module():
    path = Path(PROJECT_ROOT) / "bench" / "streaming_loop.py"
    spec = importlib.util.spec_from_file_location("bench_streaming_loop", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_loop_with_views_writes_what_the_job_writes(stream_cfg, redis_client, kafka_props):
    sent = generate(6_000, seed=5)
    s = stream_cfg.streaming
    produce(stream_cfg, s.source_topic, (item.line for item in sent))
    cfg = stream_cfg.model_copy(update={"streaming": s.model_copy(update={"max_offsets_per_trigger": 2_500})})
    loop = _loop_module()
    views = loop.LoopViews(cfg, s.source_topic, s.redis_prefix, s.summaries_topic)
    report = loop.run_loop(cfg, s.source_topic, 3, len(sent), s.analyzed_topic, s.dlq_topic, views=views)
    expected = compute(sent)
    assert (report["dlq"], report["late"]) == (expected.totals["dlq"], expected.totals["late"])
    check_redis(stream_cfg, redis_client, expected)
    check_kafka(stream_cfg, kafka_props, expected)
    fence = {k.decode(): v.decode()
             for k, v in redis_client.hgetall(f"{s.redis_prefix}:fence:summaries").items()}
    assert {k: int(v) for k, v in fence.items() if k.startswith(s.source_topic)} == {
        f"{s.source_topic}:{p}": sum(1 for item in sent if item.partition == p) for p in range(3)}
    assert fence["batch_id"] == "2"  # three hand-overs: 2,500, 2,500 and 1,000 records
    summaries = [json.loads(m.value()) for m in read_topic(kafka_props, s.summaries_topic, 3)]
    assert report["summaries"] == len(summaries) > 0
    assert {r["batch_id"] for r in summaries} == {0, 1, 2}

"""The HTTP contract: statuses, per-record results, reasons, metrics and health."""

from __future__ import annotations

import json

import httpx

from pipelines.rsvp.generator import RsvpGenerator
from tests.integration.collector.support import read_topic

NDJSON = {"content-type": "application/x-ndjson"}


def test_http_answers_per_record_and_keeps_rejects_with_their_reason(start_collector, topics, kafka_props):
    raw, dlq = topics
    collector = start_collector(raw, dlq)
    url = f"{collector.url}/rsvps"
    good = [json.loads(item.line) for item in RsvpGenerator(seed=31).generate(4)]

    single = httpx.post(url, content=json.dumps(good[0]))
    assert single.status_code == 200 and isinstance(single.json()["id"], int)

    broken = httpx.post(url, content=b'{"rsvp_id": 1,')
    assert broken.status_code == 400 and broken.json()["error"].startswith("invalid_json")

    no_key = dict(good[1])
    del no_key["rsvp_id"]
    missing = httpx.post(url, content=json.dumps(no_key))
    assert missing.status_code == 400 and missing.json()["error"] == "missing_field: rsvp_id"

    huge = httpx.post(url, content=json.dumps({**good[1], "padding": "x" * 70_000}))
    assert huge.status_code == 413 and huge.json()["error"].startswith("oversize")

    mixed = httpx.post(url, content=json.dumps([good[1], {**good[2], "mtime": "yesterday"}, 7]))
    assert mixed.status_code == 207
    body = mixed.json()
    assert (body["accepted"], body["rejected"]) == (1, 2)
    assert "id" in body["results"][0]
    assert body["results"][1]["error"].startswith("wrong_type: mtime")
    assert body["results"][2]["error"].startswith("not_an_object")

    lines = httpx.post(url, content=b"not json\n\n[1]\n", headers=NDJSON)
    assert lines.status_code == 400 and lines.json()["rejected"] == 2

    assert httpx.post(url, content=b"  ").status_code == 400  # nothing to keep: answered only
    empty_array = httpx.post(url, content=b"[]", headers={"content-type": "application/json"})
    assert empty_array.status_code == 400
    assert empty_array.json() == {"error": "empty_batch: a JSON array without records", "status": 400}
    batch = httpx.post(url, content=b"\n".join(json.dumps(g).encode() for g in good[2:]), headers=NDJSON)
    assert batch.status_code == 200 and batch.json()["accepted"] == 2

    metrics = collector.wait_drained()
    assert metrics["accepted_total"] == 4 and metrics["rejected_total"] == 8
    keys = sorted(m.key for m in read_topic(kafka_props, raw))
    assert keys == sorted(str(g["rsvp_id"]).encode() for g in good)
    dead = read_topic(kafka_props, dlq)
    assert {m.headers["kappa.source"] for m in dead} == {b"http"}
    assert sorted(m.headers["kappa.reason"].decode() for m in dead) == sorted([
        "invalid_json: Expecting property name enclosed in double quotes: line 1 column 15 (char 14)",
        "missing_field: rsvp_id",
        f"oversize: {len(huge.request.content)} bytes > max_record_bytes 65536",
        'wrong_type: mtime must be an integer, found string "yesterday"',
        "not_an_object: expected a JSON object, found integer",
        "invalid_json: Expecting value: line 1 column 1 (char 0)",
        "not_an_object: expected a JSON object, found array",
        "empty_batch: a JSON array without records",
    ])


def test_metrics_are_prometheus_text_and_health_reports_the_broker(start_collector, topics):
    collector = start_collector(*topics)
    metrics = httpx.get(f"{collector.url}/metrics")
    assert metrics.status_code == 200
    assert metrics.headers["content-type"] == "text/plain; version=1.0.0; charset=utf-8"  # prometheus-client
    assert "kappa_collector_accepted_total 0.0" in metrics.text.splitlines()
    text = metrics.text
    for name in ("accepted_total", "acknowledged_total", "rejected_total", "failed_total"):
        assert f"# TYPE kappa_collector_{name} counter" in text
    for name in ("pending", "failed_store", "buffer_limit", "broker_up"):
        assert f"# TYPE kappa_collector_{name} gauge" in text
    assert 'kappa_collector_rate{kind="accepted"}' in text
    health = httpx.get(f"{collector.url}/healthz")
    assert health.status_code == 200
    assert health.json()["status"] == "ok" and health.json()["broker_up"] is True

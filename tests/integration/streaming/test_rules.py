"""Rules the tiers must agree on, on the real job path: an event's guests count only "yes"
responses (docs/streaming.md), and NaN / Infinity are not JSON for the collector and the job alike."""

from __future__ import annotations

import json

import pytest

from jobs.streaming.job import RunSpec, run_stream
from pipelines.rsvp.generator import RsvpGenerator
from tests.integration.streaming.conftest import produce
from tests.integration.streaming.expected import read_topic

pytestmark = pytest.mark.timeout(600)
EVENT = "rules-event-1"


def _records(count: int, seed: int) -> list[dict]:
    return [json.loads(item.line) for item in RsvpGenerator(seed=seed).generate(count)]


def _not_json_lines(seed: int) -> list[bytes]:
    """Valid records with one number written as NaN, Infinity or -Infinity (Python's extensions)."""
    lines = []
    for record, (field, constant) in zip(_records(3, seed), [("guests", "NaN"), ("mtime", "Infinity"),
                                                             ("guests", "-Infinity")], strict=True):
        text = json.dumps(record)
        marker = f'"{field}": {json.dumps(record[field])}'
        assert marker in text
        lines.append(text.replace(marker, f'"{field}": {constant}', 1).encode())
    return lines


def test_guests_of_no_responses_do_not_count_and_nan_is_refused_by_both_tiers(
        stream_cfg, spark, redis_client, kafka_props, run_kappa, tmp_path):
    yes, no, also_yes = _records(3, seed=91)
    for record, response, guests in ((yes, "yes", 2), (no, "no", 5), (also_yes, "yes", 1)):
        record["event"]["event_id"] = EVENT
        record.update(response=response, guests=guests)
    not_json = _not_json_lines(seed=92)
    source = stream_cfg.streaming.source_topic
    produce(stream_cfg, source, [json.dumps(r).encode() for r in (yes, no, also_yes)] + not_json)

    report = run_stream(stream_cfg, RunSpec(mode="replay", ending="latest"))
    assert (report.records_read, report.valid, report.dead_lettered) == (6, 3, 3)
    event = redis_client.hgetall(f"{stream_cfg.streaming.redis_prefix}:event:{EVENT}")
    assert {k: int(event[k.encode()]) for k in ("yes", "no", "guests")} == {"yes": 2, "no": 1, "guests": 3}
    reasons = sorted(dict(m.headers())["kappa.reason"].decode() for m in
                     read_topic(kafka_props, stream_cfg.streaming.dlq_topic, 1))
    assert [reason.split(":", 1)[0] for reason in reasons] == ["invalid_json"] * 3

    # the collector, fed the same lines, refuses the same three with the same reason code
    path = tmp_path / "not-json.jsonl"
    path.write_bytes(b"\n".join(not_json) + b"\n")
    collected = run_kappa("collect", "--file", str(path), "--topic", source, "--dlq-topic",
                          stream_cfg.streaming.dlq_topic,
                          env={"KAPPA_COLLECTOR__LOG_PATH": str(tmp_path / "log" / "log.sqlite")})
    assert collected.returncode == 0, collected.stderr
    assert "pulled 3 lines: 0 accepted, 3 rejected" in collected.stderr
    dead = read_topic(kafka_props, stream_cfg.streaming.dlq_topic, 1)
    from_collector = [dict(m.headers()) for m in dead if dict(m.headers())["kappa.source"] == b"file"]
    assert sorted(h["kappa.reason"].decode().split(":", 1)[0] for h in from_collector) == ["invalid_json"] * 3

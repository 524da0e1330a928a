"""Streams across view versions (docs/api.md, "View versions"): resume ids, switch continuity."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from jobs.config.load import KappaConfig, load_config
from jobs.serve.server import ServerThread
from jobs.views.versions import switch_current
from tests.integration.serve.support import Sender, SseReader, rsvp


@pytest.fixture()
def v2_config(stack: KappaConfig, kappa_env: dict[str, str],
              kafka_props: dict[str, str]) -> Iterator[KappaConfig]:
    """A config with versions 1 and 2's topics (its own, 3 partitions) and view pointer topic."""
    name = uuid.uuid4().hex[:8]
    analyzed, summaries, views = f"ra.{name}", f"rs.{name}", f"rviews.{name}"
    topics = [analyzed, summaries, f"{analyzed}.v2", f"{summaries}.v2"]
    admin = AdminClient(kafka_props)
    for future in admin.create_topics([NewTopic(t, 3, 1) for t in topics]
                                      + [NewTopic(views, 1, 1)]).values():
        future.result(15)
    cfg = load_config("test", environ=kappa_env, overrides={
        "serve.port": 0, "streaming.analyzed_topic": analyzed, "streaming.summaries_topic": summaries,
        "streaming.views_topic": views, "streaming.redis_prefix": f"r{name}"})
    yield cfg
    admin.delete_topics([*topics, views])


@pytest.mark.parametrize("ring", [1000, 0], ids=["ring", "kafka"])
def test_resume_from_the_connected_id_on_version_2_gets_every_later_record(
        v2_config: KappaConfig, sender: Sender, ring: int) -> None:
    cfg = v2_config.model_copy(update={"serve": v2_config.serve.model_copy(
        update={"ring_buffer_size": ring})})
    topic = f"{cfg.streaming.analyzed_topic}.v2"
    switch_current(cfg, 2, 1)
    server = ServerThread(cfg, None).start()
    try:
        first = SseReader(f"{server.url}/api/v1/stream?stream=analyzed")
        first.wait_for(lambda r: r.of("status"))
        connected = first.of("status")[0]
        assert connected.data["status"] == "connected"
        first.stop()
        assert connected.id == connected.data["id"]
        assert connected.id.startswith("v2/"), connected.id

        sender.send(topic, [rsvp(n) for n in range(1, 7)])
        again = SseReader(f"{server.url}/api/v1/stream?stream=analyzed",
                          headers={"Last-Event-ID": connected.id})
        try:
            again.wait_for(lambda r: len(r.of("rsvp")) == 6)
            statuses = [e.data["status"] for e in again.of("status")]
            assert "view_switched" not in statuses, statuses
            assert sorted(e.data["n"] for e in again.of("rsvp")) == list(range(1, 7))
            assert all(e.id.startswith("v2/") for e in again.of("rsvp")), again.of("rsvp")[0].id
        finally:
            again.stop()
    finally:
        server.stop()


def test_a_switch_continues_at_the_source_position_the_old_stream_stopped(
        v2_config: KappaConfig, sender: Sender) -> None:
    analyzed = v2_config.streaming.analyzed_topic
    cfg = v2_config.model_copy(update={"serve": v2_config.serve.model_copy(
        update={"ring_buffer_size": 0})})  # a resume reads Kafka
    server = ServerThread(cfg, None).start()
    reader = SseReader(f"{server.url}/api/v1/stream?stream=analyzed")
    try:
        reader.wait_for(lambda r: r.of("status"))
        sender.send(analyzed, [rsvp(n) for n in range(1, 11)])
        reader.wait_for(lambda r: len(r.of("rsvp")) == 10)
        # version 2 analyzed the same source log and is 4 source positions ahead of the stream
        sender.send(f"{analyzed}.v2", [rsvp(n) for n in range(1, 15)])
        switch_current(cfg, 2, 1)
        reader.wait_for(lambda r: any(e.data.get("status") == "view_switched" for e in r.of("status")))
        sender.send(analyzed, [rsvp(n) for n in range(11, 13)])  # the old job's last batch: not served
        sender.send(f"{analyzed}.v2", [rsvp(n) for n in range(15, 19)])
        reader.wait_for(lambda r: max(e.data["n"] for e in r.of("rsvp")) >= 18 and len(r.of("rsvp")) >= 18)
        time.sleep(0.5)  # anything sent twice would arrive by now
        served = [e.data["source_offset"] for e in reader.of("rsvp")]
        assert sorted(served) == list(range(1, 19)), served
        assert all(e.id.startswith("v2/") for e in reader.of("rsvp")[10:])

        # resuming after the first record of version 2: the rest, not what version 1 delivered
        first_v2 = reader.of("rsvp")[10]
        again = SseReader(f"{server.url}/api/v1/stream?stream=analyzed",
                          headers={"Last-Event-ID": first_v2.id})
        try:
            again.wait_for(lambda r: len(r.of("rsvp")) >= 7)
            time.sleep(0.5)
            assert sorted(e.data["source_offset"] for e in again.of("rsvp")) == sorted(served[11:])
        finally:
            again.stop()
    finally:
        reader.stop()
        server.stop()

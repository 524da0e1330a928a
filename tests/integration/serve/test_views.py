"""The service follows the view pointer (docs/reprocess.md): switch, ids per version, rebuilding."""

from __future__ import annotations

import time
import uuid

import httpx
import redis
from confluent_kafka.admin import AdminClient, NewTopic

from jobs.config.load import load_config
from jobs.serve.server import ServerThread
from jobs.views.versions import BUILDING, record_version, switch_current
from tests.integration.serve.support import SseReader, rsvp


def _wait(condition, what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out: {what}"
        time.sleep(0.1)


def test_a_promote_moves_clients_rest_and_ids_to_the_new_version(stack, kappa_env, kafka_props, sender):
    name = uuid.uuid4().hex[:8]
    analyzed, summaries, views = f"va.{name}", f"vs.{name}", f"views.{name}"
    admin = AdminClient(kafka_props)
    topics = [analyzed, summaries, f"{analyzed}.v2", f"{summaries}.v2"]
    created = admin.create_topics([NewTopic(t, 3, 1) for t in topics] + [NewTopic(views, 1, 1)])
    for future in created.values():
        future.result(15)
    prefix = f"v{name}"
    cfg = load_config("test", environ=kappa_env, overrides={
        "serve.port": 0, "streaming.analyzed_topic": analyzed, "streaming.summaries_topic": summaries,
        "streaming.views_topic": views, "streaming.redis_prefix": prefix})
    client = redis.Redis(**cfg.redis.client_kwargs(), decode_responses=True)
    client.hset(f"{prefix}:fence:summaries", mapping={"x:0": "1"})
    client.zadd(f"{prefix}:topics:all", {"Salsa": 3})
    client.hset(f"{prefix}-v2:fence:summaries", mapping={"x:0": "1"})
    client.zadd(f"{prefix}-v2:topics:all", {"SALSA": 4})
    server = ServerThread(cfg, None).start()
    reader = SseReader(f"{server.url}/api/v1/stream?stream=analyzed")
    try:
        reader.wait_for(lambda r: r.status_code == 200)
        sender.send(analyzed, [rsvp(1)])
        reader.wait_for(lambda r: len(r.of("rsvp")) == 1)
        old_id = reader.last_id()
        assert not old_id.startswith("v")
        assert httpx.get(f"{server.url}/api/v1/topics/top").json()["items"][0]["item"] == "Salsa"

        switch_current(cfg, 2, 1)
        reader.wait_for(lambda r: any(e.data.get("status") == "view_switched" for e in r.of("status")))
        sender.send(f"{analyzed}.v2", [rsvp(2)])
        reader.wait_for(lambda r: len(r.of("rsvp")) == 2)
        assert reader.of("rsvp")[-1].data["n"] == 2 and reader.last_id().startswith("v2/")
        _wait(lambda: httpx.get(f"{server.url}/api/v1/topics/top").json()["items"][0]["item"] == "SALSA",
              "REST on version 2's prefix")

        # a client resuming with a version 1 id starts live on version 2, told so first
        again = SseReader(f"{server.url}/api/v1/stream?stream=analyzed", headers={"Last-Event-ID": old_id})
        again.wait_for(lambda r: any(e.data.get("status") == "view_switched" for e in r.of("status")))
        again.stop()

        # version 2 loses its Redis data while version 3 is built: REST says rebuilding
        client.delete(f"{prefix}-v2:fence:summaries")
        record_version(cfg, 3, BUILDING)
        # "view lost" first when the loss is seen before the building version: then "rebuilding"
        _wait(lambda: httpx.get(f"{server.url}/api/v1/topics/top").json().get("error", "").startswith(
            "rebuilding"), "rebuilding")
        answer = httpx.get(f"{server.url}/api/v1/topics/top")
        assert answer.json()["error"].startswith("rebuilding: view version 2")
        assert answer.headers["Retry-After"]
        assert httpx.get(f"{server.url}/healthz").json()["rebuilding"]
    finally:
        reader.stop()
        server.stop()
        for key in client.scan_iter(f"{prefix}*"):
            client.delete(key)
        admin.delete_topics([*topics, views])

"""A served view whose Redis data vanishes answers 503 ``view lost`` at once, not 200 with nothing."""

from __future__ import annotations

import uuid

import httpx
import redis
from confluent_kafka.admin import AdminClient, NewTopic

from jobs.config.load import load_config
from jobs.serve.server import ServerThread
from tests.integration.serve.test_views import _wait


def test_rest_says_view_lost_as_soon_as_the_views_redis_data_is_gone(stack, kappa_env, kafka_props) -> None:
    name = uuid.uuid4().hex[:8]
    topics = [f"la.{name}", f"ls.{name}", f"lv.{name}"]
    admin = AdminClient(kafka_props)
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        future.result(15)
    prefix = f"l{name}"
    cfg = load_config("test", environ=kappa_env, overrides={
        "serve.port": 0, "streaming.analyzed_topic": topics[0], "streaming.summaries_topic": topics[1],
        "streaming.views_topic": topics[2], "streaming.redis_prefix": prefix})
    client = redis.Redis(**cfg.redis.client_kwargs(), decode_responses=True)
    client.hset(f"{prefix}:fence:summaries", mapping={"x:0": "1"})
    client.zadd(f"{prefix}:topics:all", {"Salsa": 3})
    server = ServerThread(cfg, None).start()
    url = f"{server.url}/api/v1/topics/top"
    try:
        _wait(lambda: httpx.get(url).status_code == 200, "the view served")
        client.delete(*client.scan_iter(f"{prefix}:*"))   # Redis lost the view (FLUSHALL, restart)
        _wait(lambda: httpx.get(url).status_code == 503, "view lost", timeout=10)
        error = httpx.get(url).json()["error"]
        assert error.startswith("view lost: view version 1") and "docs/runbooks/redis-lost.md" in error
        assert httpx.get(f"{server.url}/healthz").json()["rebuilding"].startswith("view lost")
        client.hset(f"{prefix}:fence:summaries", mapping={"x:0": "1"})   # rebuilt in place
        _wait(lambda: httpx.get(url).status_code == 200, "served again", timeout=10)
    finally:
        server.stop()
        for key in client.scan_iter(f"{prefix}*"):
            client.delete(key)
        admin.delete_topics(topics)

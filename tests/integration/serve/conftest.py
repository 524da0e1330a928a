"""Fixtures of the serve tests: per-test topics and Redis prefix, the service on a thread."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from jobs.config.load import KappaConfig, load_config
from jobs.serve.server import ServerThread
from tests.integration.serve.support import Sender


@pytest.fixture()
def serve_topics(topic_factory: Callable[..., str]) -> dict[str, str]:
    """A fresh analyzed (3 partitions) and summaries (3 partitions) topic for one test."""
    return {"analyzed": topic_factory(3, prefix="analyzed"),
            "summaries": topic_factory(3, prefix="summaries")}


@pytest.fixture()
def prefix() -> str:
    """A Redis key prefix of this test only (streaming.redis_prefix)."""
    return f"t{uuid.uuid4().hex[:8]}"


@pytest.fixture()
def serve_config(stack: KappaConfig, kappa_env: dict[str, str], serve_topics: dict[str, str],
                 prefix: str) -> Callable[..., KappaConfig]:
    def make(**serve: Any) -> KappaConfig:
        overrides = {"serve.analyzed_topic": serve_topics["analyzed"],
                     "serve.summaries_topic": serve_topics["summaries"],
                     "streaming.redis_prefix": prefix, "serve.port": 0,
                     **{f"serve.{key}": value for key, value in serve.items()}}
        return load_config("test", overrides=overrides, environ=kappa_env)

    return make


@pytest.fixture()
def start_serve(serve_config: Callable[..., KappaConfig]) -> Iterator[Callable[..., ServerThread]]:
    """Start the service in-process (uvicorn on a thread, port 0); stopped at the end."""
    started: list[ServerThread] = []

    def start(token: str | None = None, **serve: Any) -> ServerThread:
        from pydantic import SecretStr

        server = ServerThread(serve_config(**serve), SecretStr(token) if token else None).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture()
def sender(kafka_props: dict[str, str]) -> Sender:
    return Sender(kafka_props)

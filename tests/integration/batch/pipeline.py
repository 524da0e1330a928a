"""A platform that really ran, for the batch tests: RSVP lines pulled by the collector
(``kappa collect --file``), the streaming job over the raw topic (a replay to its end, resumed by
the next one), and the loader (every lake table the job feeds), on the session's embedded stack.

Nothing here computes an expected value: tests derive those in plain Python
(tests/integration/batch/expected.py) from the generated lines and from what the collector wrote
to the raw topic, and read the platform's outputs back through :meth:`Platform.read`.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from jobs.config.load import KappaConfig, load_config
from tests.conftest import KAPPA, REPO, delete_topics

PARTITIONS = {"source_topic": 3, "analyzed_topic": 3, "summaries_topic": 3, "dlq_topic": 1,
              "metrics_topic": 1, "errors_topic": 1}
# lake table -> (the streaming topic it loads, its quality policy as in conf/base.yaml)
LOADED = {"bronze.rsvps_raw": ("source_topic", "quarantine"), "ops.dlq": ("dlq_topic", "fail"),
          "silver.rsvps": ("analyzed_topic", "fail"), "gold.rsvp_summaries": ("summaries_topic", "fail")}
PER_BATCH = 150   # several micro-batches: the stream time carries over from one to the next
COLLECT_TIMEOUT_S = 180


@dataclass(frozen=True)
class Message:
    """One Kafka record as read back."""

    partition: int
    offset: int
    timestamp_ms: int
    value: bytes
    headers: dict[str, str]


def loader_tables(topics: dict[str, str]) -> str:
    """``KAPPA_LOADER__TABLES``: the four tables of the streaming ``topics`` (key -> topic)."""
    return json.dumps({table: {"topic": topics[key], "quality_policy": policy}
                       for table, (key, policy) in LOADED.items()})


@dataclass
class Platform:
    """Collector, streaming job and loader of one lake, one Redis prefix and its own topics."""

    env: dict[str, str]
    folder: Path
    pulls: int = field(default=0, init=False)

    @cached_property
    def cfg(self) -> KappaConfig:
        """The validated config of this platform."""
        return load_config("test", environ=self.env)

    def topic(self, key: str) -> str:
        """The topic of a ``streaming`` setting (``source_topic``, ``dlq_topic``, ...)."""
        return getattr(self.cfg.streaming, key)

    def collect(self, lines: Sequence[bytes]) -> str:
        """Pull ``lines`` through ``kappa collect --file`` (its own log) until drained; its output."""
        self.pulls += 1
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"pull-{self.pulls}.jsonl"
        path.write_bytes(b"".join(line + b"\n" for line in lines))
        env = {**os.environ, **self.env,
               "KAPPA_COLLECTOR__LOG_PATH": str(self.folder / f"collector-{self.pulls}" / "log.sqlite")}
        args = ["collect", "--file", str(path), "--topic", self.topic("source_topic"),
                "--dlq-topic", self.topic("dlq_topic")]
        done = subprocess.run([*KAPPA, *args], env=env, cwd=REPO, capture_output=True, text=True,
                              timeout=COLLECT_TIMEOUT_S, check=False)
        assert done.returncode == 0 and "log drained" in done.stderr, done.stderr[-3000:]
        return done.stderr

    def stream(self) -> Any:
        """The streaming job over the raw topic up to its end (a later call resumes from there)."""
        from jobs.streaming.job import RunSpec, run_stream

        spec = RunSpec(mode="replay", ending="latest", max_offsets_per_trigger=PER_BATCH)
        return run_stream(self.cfg, spec)

    def load(self, spark, tables: Sequence[str] = tuple(LOADED)) -> list[Any]:
        """``kappa load`` of ``tables`` up to the end of their topics (each commits, or had nothing new)."""
        from jobs.loader.load import run_load
        from jobs.loader.offsets import parse_until
        from jobs.loader.tables import targets

        results = run_load(spark, self.cfg, targets(self.cfg, list(tables)), parse_until("latest"))
        assert {r.outcome for r in results} <= {"committed", "noop"}, [r.as_dict() for r in results]
        return results

    def read(self, key: str) -> list[Message]:
        """Every record of a streaming topic, by partition and offset."""
        from tests.integration.streaming.expected import read_topic

        found = read_topic(self.cfg.kafka.client_config(), self.topic(key), PARTITIONS[key])
        return sorted((Message(m.partition(), m.offset(), m.timestamp()[1], m.value(),
                               {k: v.decode() for k, v in m.headers() or []}) for m in found),
                      key=lambda message: (message.partition, message.offset))


@contextmanager
def new_platform(kappa_env: dict[str, str], folder: Path) -> Iterator[Platform]:
    """A platform on fresh topics, lake, checkpoints and Redis prefix; its topics and keys removed
    at the end."""
    import redis
    from confluent_kafka.admin import AdminClient, NewTopic

    name = uuid.uuid4().hex[:8]
    base = load_config("test", environ=kappa_env)
    admin = AdminClient(base.kafka.client_config())
    topics = {key: f"{key.split('_')[0]}.{name}" for key in PARTITIONS}
    created = admin.create_topics([NewTopic(topics[key], count, 1) for key, count in PARTITIONS.items()])
    for future in created.values():
        future.result(timeout=15)
    env = {**kappa_env, **{f"KAPPA_STREAMING__{key.upper()}": topic for key, topic in topics.items()},
           "KAPPA_STREAMING__QUERY_NAME": f"q-{name}", "KAPPA_STREAMING__REDIS_PREFIX": f"b{name}",
           "KAPPA_LOADER__TABLES": loader_tables(topics), "KAPPA_LAKE__ROOT": str(folder / "lake"),
           "KAPPA_LAKE__CHECKPOINT_ROOT": str(folder / "checkpoints")}
    platform = Platform(env, folder)
    try:
        yield platform
    finally:
        delete_topics(admin, list(topics.values()))
        client = redis.Redis(**base.redis.client_kwargs())
        keys = list(client.scan_iter(match=f"{platform.cfg.streaming.redis_prefix}:*", count=1000))
        if keys:
            client.delete(*keys)
        client.close()

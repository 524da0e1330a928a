"""What a run of the job is doing, for ``kappa stream status``: its state record and a Kafka watch.

:class:`RunStatus` keeps one Redis hash per query, ``<prefix>:metrics:<query>:status``
(docs/streaming.md), beside the query's metrics and like them no summary:
``state`` (``running``, ``waiting``, ``finished``, ``stopped``, ``failed``), ``mode``, ``pid``,
``since_ms`` (when the state began), ``updated_ms`` and ``detail`` (what it waits for, the end
report or the error). It is written whatever the run's sinks are; a Redis that cannot be reached
costs a warning, never the run. :class:`KafkaWatch` asks the brokers for metadata when no batch
has completed for a while: a query whose source cannot reach Kafka keeps retrying inside Spark
without a word, so the watch says "waiting for Kafka since T" (once, and again when it is back).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from jobs.config.load import KappaConfig

logger = logging.getLogger(__name__)
PROBE_AFTER_S = 5.0
"""Seconds without a completed batch before the watch asks Kafka whether it answers."""
PROBE_TIMEOUT_S = 3.0
STATES = ("running", "waiting", "finished", "stopped", "failed")


def now_ms() -> int:
    """Wall-clock milliseconds."""
    return int(time.time() * 1000)


def iso(ms: int | float) -> str:
    """A UTC time of day for operators."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="seconds")


class RunStatus:
    """The state record of one query in Redis (best effort)."""

    def __init__(self, cfg: KappaConfig, query: str, mode: str) -> None:
        from jobs.streaming.redis_sink import Keys, connect

        self.key = Keys(cfg.streaming.redis_prefix)("metrics", query, "status")
        self.mode, self.state = mode, ""
        self._client: Any = connect(cfg)

    def set(self, state: str, detail: str = "", since_ms: int | None = None) -> None:
        """Record ``state`` (since ``since_ms``, default now) with what it is about."""
        assert state in STATES, state
        stamp = now_ms()
        record = {"state": state, "mode": self.mode, "pid": str(os.getpid()), "detail": detail[:2000],
                  "since_ms": str(since_ms or stamp), "updated_ms": str(stamp)}
        self.state = state
        try:
            self._client.hset(self.key, mapping=record)
        except Exception as exc:  # the status record must never fail the run
            logger.warning("could not record the query's state %s in Redis: %s", state, exc)

    def close(self) -> None:
        """Release the Redis client."""
        self._client.close()


class KafkaWatch:
    """Notices a run that cannot reach Kafka; records and says since when, and when it is back."""

    def __init__(self, cfg: KappaConfig, status: RunStatus, progress: Callable[[str], None],
                 probe: Callable[[], str | None] | None = None) -> None:
        from jobs.stack.health import kafka_healthy

        self.where = cfg.kafka.bootstrap_servers
        self.status, self.progress = status, progress
        client = cfg.kafka.client_config()
        self.probe = probe or (lambda: kafka_healthy(client, timeout_s=PROBE_TIMEOUT_S))
        self.down_since_ms: int | None = None
        self._batches, self._quiet_since, self._ok_ms = -1, time.monotonic(), now_ms()

    def tick(self, batches: int) -> None:
        """Called often by the waiting loop with the number of batches completed so far."""
        now = time.monotonic()
        if batches != self._batches:
            self._batches, self._quiet_since, self._ok_ms = batches, now, now_ms()
            if self.down_since_ms is not None:
                self._back()
            return
        if now - self._quiet_since < PROBE_AFTER_S:
            return
        self._quiet_since = now
        problem = self.probe()
        if problem is None:
            self._ok_ms = now_ms()
            if self.down_since_ms is not None:
                self._back()
        elif self.down_since_ms is None:
            self.down_since_ms = self._ok_ms
            detail = f"Kafka at {self.where} ({problem})"
            self.status.set("waiting", detail, since_ms=self.down_since_ms)
            self.progress(f"warning: waiting for Kafka since {iso(self.down_since_ms)}: {problem}; "
                          "the query resumes when it answers (`kappa stream stop` to stop)")

    def _back(self) -> None:
        assert self.down_since_ms is not None
        waited = (now_ms() - self.down_since_ms) / 1000
        self.down_since_ms = None
        self.status.set("running")
        self.progress(f"Kafka at {self.where} answers again (after about {waited:.0f} s)")

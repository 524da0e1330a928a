"""Producer settings and the delivery bookkeeping of the pump.

Producer: idempotent (``enable.idempotence=true``, which implies ``acks=all`` and at most 5
requests in flight per connection, so librdkafka's own retries neither duplicate nor reorder),
lz4 compression, ``linger.ms=20`` and large batches for throughput. ``message.timeout.ms``
is long (5 minutes): while the broker is unreachable, records already handed to librdkafka wait
there (and in the log) instead of failing. A record that times out while every broker is down
is produced again without spending an attempt, so an outage of any length moves nothing to
the failed store: the log fills up to the buffer limit and the collector answers 503. A record whose
delivery report carries an error is retried from the pump with exponential backoff and jitter
through a second producer that sends one record per batch (``batch.num.messages=1``), so a
record the broker refuses (too large for the topic, say) cannot fail its neighbours again.
After ``max_retries`` failed deliveries a record moves to the failed store.
"""

from __future__ import annotations

import heapq
import logging
import random
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from confluent_kafka import KafkaError, Producer

from jobs.collector.log import RECORD, Row

logger = logging.getLogger(__name__)
librdkafka_logger = logging.getLogger("jobs.collector.librdkafka")

PRODUCER_DEFAULTS: dict[str, str] = {
    "compression.type": "lz4",
    "linger.ms": "20",
    "batch.size": "1000000",
    "batch.num.messages": "10000",
    "queue.buffering.max.messages": "200000",
    "queue.buffering.max.kbytes": "1048576",
    "message.timeout.ms": "300000",
    "reconnect.backoff.max.ms": "2000",
    "log.connection.close": "false",
}
PRODUCER_REQUIRED: dict[str, str] = {"enable.idempotence": "true", "acks": "all"}
ISOLATED: dict[str, str] = {"batch.num.messages": "1", "linger.ms": "0"}
RETRY_BASE_S = 0.5
RETRY_CAP_S = 30.0
OUTAGE_RETRY_S = 1.0


def producer_config(client_config: dict[str, str], isolated: bool = False) -> dict[str, Any]:
    """Producer properties, later ones winning.

    Our defaults, then the configured client properties (``kafka.client``), then the settings
    durability depends on, which cannot be overridden.
    """
    props: dict[str, Any] = {**PRODUCER_DEFAULTS, **client_config, **PRODUCER_REQUIRED}
    for consumer_only in ("receive.message.max.bytes",):
        props.pop(consumer_only, None)
    if isolated:
        props.update(ISOLATED)
    props["logger"] = librdkafka_logger
    return props


def retry_delay(attempts: int, rng: random.Random) -> float:
    """Exponential backoff with equal jitter: half the step fixed, half random."""
    step = min(RETRY_CAP_S, RETRY_BASE_S * 2 ** max(0, attempts - 1))
    return step / 2 + rng.uniform(0, step / 2)


@dataclass(order=True)
class _Retry:
    due: float
    row: Row = field(compare=False)
    isolated: bool = field(compare=False, default=True)


class Deliveries:
    """Delivery reports of one producer generation, sorted into acks, retries and failures.

    Callbacks run inside ``Producer.poll`` on the pump thread, so no locking is needed. A
    fatal producer error starts a new generation; reports of older ones are ignored.
    """

    def __init__(self, max_retries: int, seed: int | None = None) -> None:
        self.max_retries = max_retries
        self.generation = 0
        self.inflight = 0
        self.acked_records: list[int] = []
        self.acked_rejects: list[int] = []
        self.attempts: list[tuple[int, str]] = []
        self.failures: list[tuple[int, str, str]] = []
        self.retries: list[_Retry] = []
        self.broker_down = False
        self.fatal: KafkaError | None = None
        self.last_error: str | None = None
        self._rng = random.Random(seed)

    def callback(self, row: Row):
        """The ``on_delivery`` callback for one row (count it in flight once produced)."""
        return partial(self._on_delivery, self.generation, row)

    def produce_failed(self, row: Row, error: str) -> None:
        """Record a produce call that raised (counts as a failed delivery)."""
        self._failed(row, error)

    def new_generation(self) -> None:
        """Forget everything in flight (after a fatal error, the log is re-read)."""
        self.generation += 1
        self.inflight = 0
        self.retries.clear()

    def due_retries(self, now: float) -> list[tuple[Row, bool]]:
        """Rows whose backoff has elapsed, each with whether to send it in a batch of its own."""
        due = []
        while self.retries and self.retries[0].due <= now:
            retry = heapq.heappop(self.retries)
            due.append((retry.row, retry.isolated))
        return due

    def take(self) -> tuple[list[int], list[int], list[tuple[int, str]], list[tuple[int, str, str]]]:
        """Hand over (and reset) the collected acks, attempts and failures."""
        taken = (self.acked_records, self.acked_rejects, self.attempts, self.failures)
        self.acked_records, self.acked_rejects, self.attempts, self.failures = [], [], [], []
        return taken

    def on_error(self, error: KafkaError) -> None:
        """``error_cb``: track broker reachability and fatal errors (the pump rebuilds)."""
        if error.fatal():
            self.fatal = error
        if error.code() == KafkaError._ALL_BROKERS_DOWN:
            if not self.broker_down:
                logger.warning("broker unreachable: %s; records stay in the log", error.str())
            self.broker_down = True
        self.last_error = error.str()

    def _on_delivery(self, generation: int, row: Row, error: KafkaError | None, message) -> None:
        if generation != self.generation:
            return
        self.inflight -= 1
        if error is None:
            if self.broker_down:
                logger.warning("broker reachable again; draining the log")
            self.broker_down = False
            (self.acked_records if row.kind == RECORD else self.acked_rejects).append(row.id)
            return
        if error.code() == KafkaError._MSG_TIMED_OUT and self.broker_down:
            # An outage is not the record's fault: wait it out without spending an attempt.
            heapq.heappush(self.retries, _Retry(time.monotonic() + OUTAGE_RETRY_S, row, isolated=False))
            return
        self._failed(row, error.str())

    def _failed(self, row: Row, error: str) -> None:
        self.last_error = error
        attempts = row.attempts + 1
        if attempts >= self.max_retries:
            self.failures.append((row.id, row.kind, error))
            return
        self.attempts.append((row.id, error))
        retried = Row(row.id, row.kind, row.topic, row.key, row.value, row.headers, attempts)
        due = time.monotonic() + retry_delay(attempts, self._rng)
        heapq.heappush(self.retries, _Retry(due, retried))
        logger.debug("delivery failed id=%d attempts=%d error=%s", row.id, attempts, error)


def new_producer(props: dict[str, Any]) -> Producer:
    """A producer (kept as a function so the pump can rebuild one after a fatal error)."""
    return Producer(props)

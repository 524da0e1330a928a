"""Where ``kappa generate`` sends its lines: a stream, the collector over HTTP, or a topic."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from jobs.errors import KappaError
from jobs.pipelines.generate import Line

logger = logging.getLogger(__name__)

POST_ATTEMPTS = 10
POST_TIMEOUT_S = 60.0
CONNECT_BACKOFF_S = 1.0
PROGRESS_S = 5.0

Progress = Callable[[str], None]


@dataclass
class EmitCounts:
    """Lines sent, and (for the collector) how it answered."""

    sent: int = 0
    accepted: int = 0
    rejected: int = 0


class RateLimiter:
    """Pace a loop to at most ``rate`` items per second (no limit when None)."""

    def __init__(self, rate: float | None) -> None:
        self.rate = rate
        self._start = time.monotonic()
        self._count = 0

    def wait(self, items: int = 1) -> None:
        """Sleep until ``items`` more may go."""
        if not self.rate:
            return
        self._count += items
        ahead = self._count / self.rate - (time.monotonic() - self._start)
        if ahead > 0:
            time.sleep(ahead)


def batches(items: Iterable[Line], size: int) -> Iterator[list[Line]]:
    """Consecutive lists of ``size`` items (the last may be shorter)."""
    batch: list[Line] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def to_stream(items: Iterable[Line], out: BinaryIO, rate: float | None) -> EmitCounts:
    """Write JSON lines."""
    limiter, counts = RateLimiter(rate), EmitCounts()
    for item in items:
        limiter.wait()
        out.write(item.line + b"\n")
        counts.sent += 1
    out.flush()
    return counts


def to_collector(items: Iterable[Line], url: str, batch_size: int, rate: float | None,
                 progress: Progress) -> EmitCounts:
    """POST JSON-lines batches; wait out 503s (Retry-After) and resend the same batch."""
    import httpx

    limiter, counts, last = RateLimiter(rate), EmitCounts(), time.monotonic()
    with httpx.Client(timeout=POST_TIMEOUT_S) as client:
        for batch in batches(items, batch_size):
            limiter.wait(len(batch))
            body = b"\n".join(item.line for item in batch) + b"\n"
            answer = _post(client, url, body)
            counts.sent += len(batch)
            counts.accepted += answer.get("accepted", 0)
            counts.rejected += answer.get("rejected", 0)
            if time.monotonic() - last >= PROGRESS_S:
                last = time.monotonic()
                progress(f"sent {counts.sent}: accepted {counts.accepted}, rejected {counts.rejected}")
    return counts


def _post(client, url: str, body: bytes) -> dict:
    import httpx

    for attempt in range(1, POST_ATTEMPTS + 1):
        try:
            response = client.post(url, content=body, headers={"content-type": "application/x-ndjson"})
        except httpx.TransportError as exc:
            logger.warning("POST %s failed (%s); attempt %d of %d", url, exc, attempt, POST_ATTEMPTS)
            time.sleep(CONNECT_BACKOFF_S * attempt)
            continue
        if response.status_code == 503:
            time.sleep(float(response.headers.get("retry-after", "1")))
            continue
        if response.status_code in (200, 207, 400):
            return response.json()
        raise KappaError(f"collector at {url} answered {response.status_code}: "
                         f"{response.text[:200]}; check `kappa collect status`")
    raise KappaError(f"collector at {url} did not accept a batch after {POST_ATTEMPTS} attempts; "
                     "is it running? (`kappa collect status`)")


def to_topic(items: Iterable[Line], client_config: dict[str, str], topic: str,
             rate: float | None) -> EmitCounts:
    """Produce straight to a topic (bypassing the collector), keyed by each line's key."""
    from confluent_kafka import KafkaException, Producer

    from jobs.collector.producer import producer_config

    props = {key: value for key, value in producer_config(client_config).items() if key != "logger"}
    producer = Producer({**props, "message.timeout.ms": "60000"})
    errors: list[str] = []
    limiter, counts = RateLimiter(rate), EmitCounts()

    def delivered(error, message) -> None:
        if error is not None:
            errors.append(error.str())

    for item in items:
        limiter.wait()
        while True:
            try:
                producer.produce(topic, item.line, item.key, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.1)
        counts.sent += 1
        producer.poll(0)
    try:
        left = producer.flush(60)
    except KafkaException as exc:
        raise KappaError(f"producing to {topic} failed: {exc}") from exc
    if left or errors:
        raise KappaError(f"{left + len(errors)} of {counts.sent} records were not delivered to "
                         f"{topic} (first error: {errors[0] if errors else 'timeout'}); check "
                         "`kappa stack status`")
    return counts

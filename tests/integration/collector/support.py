"""Helpers for collector tests: a collector subprocess handle and a plain Kafka reader.

Expected values come from the generator's own knowledge of what it generated (ids, kinds) and
are compared with what a plain confluent-kafka consumer reads back from the broker.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from confluent_kafka import Consumer, TopicPartition

KAPPA = [sys.executable, "-m", "jobs.cli"]
READY_TIMEOUT_S = 30.0
_METRIC = re.compile(r"^(kappa_collector_[a-z_]+)(\{[^}]*\})?\s+(\S+)$", re.M)


@dataclass
class CollectorProcess:
    """A `kappa collect` subprocess and how to reach it."""

    proc: subprocess.Popen
    url: str
    log_path: Path
    output: Path
    env: dict[str, str] = field(repr=False)

    def metrics(self) -> dict[str, float]:
        """Unlabelled metrics by name (without the kappa_collector_ prefix)."""
        text = httpx.get(f"{self.url}/metrics", timeout=5).text
        return {m.group(1)[len("kappa_collector_"):]: float(m.group(3))
                for m in _METRIC.finditer(text) if not m.group(2)}

    def wait_drained(self, timeout_s: float = 60.0) -> dict[str, float]:
        """Wait until nothing is pending (accepted or rejected); return the metrics."""
        deadline = time.monotonic() + timeout_s
        while True:
            values = self.metrics()
            if values["pending"] == 0 and values["pending_rejects"] == 0:
                return values
            assert time.monotonic() < deadline, f"not drained in {timeout_s}s: {values}"
            time.sleep(0.1)

    def post_lines(self, lines: Sequence[bytes], client: httpx.Client | None = None) -> httpx.Response:
        """POST one JSON-lines batch."""
        body = b"\n".join(lines) + b"\n"
        poster = client or httpx
        return poster.post(f"{self.url}/rsvps", content=body, timeout=60,
                           headers={"content-type": "application/x-ndjson"})

    def stop(self, timeout_s: float = 60.0) -> tuple[int, str]:
        """SIGTERM, wait, return (exit code, combined output)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=timeout_s)
        return code, self.output.read_text(errors="replace")


_LISTENING = re.compile(r"collector listening on (http://[0-9.]+:[0-9]+)/rsvps")


def listening_url(collector: CollectorProcess) -> str:
    """The base URL the collector printed once it had bound its port."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        found = _LISTENING.search(collector.output.read_text(errors="replace"))
        if found:
            return found.group(1)
        if collector.proc.poll() is not None:
            raise AssertionError(f"collector exited with {collector.proc.returncode}: "
                                 f"{collector.output.read_text(errors='replace')}")
        time.sleep(0.05)
    raise AssertionError(f"collector printed no listening address in {READY_TIMEOUT_S}s: "
                         f"{collector.output.read_text(errors='replace')}")


def wait_ready(collector: CollectorProcess) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if collector.proc.poll() is not None:
            raise AssertionError(f"collector exited with {collector.proc.returncode}: "
                                 f"{collector.output.read_text(errors='replace')}")
        try:
            if httpx.get(f"{collector.url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"collector not ready in {READY_TIMEOUT_S}s: {collector.output.read_text()}")


@dataclass(frozen=True)
class Message:
    """One record read back from Kafka."""

    key: bytes | None
    value: bytes
    headers: dict[str, bytes]


def read_topic(props: dict[str, str], topic: str, timeout_s: float = 60.0) -> list[Message]:
    """Every record of a topic up to its current high watermarks, with a plain consumer."""
    consumer = Consumer({**props, "group.id": f"test-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "receive.message.max.bytes": 1_000_000_000})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        highs = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                 for p in partitions}
        positions = dict.fromkeys(partitions, 0)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions if highs[p] > 0])
        out: list[Message] = []
        deadline = time.monotonic() + timeout_s
        while any(positions[p] < highs[p] for p in partitions):
            assert time.monotonic() < deadline, f"{topic}: read {len(out)} of {sum(highs.values())}"
            for message in consumer.consume(10_000, 0.5):
                if message.error() is not None:
                    continue
                positions[message.partition()] = message.offset() + 1
                out.append(Message(message.key(), message.value(), dict(message.headers() or [])))
        return out
    finally:
        consumer.close()


def wait_for_records(props: dict[str, str], topic: str, count: int, timeout_s: float = 60.0) -> list[Message]:
    """Read the topic until it holds at least ``count`` records; fail when it does not in time."""
    deadline = time.monotonic() + timeout_s
    while True:
        messages = read_topic(props, topic)
        if len(messages) >= count:
            return messages
        assert time.monotonic() < deadline, (
            f"{topic} holds {len(messages)} records after {timeout_s}s, expected at least {count}")
        time.sleep(0.5)


REQUIRED = ("visibility", "response", "guests", "member", "rsvp_id", "mtime", "event", "group")
MAX_RECORD_BYTES = 65_536
_INVALID_JSON = re.compile(r"^invalid_json: (.+: line 1 column \d+ \(char \d+\)"
                           r"|'utf-8' codec can't decode byte 0x[0-9a-f]{2} in position \d+: .+)$")


def assert_reason(kind: str, line: bytes, reason: str) -> None:
    """The DLQ reason of a generated malformed line, written out by kind (code and detail)."""
    code = kind.removeprefix("malformed:")
    if code == "invalid_json":
        assert _INVALID_JSON.match(reason), reason
        return
    if code == "oversize":
        assert reason == f"oversize: {len(line)} bytes > max_record_bytes {MAX_RECORD_BYTES}"
        return
    record = json.loads(line)
    if code == "missing_field":
        (missing,) = [name for name in REQUIRED if name not in record]
        assert reason == f"missing_field: {missing}"
        return
    assert code == "wrong_type", kind
    (name,) = [name for name in ("rsvp_id", "mtime") if isinstance(record[name], str)]
    assert reason == f'wrong_type: {name} must be an integer, found string "{record[name]}"'


@contextmanager
def silent_port() -> Iterator[int]:
    """A loopback port held bound but not listening: nothing answers there while it is held."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]

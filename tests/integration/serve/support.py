"""Helpers of the serve tests: contract-shaped records, a producer, an SSE reader thread."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from confluent_kafka import Producer

BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def rsvp(n: int, city: str = "Barcelona", topics: tuple[str, ...] = ("Salsa",),
         **extra: Any) -> dict[str, Any]:
    """An rsvps.analyzed record as docs/streaming.md specifies it (schema_version 1)."""
    return {"schema_version": 1, "rsvp_id": 1_800_000_000 + n, "event_time_ms": BASE_MS + n,
            "event_time": "2026-01-01T00:00:00.000Z", "event_id": f"ev{n % 7}",
            "event_name": f"Event {n % 7}", "group_id": 123, "group_name": "g", "member_id": 10_000 + n,
            "response": "yes", "guests": 0, "topics": list(topics), "city": city, "country": "ES",
            "state": None, "lat": 41.36, "lon": 2.15, "venue_id": 1, "source_topic": "rsvps.raw",
            "source_partition": 0, "source_offset": n, "kafka_timestamp_ms": BASE_MS + n,
            "ingest_lag_ms": 0, "late": False, "n": n, **extra}


def city_summary(start: int, city: str, count: int, batch_id: int = 1) -> dict[str, Any]:
    return {"schema_version": 1, "kind": "city_window", "key": f"city_window/{start}/{city}",
            "window_start_ms": start, "window_end_ms": start + 60_000, "city": city, "count": count,
            "query": "rsvps-live", "batch_id": batch_id, "emitted_ms": BASE_MS}


def topics_summary(kind: str, items: list[tuple[str, int]], start: int | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"schema_version": 1, "kind": kind, "items": [
        {"item": name, "count": count, "error": 0} for name, count in items],
        "query": "rsvps-live", "batch_id": 1, "emitted_ms": BASE_MS}
    if start is None:
        body["key"] = "top_topics"
    else:
        body.update(key=f"trending/{start}", window_start_ms=start, window_end_ms=start + 600_000)
    return body


class Sender:
    """Produce JSON records (partition = n % partitions unless given); returns acked positions."""

    def __init__(self, props: dict[str, str]) -> None:
        self.producer = Producer({**props, "linger.ms": 2})

    def send(self, topic: str, records: list[dict[str, Any]], partitions: int = 3,
             key: str = "event_id") -> list[tuple[int, int]]:
        acked: list[tuple[int, int]] = []
        errors: list[Any] = []

        def report(err: Any, msg: Any) -> None:
            (errors.append(err) if err else acked.append((msg.partition(), msg.offset())))

        for i, record in enumerate(records):
            part = record.get("n", i) % partitions
            self.producer.produce(topic, json.dumps(record).encode(), str(record.get(key, i)).encode(),
                                  partition=part, on_delivery=report)
        assert self.producer.flush(15) == 0
        assert not errors, errors
        return acked


@dataclass
class SseEvent:
    event: str
    id: str | None
    data: dict[str, Any]
    received: float = 0.0


@dataclass
class SseReader:
    """Reads an SSE stream on a thread until stopped; events land in ``events``."""

    url: str
    headers: dict[str, str] = field(default_factory=dict)
    events: list[SseEvent] = field(default_factory=list)
    status_code: int | None = None
    ended: bool = False

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            with httpx.Client(timeout=httpx.Timeout(5, read=None)) as client, \
                    client.stream("GET", self.url, headers=self.headers) as response:
                self.status_code = response.status_code
                self._response = response
                self._read(response)
        except (httpx.HTTPError, OSError, RuntimeError, AttributeError):
            pass  # closed by stop(), or by the server
        self.ended = True

    def _read(self, response: httpx.Response) -> None:
        event, eid, data = "message", None, []
        for line in response.iter_lines():
            if self._stop.is_set():
                return
            if line == "":
                if data:
                    self.events.append(SseEvent(event, eid, json.loads("\n".join(data)), time.time()))
                event, eid, data = "message", None, []
            elif line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("id:"):
                eid = line[3:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())

    def of(self, kind: str) -> list[SseEvent]:
        return [e for e in self.events if e.event == kind]

    def wait_for(self, predicate: Any, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate(self):
            if time.monotonic() > deadline:
                tail = [(e.event, e.data.get("n", e.data.get("status"))) for e in self.events[-5:]]
                raise AssertionError(f"timed out; got {len(self.events)} events, last {tail}")
            time.sleep(0.02)

    def last_id(self) -> str:
        return [e.id for e in self.events if e.id][-1]

    def stop(self) -> None:
        """Disconnect now: the events kept are those received before the call."""
        self._stop.set()
        response = getattr(self, "_response", None)
        if response is not None:
            sock = response.extensions["network_stream"].get_extra_info("socket")
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=5)


def threads_cpu_s(pid: int, prefixes: tuple[str, ...] = ("",), skip: tuple[str, ...] = ()) -> float:
    """CPU seconds (user + system) of a process's threads whose names start with a prefix."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
            fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the thread ended meanwhile
        if name.startswith(prefixes) and not (skip and name.startswith(skip)):
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def group_pids(pgid: int) -> list[int]:
    """The processes of a process group (the embedded broker: wrapper and server)."""
    pids = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            if int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[2]) == pgid:
                pids.append(int(entry))
        except OSError:
            continue
    return pids

"""A client that never reads does not slow the others; it is disconnected per the policy."""

from __future__ import annotations

import socket
import time
from urllib.parse import urlparse

import httpx

from tests.integration.serve.support import SseReader, rsvp

FILLER = "x" * 8_000  # 8 KB records: ~520 fill the kernel's 4 MB send buffer to a client
SEND_TIMEOUT_S = 5.0
BURST = 500


def deliver(sender, topic: str, reader: SseReader, start: int, count: int) -> float:
    """Produce ``count`` records and return the seconds until the reader has all of them."""
    began = time.perf_counter()
    sender.send(topic, [rsvp(n, filler=FILLER) for n in range(start, start + count)])
    reader.wait_for(lambda r: len(r.of("rsvp")) >= start + count, timeout=30)
    return time.perf_counter() - began


def never_reading_client(url: str) -> socket.socket:
    parts = urlparse(url)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((parts.hostname, parts.port))
    sock.sendall(f"GET {parts.path}?{parts.query} HTTP/1.1\r\nHost: {parts.netloc}\r\n\r\n".encode())
    return sock


def metric(url: str, name: str) -> float:
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_slow_client_does_not_slow_the_others(start_serve, sender, serve_topics):
    server = start_serve(client_buffer=1500, consumer_batch=100, send_timeout_s=SEND_TIMEOUT_S)
    url = f"{server.url}/api/v1/stream?stream=analyzed"
    topic = serve_topics["analyzed"]
    fast = SseReader(url)
    fast.wait_for(lambda r: r.of("status"))
    alone = [deliver(sender, topic, fast, i * BURST, BURST) for i in range(2)]

    slow = never_reading_client(url)
    try:
        deadline = time.monotonic() + 5
        while metric(server.url, 'kappa_serve_clients{transport="sse"}') < 2:
            assert time.monotonic() < deadline, "the slow client never connected"
            time.sleep(0.05)
        beside = [deliver(sender, topic, fast, i * BURST, BURST) for i in range(2, 7)]
        print(f"\nslow-client test: bursts of {BURST} x 8 KB events reached the fast client in "
              f"{[round(s, 2) for s in alone]} s alone and {[round(s, 2) for s in beside]} s beside a "
              f"client that never reads (client_buffer 1500, send timeout {SEND_TIMEOUT_S}s)")
        # Blocking on the slow client would stall the fast one for the whole send timeout.
        assert max(beside) < SEND_TIMEOUT_S
        assert sorted(beside)[2] < max(3 * max(alone), max(alone) + 1.5)
        numbers = [e.data["n"] for e in fast.of("rsvp")]
        assert sorted(numbers) == list(range(7 * BURST)) and len(set(numbers)) == 7 * BURST
        assert not [e for e in fast.of("status") if e.data["status"] != "connected"]

        deadline = time.monotonic() + SEND_TIMEOUT_S + 10
        while metric(server.url, 'kappa_serve_clients{transport="sse"}') > 1:
            assert time.monotonic() < deadline, "the slow client was never disconnected"
            time.sleep(0.1)
        assert metric(server.url, "kappa_serve_client_overflows_total") == 1
    finally:
        slow.close()
        fast.stop()

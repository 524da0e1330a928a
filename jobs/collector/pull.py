"""Stream pull: JSON lines from a file, stdin, an HTTP (chunked) URL or a WebSocket URL.

A reader thread turns the source into chunks of lines; the pull loop batches them (up to
``PULL_BATCH`` lines or ``PULL_LINGER_S`` seconds), submits each batch to the collector and
waits for the log commit before counting it. When the buffer is full the loop stops reading,
so the source is slowed down (TCP backpressure) instead of answered with errors. URL sources
are long-lived connections: on error or end of stream they reconnect with exponential backoff
and full jitter, resetting the backoff once a connection delivered data.
"""

from __future__ import annotations

import logging
import queue
import random
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from jobs.collector.service import Collector
from jobs.errors import KappaError

logger = logging.getLogger(__name__)

SCHEMES = ("ws", "wss", "http", "https")
PULL_BATCH = 1_000
PULL_LINGER_S = 0.1
MAX_OUTSTANDING = 4
FILE_CHUNK_BYTES = 1 << 20
QUEUE_CHUNKS = 64
BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 30.0
WS_RECV_TIMEOUT_S = 1.0
_END = None


class PullError(KappaError):
    """A stream source is invalid or unreadable."""

    exit_code = 2


@dataclass
class PullCounts:
    """Lines read from the source and how the collector answered them."""

    read: int = 0
    accepted: int = 0
    rejected: int = 0


def validate_url(url: str) -> str:
    """Return the URL if its scheme is ws, wss, http or https and it names a host."""
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES or not parts.hostname:
        raise PullError(f"--url must be a ws://, wss://, http:// or https:// URL with a host, got "
                        f"{url!r}; for a file use --file PATH, for standard input --stdin")
    return url


class Backoff:
    """Exponential backoff with full jitter: a uniform delay up to base * 2**n, capped."""

    def __init__(self, base_s: float = BACKOFF_BASE_S, cap_s: float = BACKOFF_CAP_S,
                 rng: random.Random | None = None) -> None:
        self.base_s, self.cap_s = base_s, cap_s
        self.failures = 0
        self._rng = rng or random.Random()

    def next_delay(self) -> float:
        """The delay before the next attempt (grows with each call until reset)."""
        ceiling = min(self.cap_s, self.base_s * 2 ** self.failures)
        self.failures += 1
        return self._rng.uniform(0, ceiling)

    def reset(self) -> None:
        """Forget past failures (after a connection delivered data)."""
        self.failures = 0


def file_chunks(path: Path) -> Iterator[list[bytes]]:
    """Chunks of lines of a JSON-lines file."""
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise PullError(f"cannot read --file {path}: {exc.strerror}; check the path") from None
    with handle:
        while chunk := handle.readlines(FILE_CHUNK_BYTES):
            yield chunk


def stdin_chunks() -> Iterator[list[bytes]]:
    """Lines of standard input, one at a time (a pipe may be slow)."""
    for line in sys.stdin.buffer:
        yield [line]


def url_chunks(url: str, stop: threading.Event, backoff: Backoff | None = None) -> Iterator[list[bytes]]:
    """Lines of a long-lived stream, reconnecting until ``stop`` is set."""
    backoff = backoff or Backoff()
    reader = _websocket_chunks if urlsplit(url).scheme in ("ws", "wss") else _http_chunks
    while not stop.is_set():
        try:
            for chunk in reader(url, stop):
                backoff.reset()
                yield chunk
            problem = "ended"
        except Exception as exc:
            problem = f"failed ({type(exc).__name__}: {exc})"
        delay = backoff.next_delay()
        logger.warning("stream %s %s; reconnecting in %.1fs", url, problem, delay)
        stop.wait(delay)


def _http_chunks(url: str, stop: threading.Event) -> Iterator[list[bytes]]:
    import httpx

    timeout = httpx.Timeout(10.0, read=None)
    with httpx.stream("GET", url, timeout=timeout) as response:
        response.raise_for_status()
        rest = b""
        for data in response.iter_raw():
            lines = (rest + data).split(b"\n")
            rest = lines.pop()
            if lines:
                yield lines
            if stop.is_set():
                return
        if rest.strip():
            yield [rest]


def _websocket_chunks(url: str, stop: threading.Event) -> Iterator[list[bytes]]:
    from websockets.exceptions import ConnectionClosedOK
    from websockets.sync.client import connect

    with connect(url, max_size=None, open_timeout=10) as socket:
        while not stop.is_set():
            try:
                message = socket.recv(timeout=WS_RECV_TIMEOUT_S)
            except TimeoutError:
                continue
            except ConnectionClosedOK:
                return
            data = message.encode() if isinstance(message, str) else message
            yield data.split(b"\n")


def pull(collector: Collector, chunks: Iterator[list[bytes]], source: str, stop: threading.Event,
         counts: PullCounts | None = None) -> PullCounts:
    """Feed every line of ``chunks`` to the collector until the source ends or ``stop`` is set."""
    counts = counts or PullCounts()
    lines: queue.Queue[list[bytes] | None] = queue.Queue(maxsize=QUEUE_CHUNKS)
    threading.Thread(target=_read_into, args=(chunks, lines, stop), daemon=True,
                     name="collector-pull-reader").start()
    outstanding: deque = deque()
    batch: list[bytes] = []
    deadline = time.monotonic() + PULL_LINGER_S
    while not stop.is_set():
        try:
            chunk = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            chunk = []
        if chunk is _END:
            break
        batch.extend(line for line in (raw.strip() for raw in chunk) if line)
        if len(batch) >= PULL_BATCH or time.monotonic() >= deadline:
            _submit(collector, batch, source, stop, outstanding=outstanding, counts=counts)
            batch, deadline = [], time.monotonic() + PULL_LINGER_S
    while True:  # after a stop, keep what the reader already took from the source
        try:
            chunk = lines.get_nowait()
        except queue.Empty:
            break
        batch.extend(line for line in (raw.strip() for raw in chunk or []) if line)
    _submit(collector, batch, source, stop, outstanding=outstanding, counts=counts)
    while outstanding:
        _count(outstanding.popleft().result(), counts)
    return counts


def _read_into(chunks: Iterator[list[bytes]], lines: queue.Queue, stop: threading.Event) -> None:
    try:
        for chunk in chunks:
            while not stop.is_set():
                try:
                    lines.put(chunk, timeout=0.5)
                    break
                except queue.Full:
                    continue
            if stop.is_set():
                return
    except PullError as exc:
        logger.error("%s", exc)
    except Exception:
        logger.exception("stream reader stopped")
    lines.put(_END)


def _submit(collector: Collector, batch: list[bytes], source: str, stop: threading.Event, *,
            outstanding: deque, counts: PullCounts) -> None:
    if not batch:
        return
    while collector.full() and not stop.is_set():
        time.sleep(0.1)
    counts.read += len(batch)
    outstanding.append(collector.submit_lines(batch, source))
    while len(outstanding) > MAX_OUTSTANDING or (outstanding and outstanding[0].done()):
        _count(outstanding.popleft().result(), counts)


def _count(outcomes: list, counts: PullCounts) -> None:
    rejected = sum(1 for outcome in outcomes if outcome.error is not None)
    counts.rejected += rejected
    counts.accepted += len(outcomes) - rejected


"""Connection-level limits of the collector's HTTP server: timeouts and a connection limit.

uvicorn has a keep-alive timeout between requests but none while a request arrives, so a client
sending a header byte every few seconds, or a body that never ends, would hold its connection
(and its buffers) forever. :func:`guarded_protocol` returns uvicorn's httptools protocol with:

- a **header deadline**: the request line and headers must be complete ``header_timeout_s``
  after the connection opened (first request) or after its first byte (later requests);
  otherwise ``408`` and close;
- a **body deadline**: the body must be complete ``body_timeout_s`` after the headers;
  otherwise ``408`` (if no answer was started) and close;
- a **connection limit**: a connection beyond ``max_connections`` open ones is answered ``503``
  with ``Retry-After`` and closed at once.
"""

from __future__ import annotations

import asyncio
import logging

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from jobs.collector.service import HttpLimits

logger = logging.getLogger(__name__)

REFUSED_RETRY_AFTER_S = 1


def _raw_response(status: str, text: str, extra: str = "") -> bytes:
    body = text.encode()
    return (f"HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\n{extra}"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode() + body


def guarded_protocol(limits: HttpLimits) -> type[asyncio.Protocol]:
    """The HTTP protocol class (uvicorn's httptools one) with the limits of ``limits``."""

    class GuardedProtocol(HttpToolsProtocol):
        _deadline: asyncio.TimerHandle | None = None
        _refused = False

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                self._refused = True
                logger.warning("refused a connection: %d open >= max_connections %d",
                               len(self.connections) - 1, limits.max_connections)
                transport.write(_raw_response(
                    "503 Service Unavailable", f"too many connections (max_connections "
                    f"{limits.max_connections}); retry later\n",
                    f"retry-after: {REFUSED_RETRY_AFTER_S}\r\n"))
                transport.close()
                return
            self._arm(limits.header_timeout_s, "request headers")

        def data_received(self, data: bytes) -> None:
            if not self._refused:
                super().data_received(data)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._deadline is None:
                self._arm(limits.header_timeout_s, "request headers")

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()
            self._arm(limits.body_timeout_s, "request body")

        def on_message_complete(self) -> None:
            self._disarm()
            super().on_message_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self, seconds: float, what: str) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(seconds, self._expired, seconds, what)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expired(self, seconds: float, what: str) -> None:
            self._deadline = None
            if self.transport.is_closing():
                return
            logger.info("closing a connection: %s not complete within %gs", what, seconds)
            if self.cycle is None or not self.cycle.response_started:
                self.transport.write(_raw_response(
                    "408 Request Timeout", f"{what} not complete within {seconds:g}s\n"))
            if self.cycle is not None:
                self.cycle.disconnected = True  # the application's answer, if any, goes nowhere
            self.transport.close()

    return GuardedProtocol

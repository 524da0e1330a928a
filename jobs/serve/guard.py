"""ASGI middleware in front of every route: bearer-token auth, REST rate limits, request metrics.

Auth is on when the service has a token (from the environment variable ``serve.auth_token_env``).
Clients send ``Authorization: Bearer <token>``; browsers' EventSource and WebSocket cannot set
headers, so ``?access_token=<token>`` is accepted too. ``/healthz`` and the dashboard page stay
open (the page asks for the token and passes it on).
"""

from __future__ import annotations

import hmac
import json
import time
from typing import Any
from urllib.parse import parse_qs

from jobs.serve.service import Service

OPEN_PATHS = frozenset({"/healthz", "/", "/dashboard", "/favicon.ico"})
RATE_LIMITED_PREFIX = "/api/v1/"
STREAM_PATHS = frozenset({"/api/v1/stream", "/api/v1/ws"})
MAX_TRACKED_CLIENTS = 10_000

Scope = dict[str, Any]


class Guard:
    """Auth, rate limit and metrics around the application."""

    def __init__(self, app: Any, service: Service) -> None:
        self.app, self.service = app, service
        self.buckets: dict[str, tuple[float, float]] = {}

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        """Refuse, or pass the request on (REST requests measured)."""
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        refusal = self._refusal(scope, path)
        if refusal is not None:
            status, reason, message = refusal
            self.service.metrics.rejected.labels(reason).inc()
            await _refuse(scope, send, status, message)
            return
        if scope["type"] == "websocket" or path in STREAM_PATHS:
            await self.app(scope, receive, send)
            return
        await self._measured(scope, receive, send)

    def _refusal(self, scope: Scope, path: str) -> tuple[int, str, str] | None:
        token = self.service.token
        if token is not None and path not in OPEN_PATHS:
            given = _bearer(scope)
            if given is None or not hmac.compare_digest(given.encode(), token.get_secret_value().encode()):
                return 401, "auth", ("missing or wrong bearer token: send 'Authorization: Bearer <token>' "
                                     "(or ?access_token=<token> from a browser)")
        if path.startswith(RATE_LIMITED_PREFIX) and path not in STREAM_PATHS and not self._admit(scope):
            return 429, "rate_limit", (f"more than {self.service.cfg.serve.rate_limit_per_s:g} requests/s "
                                       "from this address (serve.rate_limit_per_s); slow down")
        return None

    def _admit(self, scope: Scope) -> bool:
        serve = self.service.cfg.serve
        client = (scope.get("client") or ("?", 0))[0]
        now = time.monotonic()
        tokens, last = self.buckets.get(client, (float(serve.rate_limit_burst), now))
        tokens = min(float(serve.rate_limit_burst), tokens + (now - last) * serve.rate_limit_per_s)
        if len(self.buckets) > MAX_TRACKED_CLIENTS:
            self.buckets.clear()
        if tokens < 1:
            self.buckets[client] = (tokens, now)
            return False
        self.buckets[client] = (tokens - 1, now)
        return True

    async def _measured(self, scope: Scope, receive: Any, send: Any) -> None:
        """Count and time the request by its route's path template (the path when none matched)."""
        status = {"code": 500}

        async def capture(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        started = time.perf_counter()
        try:
            await self.app(scope, receive, capture)
        finally:
            # the router put the matched route in the scope: its template keeps the label's values few
            route = getattr(scope.get("route"), "path", scope["path"])
            metrics = self.service.metrics
            metrics.requests.labels(route, str(status["code"])).inc()
            metrics.latency.labels(route).observe(time.perf_counter() - started)


def _bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, credentials = value.decode("latin-1").partition(" ")
            return credentials.strip() if scheme.lower() == "bearer" else None
    values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("access_token")
    return values[0] if values else None


async def _refuse(scope: Scope, send: Any, status: int, message: str) -> None:
    if scope["type"] == "websocket":
        if "websocket.http.response" not in scope.get("extensions", {}):
            await send({"type": "websocket.close", "code": 1008, "reason": message[:120]})
            return
        await send({"type": "websocket.http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "websocket.http.response.body", "body": json.dumps({"error": message}).encode()})
        return
    headers = [(b"content-type", b"application/json")]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    if status == 429:
        headers.append((b"retry-after", b"1"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": json.dumps({"error": message}).encode()})

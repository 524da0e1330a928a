"""The collector's HTTP API (Starlette): POST records, GET /metrics, GET /healthz.

``POST /records`` (also at the pipeline's own path, ``Settings.post_path``) takes one JSON
object, a JSON array, or JSON lines (``Content-Type: application/x-ndjson``). It answers only
after every record of the request is committed to the durable log. A single record gets
``200 {"id": n}``, ``400`` (invalid) or ``413`` (oversize); a batch gets per-record results with
``200`` (all accepted), ``207`` (some) or ``400`` (none). A body that holds bytes but no record
(``[]``) is one rejected record (``empty_batch``), so it reaches the dead-letter topic like any
other content the collector refuses. ``503`` with ``Retry-After`` means the buffer is full (or
the collector is stopping, the log cannot be written, or other uploads fill the body budget):
nothing of that request was logged, send it again. Refused before the content is judged, and so
answered only: ``401`` (a bearer token is configured and missing or wrong), ``413`` (body over
``max_body_bytes``: read no further, never buffered past the cap), an empty body (``400``).
Array elements are re-encoded compactly; JSON lines and single objects keep their bytes. The
connection-level limits (header and body timeouts, connection limit) are in
:mod:`jobs.collector.guard`.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from jobs.collector import metrics
from jobs.collector.log import LogError
from jobs.collector.service import Collector
from jobs.pipelines.structure import (
    EMPTY_BATCH,
    INVALID_JSON,
    MAX_NESTING,
    OVERSIZE,
    STRICT_DECODER,
    TOO_DEEP,
    RecordCheck,
    StructureCheck,
    check_structure,
    parser_limits,
)

LINES_TYPES = ("ndjson", "jsonl", "jsonlines", "json-seq")
LOG_ERROR_RETRY_AFTER_S = 30
BODY_BUDGET_BODIES = 4
"""Request bytes held in memory at once, across requests, in bodies of ``max_body_bytes``."""
BUSY_RETRY_AFTER_S = 1

Checked = list[tuple[bytes, StructureCheck]]


def parse_body(body: bytes, content_type: str, max_record_bytes: int,
               check: RecordCheck) -> tuple[Checked, bool]:
    """Split a request body into records checked by the pipeline's ``check``; return them, and batch or not.

    Raises:
        ValueError: the body is empty (nothing to keep).
    """
    text = body.strip()
    if not text:
        raise ValueError("empty request body: send a JSON object, a JSON array or JSON lines")
    if any(kind in content_type for kind in LINES_TYPES):
        records = [line for line in (line.strip() for line in text.split(b"\n")) if line]
        return [(raw, check_structure(raw, max_record_bytes, check)) for raw in records], True
    if not text.startswith(b"["):
        return [(text, check_structure(text, max_record_bytes, check))], False
    unsafe = parser_limits(text, MAX_NESTING + 1)  # the array itself is one level
    if unsafe is not None:
        if unsafe.startswith(TOO_DEEP):
            unsafe = f"{TOO_DEEP}: arrays and objects nested deeper than {MAX_NESTING} levels"
        return [(text, StructureCheck(None, f"{unsafe} (the array is judged as one document; "
                                            "send JSON lines to have each record judged alone)"))], False
    try:
        items = STRICT_DECODER.decode(text.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        return [(text, StructureCheck(None, f"{INVALID_JSON}: {exc}"))], False
    if not items:
        return [(text, StructureCheck(None, f"{EMPTY_BATCH}: a JSON array without records"))], False
    return [_element(item, max_record_bytes, check) for item in items], True


def _element(item: Any, max_record_bytes: int, check: RecordCheck) -> tuple[bytes, StructureCheck]:
    try:
        raw = json.dumps(item, ensure_ascii=False, separators=(",", ":")).encode()
    except UnicodeEncodeError:  # a lone surrogate (\ud800) has no UTF-8 form: keep it escaped
        raw = json.dumps(item, separators=(",", ":")).encode()
    if len(raw) > max_record_bytes:
        return raw, StructureCheck(None, f"{OVERSIZE}: {len(raw)} bytes > max_record_bytes "
                                         f"{max_record_bytes}")
    return raw, check(item)


def build_app(collector: Collector) -> Starlette:
    """The ASGI application of one collector."""
    paths = dict.fromkeys((collector.settings.post_path, "/records"))
    app = Starlette(routes=[
        *(Route(path, post_records, methods=["POST"]) for path in paths),
        Route("/metrics", get_metrics, methods=["GET"]),
        Route("/healthz", get_health, methods=["GET"]),
    ])
    app.state.collector = collector
    app.state.budget = BodyBudget(BODY_BUDGET_BODIES * collector.settings.http.max_body_bytes)
    return app


class BodyBudget:
    """Request body bytes held in memory by all requests together (one event loop: no lock)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    def take(self, size: int) -> bool:
        """Reserve ``size`` bytes; False (nothing reserved) when that would pass the limit."""
        if self.held + size > self.limit:
            return False
        self.held += size
        return True

    def give(self, size: int) -> None:
        """Return reserved bytes."""
        self.held -= size


async def post_records(request: Request) -> Response:
    """Log the records of the request durably, then answer."""
    collector: Collector = request.app.state.collector
    limits = collector.settings.http
    if limits.token is not None and not _authorized(request, limits.token):
        return JSONResponse({"error": f"missing or wrong bearer token: send Authorization: Bearer "
                                      f"<the value of {limits.token_env}>"}, status_code=401,
                            headers={"WWW-Authenticate": "Bearer"})
    if collector.stopping or collector.full():
        reason = "collector is stopping" if collector.stopping else (
            f"buffer full: {collector.pending} records pending >= buffer_limit "
            f"{collector.settings.buffer_limit}")
        return _unavailable(reason, collector.retry_after_s())
    budget: BodyBudget = request.app.state.budget
    body = await _read_body(request, limits.max_body_bytes, budget)
    try:
        if body.refusal is not None:
            return body.refusal
        return await _log_and_answer(collector, body.data, request.headers.get("content-type", ""))
    finally:
        budget.give(body.held)


async def _log_and_answer(collector: Collector, body: bytes, content_type: str) -> Response:
    try:
        checked, batch = parse_body(body, content_type, collector.settings.max_record_bytes,
                                    collector.settings.record_check)
    except ValueError as exc:
        return JSONResponse({"error": str(exc)}, status_code=400)
    try:
        outcomes = await asyncio.wrap_future(collector.submit(checked, "http"))
    except LogError as exc:
        return _unavailable(str(exc), LOG_ERROR_RETRY_AFTER_S)
    if not batch:
        return JSONResponse(outcomes[0].as_json(), status_code=outcomes[0].status)
    rejected = sum(1 for outcome in outcomes if outcome.error is not None)
    status = 200 if not rejected else (400 if rejected == len(outcomes) else 207)
    return JSONResponse({"accepted": len(outcomes) - rejected, "rejected": rejected,
                         "results": [outcome.as_json() for outcome in outcomes]}, status_code=status)


async def get_metrics(request: Request) -> Response:
    """Prometheus text format."""
    snapshot = request.app.state.collector.snapshot()
    return Response(metrics.render(snapshot), media_type=metrics.CONTENT_TYPE)


async def get_health(request: Request) -> Response:
    """200 while the collector can accept records (broker reachability is reported, not required)."""
    collector: Collector = request.app.state.collector
    log_error, pump_error = collector.writer.error, collector.pump.error
    healthy = log_error is None and pump_error is None and not collector.stopping
    return JSONResponse({"status": "ok" if healthy else "unavailable", "broker_up": collector.pump.broker_up,
                         "pending": collector.pending, "buffer_limit": collector.settings.buffer_limit,
                         "log_error": log_error, "pump_error": pump_error},
                        status_code=200 if healthy else 503)


def _authorized(request: Request, token: str) -> bool:
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


@dataclass
class _Body:
    """A request body (``data``), or the answer that refuses it; ``held`` budget bytes."""

    data: bytes = b""
    held: int = 0
    refusal: Response | None = None


async def _read_body(request: Request, cap: int, budget: BodyBudget) -> _Body:
    """Read the body chunk by chunk, never holding more than ``cap`` bytes of it.

    A body over the cap (declared or not) gets 413 at the chunk that passes it; the server
    drops the rest as it arrives. When the bodies of all requests would pass the budget, 503.
    """
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        return _Body(refusal=_too_large(cap))
    chunks: list[bytes] = []
    held = 0
    try:
        async for chunk in request.stream():
            if held + len(chunk) > cap:
                budget.give(held)
                return _Body(refusal=_too_large(cap))
            if not budget.take(len(chunk)):
                budget.give(held)
                return _Body(refusal=_unavailable(
                    f"busy: request bodies being received hold {budget.held} of {budget.limit} "
                    "bytes", BUSY_RETRY_AFTER_S))
            held += len(chunk)
            chunks.append(chunk)
    except ClientDisconnect:
        budget.give(held)
        return _Body(refusal=Response(status_code=400))  # the client left; nobody reads this
    return _Body(b"".join(chunks), held)


def _too_large(cap: int) -> Response:
    return JSONResponse({"error": f"request body larger than max_body_bytes {cap}: split the batch"},
                        status_code=413)


def _unavailable(reason: str, retry_after_s: int) -> Response:
    return JSONResponse({"error": reason, "retry_after_s": retry_after_s}, status_code=503,
                        headers={"Retry-After": str(retry_after_s)})

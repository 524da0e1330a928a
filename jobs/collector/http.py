"""The collector's HTTP API (Starlette): POST records, GET /metrics, GET /healthz.

``POST /rsvps`` takes one JSON object, a JSON array, or JSON lines (``Content-Type:
application/x-ndjson``). It answers only after every record of the request is committed to
the durable log. A single record gets ``200 {"id": n}``, ``400`` (invalid) or ``413``
(oversize); a batch gets per-record results with ``200`` (all accepted), ``207`` (some) or
``400`` (none). ``503`` with ``Retry-After`` means the buffer is full (or the collector is
stopping, or the log cannot be written): nothing of that request was logged, send it again.
Array elements are re-encoded compactly; JSON lines and single objects keep their bytes.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from jobs.collector import metrics
from jobs.collector.log import LogError
from jobs.collector.service import Collector
from jobs.common.rsvp_schema import INVALID_JSON, OVERSIZE, StructureCheck, check_record, check_structure

MAX_BODY_BYTES = 64 * 1024 * 1024
LINES_TYPES = ("ndjson", "jsonl", "jsonlines", "json-seq")
LOG_ERROR_RETRY_AFTER_S = 30

Checked = list[tuple[bytes, StructureCheck]]


def parse_body(body: bytes, content_type: str, max_record_bytes: int) -> tuple[Checked, bool]:
    """Split a request body into checked records; return them and whether it was a batch.

    Raises:
        ValueError: the body holds no record at all.
    """
    if any(kind in content_type for kind in LINES_TYPES):
        lines = [line.strip() for line in body.split(b"\n")]
        records = [line for line in lines if line]
        if not records:
            raise ValueError("empty request body: send JSON lines, one record per line")
        return [(raw, check_structure(raw, max_record_bytes)) for raw in records], True
    text = body.strip()
    if not text:
        raise ValueError("empty request body: send a JSON object, a JSON array or JSON lines")
    if not text.startswith(b"["):
        return [(text, check_structure(text, max_record_bytes))], False
    try:
        items = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        return [(text, StructureCheck(None, f"{INVALID_JSON}: {exc}"))], False
    if not items:
        raise ValueError("empty JSON array: send at least one record")
    return [_element(item, max_record_bytes) for item in items], True


def _element(item: Any, max_record_bytes: int) -> tuple[bytes, StructureCheck]:
    raw = json.dumps(item, ensure_ascii=False, separators=(",", ":")).encode()
    if len(raw) > max_record_bytes:
        return raw, StructureCheck(None, f"{OVERSIZE}: {len(raw)} bytes > max_record_bytes "
                                         f"{max_record_bytes}")
    return raw, check_record(item)


def build_app(collector: Collector) -> Starlette:
    """The ASGI application of one collector."""
    app = Starlette(routes=[
        Route("/rsvps", post_records, methods=["POST"]),
        Route("/metrics", get_metrics, methods=["GET"]),
        Route("/healthz", get_health, methods=["GET"]),
    ])
    app.state.collector = collector
    return app


async def post_records(request: Request) -> Response:
    """Log the records of the request durably, then answer."""
    collector: Collector = request.app.state.collector
    if collector.stopping or collector.full():
        reason = "collector is stopping" if collector.stopping else (
            f"buffer full: {collector.pending} records pending >= buffer_limit "
            f"{collector.settings.buffer_limit}")
        return _unavailable(reason, collector.retry_after_s())
    body = await _read_body(request)
    if body is None:
        return JSONResponse({"error": f"request body larger than {MAX_BODY_BYTES} bytes: split the "
                                      "batch"}, status_code=413)
    try:
        checked, batch = parse_body(body, request.headers.get("content-type", ""),
                                    collector.settings.max_record_bytes)
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
    return PlainTextResponse(metrics.render(snapshot), media_type="text/plain; version=0.0.4")


async def get_health(request: Request) -> Response:
    """200 while the collector can accept records (broker reachability is reported, not required)."""
    collector: Collector = request.app.state.collector
    log_error, pump_error = collector.writer.error, collector.pump.error
    healthy = log_error is None and pump_error is None and not collector.stopping
    return JSONResponse({"status": "ok" if healthy else "unavailable", "broker_up": collector.pump.broker_up,
                         "pending": collector.pending, "buffer_limit": collector.settings.buffer_limit,
                         "log_error": log_error, "pump_error": pump_error},
                        status_code=200 if healthy else 503)


async def _read_body(request: Request) -> bytes | None:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        return None
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                return None
            chunks.append(chunk)
    except ClientDisconnect:
        return b""
    return b"".join(chunks)


def _unavailable(reason: str, retry_after_s: int) -> Response:
    return JSONResponse({"error": reason, "retry_after_s": retry_after_s}, status_code=503,
                        headers={"Retry-After": str(retry_after_s)})

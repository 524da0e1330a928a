"""Server-sent events and WebSocket endpoints over the hub (docs/api.md, "Streams")."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import Response
from sse_starlette.sse import EventSourceResponse, SendTimeoutError

from jobs.errors import KappaError
from jobs.serve import positions, session
from jobs.serve.errors import ErrorBody, error_response
from jobs.serve.hub import Subscriber
from jobs.serve.records import Dimension, Filter, Record, Status, StreamShape
from jobs.serve.service import Service

logger = logging.getLogger(__name__)
RETRY_MS = 1000
WS_POLICY_VIOLATION = 1008
WS_TRY_AGAIN_LATER = 1013

StreamParam = Annotated[list[str] | None, Query(alias="stream",
                        description="analyzed and/or summaries (repeat or comma-separate); default both")]
ResumeParam = Annotated[str | None, Query(
    description="resume after this event id (for clients that cannot send Last-Event-ID)")]


class _EventStream(EventSourceResponse):
    """An SSE response whose send timeout ends the connection quietly (the disconnect policy)."""

    def __init__(self, *args: Any, service: Service, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.service = service

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        except* SendTimeoutError:
            self.service.metrics.send_timeouts.inc()
            logger.info("sse client %s accepted nothing for %.1fs; disconnected", scope.get("client"),
                        self.service.cfg.serve.send_timeout_s)


def _service(scope_app: Any) -> Service:
    return scope_app.state.service


def router(shape: StreamShape) -> APIRouter:
    """The SSE and WebSocket endpoints, taking the followed pipeline's filter dimensions."""
    api = APIRouter(tags=["streams"])
    events = (f"SSE: `{shape.event}` (analyzed) and `summary` events (id = Kafka position vector) "
              "and `status`")
    api.add_api_route(
        "/api/v1/stream", sse_stream, methods=["GET"], response_class=EventSourceResponse,
        openapi_extra={"parameters": [_parameter(d) for d in shape.dimensions]}, responses={
            200: {"content": {"text/event-stream": {}}, "description": events},
            400: {"model": ErrorBody,
                  "description": "bad filter, or a Last-Event-ID that is no position of the log"},
            503: {"model": ErrorBody, "description": "client limit reached"}})
    api.add_api_websocket_route("/api/v1/ws", ws_stream)
    return api


def _parameter(dimension: Dimension) -> dict[str, Any]:
    """The OpenAPI description of a filter dimension's query parameter."""
    described = dimension.description or f"one of the {dimension.plural}"
    return {"name": dimension.name, "in": "query", "required": False,
            "description": f"{described} (repeatable, case-insensitive)",
            "schema": {"type": "array", "items": {"type": "string"}}}


def _wanted(service: Service, given: Callable[[str], list[str]]) -> dict[str, list[str] | None]:
    """The filter values of each dimension, by its name; ``given`` reads a query parameter's values."""
    return {d.name: given(d.name) or None for d in service.shape.dimensions}


def _open(service: Service, streams: list[str] | None, wanted: dict[str, list[str] | None],
          resume_id: str | None) -> tuple[Subscriber, positions.Vector | None]:
    serve = service.cfg.serve
    flt = service.shape.make_filter(streams, wanted, serve.max_filter_values)
    subscriber = Subscriber(flt, serve.client_buffer, serve.lag_warning_fraction)
    if resume_id and positions.view_of(resume_id) != service.version:
        # offsets of another view version's topics: nothing to resume here; start live, say why
        positions.parse(resume_id)  # still refuse an id that is not one
        subscriber.push_status(Status("view_switched", {
            "version": service.version, "previous": positions.view_of(resume_id), "topics": service.topics,
            "detail": f"the id belongs to view version {positions.view_of(resume_id)}; version "
                      f"{service.version} is current: its events follow from now"}))
        return subscriber, None
    resume = positions.parse(resume_id) if resume_id else None
    return subscriber, resume


def _full(service: Service) -> bool:
    return len(service.running_hub().subscribers) >= service.cfg.serve.max_clients


async def sse_stream(request: Request, *, stream: StreamParam = None, last_event_id: ResumeParam = None,
                     last_event_id_header: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
                     ) -> Response:
    """Analyzed records and summary updates as server-sent events, filtered, resumable."""
    service = _service(request.app)
    if _full(service):
        service.metrics.rejected.labels("client_limit").inc()
        return error_response(503, f"{service.cfg.serve.max_clients} clients are connected "
                                   "(serve.max_clients); retry later", headers={"Retry-After": "5"})
    try:
        subscriber, resume = _open(service, stream, _wanted(service, request.query_params.getlist),
                                   last_event_id_header or last_event_id)
    except KappaError as exc:
        return error_response(400, str(exc))
    beyond = await session.beyond_log(service, resume) if resume else None
    if beyond:
        return error_response(400, beyond)
    return _EventStream(
        _sse_body(service, subscriber, resume), ping=service.cfg.serve.ping_s,
        send_timeout=service.cfg.serve.send_timeout_s, headers={"X-Accel-Buffering": "no"},
        service=service)


async def _sse_body(service: Service, subscriber: Subscriber,
                    resume: positions.Vector | None) -> AsyncIterator[bytes]:
    hub = service.running_hub()
    start = positions.encode(positions.merge_missing(resume, hub.position) if resume else hub.position,
                             hub.version)
    hello = session.welcome(service, subscriber, start)
    service.metrics.clients.labels("sse").inc()
    sent = service.metrics.sent.labels("sse")
    try:
        yield f"retry: {RETRY_MS}\nid: {start}\nevent: status\ndata: {hello.json()}\n\n".encode()
        async for batch in session.items(service, subscriber, resume):
            sent.inc(sum(isinstance(item, Record) for item in batch))
            yield b"".join(item.sse for item in batch)
    finally:
        service.metrics.clients.labels("sse").dec()


async def ws_stream(websocket: WebSocket) -> None:
    """The same stream over WebSocket; send ``{"type": "filter", ...}`` to change the filter."""
    service = _service(websocket.app)
    params = websocket.query_params
    try:
        subscriber, resume = _open(service, params.getlist("stream") or None,
                                   _wanted(service, params.getlist), params.get("last_event_id"))
        refusal = await session.beyond_log(service, resume) if resume else None
    except KappaError as exc:
        refusal = str(exc)
    await websocket.accept()
    if refusal:
        await websocket.send_text(Status("error", {"detail": refusal}).ws)
        await websocket.close(WS_POLICY_VIOLATION)
        return
    if _full(service):
        service.metrics.rejected.labels("client_limit").inc()
        await websocket.send_text(Status("error", {"detail": "client limit reached; retry later"}).ws)
        await websocket.close(WS_TRY_AGAIN_LATER)
        return
    service.metrics.clients.labels("ws").inc()
    sender = asyncio.create_task(_ws_send(service, websocket, subscriber, resume))
    receiver = asyncio.create_task(_ws_receive(service, websocket, subscriber))
    try:
        # Either direction ending ends the session: a client that closed is noticed by the
        # receiver while the sender may wait for events that never come.
        done, _ = await asyncio.wait({sender, receiver}, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            _log_end(task)
    finally:
        for task in (sender, receiver):
            task.cancel()
        await asyncio.gather(sender, receiver, return_exceptions=True)
        service.metrics.clients.labels("ws").dec()
        await _close_quietly(websocket)


def _log_end(task: asyncio.Task[None]) -> None:
    exc = None if task.cancelled() else task.exception()
    if exc is None or isinstance(exc, (WebSocketDisconnect, RuntimeError, TimeoutError)):
        logger.debug("websocket ended: %r", exc)
    else:
        logger.error("websocket session failed: %r", exc, exc_info=exc)


async def _ws_send(service: Service, websocket: WebSocket, subscriber: Subscriber,
                   resume: positions.Vector | None) -> None:
    hub = service.running_hub()
    timeout = service.cfg.serve.send_timeout_s
    sent = service.metrics.sent.labels("ws")
    start = positions.encode(positions.merge_missing(resume, hub.position) if resume else hub.position,
                             hub.version)
    await websocket.send_text(session.welcome(service, subscriber, start).ws)
    async for batch in session.items(service, subscriber, resume):
        for item in batch:
            if isinstance(item, Record) and not subscriber.filter.matches(item):
                continue
            try:
                await asyncio.wait_for(websocket.send_text(item.ws), timeout)
            except TimeoutError:
                service.metrics.send_timeouts.inc()
                raise
            if isinstance(item, Record):
                sent.inc()


async def _ws_receive(service: Service, websocket: WebSocket, subscriber: Subscriber) -> None:
    """Apply the client's filter messages until it disconnects; answer a bad one and go on."""
    limit = service.cfg.serve.max_filter_values
    keys = ", ".join(f'"{key}": [...]' for key in ("streams", *(d.plural for d in service.shape.dimensions)))
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return
        try:
            new = _filter_message(service.shape, message, limit)
        except (ValueError, RecursionError, KappaError) as exc:
            reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
            logger.warning("websocket client %s sent a bad message (%s); answered with an error",
                           websocket.client, reason[:200])
            detail = (f'{reason}: send {{"type": "filter", {keys}}} as a text message; '
                      "the current filter stays")
            subscriber.push_status(Status("error", {"detail": detail}), first=True)
            continue
        subscriber.filter = new
        subscriber.push_status(Status("filter", {"filter": new.describe()}), first=True)


def _filter_message(shape: StreamShape, message: Mapping[str, Any], limit: int) -> Filter:
    """The filter of one received WebSocket message; ValueError/KappaError saying what is wrong."""
    text = message.get("text")
    if text is None:
        raise ValueError("binary messages are not understood")
    parsed = json.loads(text)
    if not isinstance(parsed, dict) or parsed.get("type") != "filter":
        raise ValueError("not a filter message")
    return shape.make_filter(parsed.get("streams"), {d.name: parsed.get(d.plural) for d in shape.dimensions},
                             limit)


async def _close_quietly(websocket: WebSocket) -> None:
    try:
        await websocket.close()
    except (RuntimeError, OSError):
        pass

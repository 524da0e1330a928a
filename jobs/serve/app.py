"""The ASGI application of ``kappa serve``: REST, streams, dashboard, health and metrics.

The service follows one pipeline, ``pipelines.default`` (or the only one): its streams are the
ones served over SSE and WebSocket, filtered by the dimensions its ``serve.filters`` declare, and
the REST endpoints its code registers (``pipeline.routes``) are mounted under ``/api/v1``. Every
pipeline on the engine has its declared views served under ``/api/v1/pipelines``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import SecretStr

from jobs.config.load import KappaConfig
from jobs.pipelines.registry import resolve
from jobs.pipelines.spec import PipelineSpec
from jobs.serve import asyncapi, errors, operations, pipelines, rest, streams
from jobs.serve.guard import Guard
from jobs.serve.records import shape_of
from jobs.serve.service import Service

DASHBOARD = Path(__file__).with_name("static") / "dashboard.html"
FAVICON = ("<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 16 16'><circle cx='8' cy='8' r='7' "
           "fill='#3b82f6'/></svg>")


def description(spec: PipelineSpec) -> str:
    """The OpenAPI description of the service following pipeline ``spec``."""
    about = f" ({spec.description})" if spec.description else ""
    by = ", ".join(["stream", *spec.serve.filters])
    return (
        f"Data access to pipeline {spec.name}{about}: its live summaries (Redis) over REST, and its "
        "analyzed records and summary updates (Kafka) over server-sent events and WebSocket, "
        f"filtered by {by} and resumable by event id; the declared views of every pipeline on the "
        "engine under `/api/v1/pipelines`. The WebSocket endpoint `/api/v1/ws` is described in "
        f"AsyncAPI 3.0 at `{asyncapi.PATH}`. Every error answers `{{\"error\": \"...\"}}` (invalid "
        "parameters add `problems`). Guide: docs/api.md.")


def build_app(cfg: KappaConfig, token: SecretStr | None) -> Guard:
    """The application wrapped in the auth/rate-limit guard (``.service`` is the shared state)."""
    followed = resolve(None, cfg.pipelines.default)
    assert followed.spec is not None and followed.code is not None  # resolve raises otherwise
    service = Service(cfg, token, shape_of(followed.spec))
    ops = operations.Operations(cfg)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # a failed start is kept and reported by the runner in one line; raised here, uvicorn
        # would print it as a traceback
        try:
            await service.start()
        except Exception as exc:
            service.start_error = exc
            await service.stop()
            if service.on_start_failed is not None:
                service.on_start_failed()
            yield
            return
        try:
            yield
        finally:
            await service.stop()
            ops.close()

    app = FastAPI(title="kappa data access", version="1", description=description(followed.spec),
                  lifespan=lifespan)
    app.state.service = service
    errors.install(app)
    rest.mount(app, followed.code.routers)
    app.include_router(streams.router(service.shape))
    stream_job = followed.spec.streaming.job == "kappa-stream"
    app.include_router(pipelines.router(cfg, followed=(followed.spec, lambda: service.version)
                                        if stream_job else None))
    app.include_router(operations.router(ops))
    app.add_api_route("/healthz", healthz, methods=["GET"], tags=["operations"],
                      summary="Health: Redis answers and both shared consumers poll")
    app.add_api_route("/metrics", metrics, methods=["GET"], tags=["operations"],
                      summary="Prometheus metrics", response_class=Response)
    app.add_api_route(asyncapi.PATH, lambda: asyncapi.document(app.version, service.shape), methods=["GET"],
                      tags=["streams"], summary="AsyncAPI 3.0 description of the WebSocket endpoint")
    app.add_api_route("/", dashboard, methods=["GET"], include_in_schema=False)
    app.add_api_route("/favicon.ico", favicon, methods=["GET"], include_in_schema=False)
    app.add_api_route("/dashboard", dashboard, methods=["GET"], tags=["dashboard"],
                      summary="The live dashboard page", response_class=FileResponse)
    return Guard(app, service)


async def healthz(request: Request) -> JSONResponse:
    """200 when Redis answers and both consumers polled in the last 10 s, else 503 with reasons."""
    service: Service = request.app.state.service
    problems = [f"{stream} consumer of {feed.topic} is not polling ({feed.last_error or 'stalled'})"
                for stream, feed in service.feeds.items() if not feed.healthy()]
    try:
        await service.redis.ping()
    except Exception as exc:
        problems.append(f"redis: {exc}")
    body = {"ok": not problems, "problems": problems, "topics": service.topics,
            "rebuilding": service.rebuilding, **(service.hub.state() if service.hub else {})}
    return JSONResponse(body, 200 if not problems else 503)


async def metrics(request: Request) -> Response:
    """Prometheus text format (the service's own registry)."""
    service: Service = request.app.state.service
    if service.hub is not None:
        for stream, lag in service.lag().items():
            service.metrics.lag.labels(stream).set(lag)
    return Response(generate_latest(service.metrics.registry), media_type=CONTENT_TYPE_LATEST)


async def favicon() -> Response:
    """The dashboard's icon (a browser asks for it on every page load)."""
    return Response(FAVICON, media_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"})


async def dashboard() -> FileResponse:
    """The dashboard: one HTML file, no build step."""
    return FileResponse(DASHBOARD, media_type="text/html")

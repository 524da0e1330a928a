"""What the REST endpoints a pipeline registers (``pipeline.routes``) share with the service.

``kappa serve`` mounts them under ``/api/v1`` (:func:`mount`): the service's auth, rate limit and
error shape apply to them, and they answer 503 ``rebuilding`` while the served view version has
no Redis data and another one is being built. An endpoint reaches the running service (its
config, Redis client and the served version's key prefix) through :func:`service`; the query
parameter types below give every endpoint the same bounds and words.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request

from jobs.serve.errors import RESPONSES, ErrorBody

if TYPE_CHECKING:
    from jobs.serve.service import Service

PREFIX = "/api/v1"
MAX_LIMIT = 1000
NO_WINDOW: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "no such window (expired or never written)"}}

Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description="how many items, largest first")]
Windows = Annotated[int | None, Query(ge=1, le=1000, description="how many of the latest windows "
                                      "(default serve.default_windows)")]
WindowStart = Annotated[int | None, Query(ge=0, description="one window, by its start (epoch ms)")]


async def view_ready(request: Request) -> None:
    """503 ``rebuilding`` while the served view has no Redis data and another one is being built."""
    message = service(request).rebuilding
    if message:
        raise HTTPException(503, message, headers={"Retry-After": "30"})


def service(request: Request) -> Service:
    """The running service of the request's application."""
    return request.app.state.service


def mount(app: FastAPI, routers: Iterable[APIRouter]) -> None:
    """Mount a pipeline's routers under ``/api/v1``, each route behind :func:`view_ready`."""
    for router in routers:
        app.include_router(router, prefix=PREFIX, responses=RESPONSES, dependencies=[Depends(view_ready)])

"""REST of the pipelines on the engine: each one's declared views, from its definition.

``GET /api/v1/pipelines`` lists them; every view of a pipeline is a route of its own,
``/api/v1/pipelines/<name>/views/<view>`` (``.../<view>/<key>`` for the per-key kinds, entity and
latest), described in the OpenAPI document by its declaration (kind, fields, windows). A read
serves the pipeline's current view version (jobs/engine/versions.py), checked every few seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated, Any

import redis
from fastapi import APIRouter, HTTPException, Path, Query

from jobs.config.load import KappaConfig
from jobs.engine.reads import read_view
from jobs.engine.versions import Version, pipeline_views, version
from jobs.pipelines.registry import Loaded, discover, load
from jobs.pipelines.spec import PipelineSpec
from jobs.pipelines.views import Entity, Latest, View
from jobs.serve.errors import RESPONSES

POINTER_TTL_S = 5.0
Window = Annotated[int | None, Query(ge=0, description="a window's start, epoch ms (default: the latest)")]
NO_KEY: dict[int | str, dict[str, Any]] = {404: {"description": "no such key (never written, or expired)"}}


class Versions:
    """The current view version of each pipeline, read from the pointer at most every few seconds."""

    def __init__(self, cfg: KappaConfig) -> None:
        self.cfg = cfg
        self._known: dict[str, tuple[float, Version]] = {}

    def current(self, spec: PipelineSpec) -> Version:
        """The pipeline's current version (the last known one while Kafka does not answer)."""
        held = self._known.get(spec.name)
        if held is not None and time.monotonic() - held[0] < POINTER_TTL_S:
            return held[1]
        try:
            views = pipeline_views(self.cfg, spec, timeout_s=3.0)
            chosen = version(spec, views.current, views)
        except Exception:  # Kafka down: keep serving the version known last
            chosen = held[1] if held is not None else version(spec, 1)
        self._known[spec.name] = (time.monotonic(), chosen)
        return chosen


def served(pipelines: list[Loaded] | None = None) -> list[PipelineSpec]:
    """The valid pipelines whose streaming job is the engine's."""
    found = pipelines if pipelines is not None else [load(folder) for folder in discover()]
    return [item.spec for item in found if item.spec is not None and not item.problems
            and item.spec.streaming.job == "engine"]


def router(cfg: KappaConfig, specs: list[PipelineSpec] | None = None,
           followed: tuple[PipelineSpec, Callable[[], int]] | None = None) -> APIRouter:
    """The pipelines' routes (one per declared view); the listing names ``followed`` first.

    ``followed``: the kappa-stream pipeline ``kappa serve`` follows, and its current view version;
    its views are served by its own routes (``pipeline.routes``), described in the API docs.
    """
    specs = served() if specs is None else specs
    api = APIRouter(prefix="/api/v1/pipelines", tags=["pipelines"], responses=RESPONSES)
    client = redis.Redis(**cfg.redis.client_kwargs(), decode_responses=True, socket_timeout=5)
    versions = Versions(cfg)

    def listing() -> list[dict[str, Any]]:
        own = [] if followed is None else [{
            "name": followed[0].name, "description": followed[0].description, "job": "kappa-stream",
            "current_version": followed[1](),
            "views": {name: {"kind": view.kind, "description": view.description, "path": "/docs"}
                      for name, view in followed[0].views.items()}}]
        return own + [{"name": spec.name, "description": spec.description, "job": "engine",
                 "current_version": versions.current(spec).number,
                 "views": {name: {"kind": view.kind, "description": view.description,
                                  "path": f"/api/v1/pipelines/{spec.name}/views/{name}"
                                          + ("/{key}" if isinstance(view, Entity | Latest) else "")}
                           for name, view in spec.views.items()}} for spec in specs]

    api.add_api_route("", listing, methods=["GET"], summary="The pipelines served, with their views")
    for spec in specs:
        for name, view in spec.views.items():
            _add_view(api, (client, versions), spec, name, view)
    return api


def _add_view(api: APIRouter, reading: tuple[redis.Redis, Versions], spec: PipelineSpec, name: str,
              view: View) -> None:
    client, versions = reading
    summary = f"{spec.name}: {name} ({view.kind})"
    described = view.description or f"the {view.kind} view {name} of pipeline {spec.name}"
    declared = view.model_dump(mode="json", by_alias=True, exclude_none=True)

    if isinstance(view, Entity | Latest):
        def by_key(key: str = Path(description=f"the view's key ({view.key})")) -> dict[str, Any]:
            current = versions.current(spec)
            found = read_view(client, current.prefix, name, view, key=key)
            if found["value"] is None:
                raise HTTPException(404, f"no {name} for {view.key}={key!r} in pipeline {spec.name} "
                                         f"(version {current.number})")
            return {**found, "version": current.number}

        api.add_api_route(f"/{spec.name}/views/{name}/{{key}}", by_key, methods=["GET"], summary=summary,
                          description=f"{described}. Declared: `{declared}`.", responses=NO_KEY)
        return

    def windowed(window: Window = None) -> dict[str, Any]:
        current = versions.current(spec)
        return {**read_view(client, current.prefix, name, view, window=window), "version": current.number}

    api.add_api_route(f"/{spec.name}/views/{name}", windowed, methods=["GET"], summary=summary,
                      description=f"{described}. Declared: `{declared}`.")

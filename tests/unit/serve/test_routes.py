"""A pipeline's own REST endpoints: registered on its definition, mounted by the service under /api/v1."""

from __future__ import annotations

from types import SimpleNamespace

from fastapi import APIRouter, FastAPI, Request
from fastapi.testclient import TestClient

from jobs.pipelines import definitions
from jobs.serve import errors, rest


def test_a_pipelines_routes_are_mounted_under_api_v1_behind_the_view_check() -> None:
    router = APIRouter()

    @router.get("/colours")
    async def colours(request: Request, limit: rest.Limit = 3) -> dict[str, object]:
        return {"prefix": rest.service(request).prefix, "limit": limit}

    pipeline = definitions(__file__)
    assert pipeline.routes(router) is router and pipeline.routers == [router]
    app = FastAPI()
    errors.install(app)
    app.state.service = SimpleNamespace(prefix="tiny", rebuilding=None)
    rest.mount(app, pipeline.routers)
    client = TestClient(app)
    assert client.get("/api/v1/colours").json() == {"prefix": "tiny", "limit": 3}
    assert client.get("/api/v1/colours", params={"limit": 0}).status_code == 422
    assert client.get("/colours").status_code == 404
    app.state.service.rebuilding = "rebuilding: view version 1 has no data in Redis"
    refused = client.get("/api/v1/colours")
    assert refused.status_code == 503 and refused.headers["retry-after"] == "30"
    assert refused.json() == {"error": "rebuilding: view version 1 has no data in Redis"}

"""REST endpoints against keys written to the embedded Redis in the documented scheme."""

from __future__ import annotations

import httpx
import pytest

W1, W2, W3 = 1_767_225_600_000, 1_767_225_660_000, 1_767_225_720_000


@pytest.fixture()
def api(start_serve, redis_client, prefix):
    p = prefix
    redis_client.zadd(f"{p}:topics:all", {"Salsa": 12, "Hiking": 30, "Chess": 5, "Jazz": 12})
    redis_client.zadd(f"{p}:trending:windows", {str(W1): W1, str(W2): W2})
    redis_client.zadd(f"{p}:trending:{W1}", {"Chess": 9})
    redis_client.zadd(f"{p}:trending:{W2}", {"Jazz": 4, "Salsa": 7})
    redis_client.zadd(f"{p}:cities:windows", {str(W1): W1, str(W2): W2, str(W3): W3})
    redis_client.hset(f"{p}:cities:{W1}", mapping={"Oslo": 1})
    redis_client.hset(f"{p}:cities:{W2}", mapping={"Barcelona": 17, "Madrid": 3})
    redis_client.hset(f"{p}:cities:{W3}", mapping={"Madrid": 2, "Barcelona": 2, "Lyon": 6})
    redis_client.zadd(f"{p}:members:windows", {str(W2): W2, str(W3): W3})
    redis_client.pfadd(f"{p}:members:{W2}", *[f"m{i}" for i in range(10)])
    redis_client.pfadd(f"{p}:members:{W3}", "m1", "m2", "m1")
    redis_client.pfadd(f"{p}:members:all", *[f"m{i}" for i in range(12)])
    redis_client.hset(f"{p}:event:gyzheubzcxwz", mapping={"yes": 5, "no": 2, "guests": 3,
                                                         "event_name": "Stand-up Comedy Mixer"})
    server = start_serve()
    with httpx.Client(base_url=server.url, timeout=10) as client:
        yield client
    redis_client.delete(*redis_client.keys(f"{p}:*"))


def test_top_topics(api):
    body = api.get("/api/v1/topics/top", params={"limit": 3}).json()
    assert body == {"items": [{"item": "Hiking", "count": 30, "error": 0},
                              {"item": "Salsa", "count": 12, "error": 0},
                              {"item": "Jazz", "count": 12, "error": 0}],
                    "distinct_topics": 4}


def test_trending_latest_and_by_window(api):
    assert api.get("/api/v1/topics/trending").json() == {
        "window_start_ms": W2, "window_end_ms": W2 + 600_000,
        "items": [{"item": "Salsa", "count": 7, "error": 0}, {"item": "Jazz", "count": 4, "error": 0}]}
    assert api.get("/api/v1/topics/trending", params={"window_start_ms": W1}).json()["items"] == [
        {"item": "Chess", "count": 9, "error": 0}]
    missing = api.get("/api/v1/topics/trending", params={"window_start_ms": 5})
    assert missing.status_code == 404 and "no trending window" in missing.json()["error"]


def test_cities_by_window(api):
    body = api.get("/api/v1/cities", params={"windows": 2}).json()
    assert body == {"windows": [
        {"window_start_ms": W3, "window_end_ms": W3 + 60_000, "total": 10,
         "cities": [{"city": "Lyon", "count": 6}, {"city": "Barcelona", "count": 2},
                    {"city": "Madrid", "count": 2}]},
        {"window_start_ms": W2, "window_end_ms": W2 + 60_000, "total": 20,
         "cities": [{"city": "Barcelona", "count": 17}, {"city": "Madrid", "count": 3}]}]}
    one = api.get("/api/v1/cities", params={"window_start_ms": W2, "city": "madrid"}).json()
    assert one["windows"] == [{"window_start_ms": W2, "window_end_ms": W2 + 60_000, "total": 20,
                               "cities": [{"city": "Madrid", "count": 3}]}]


def test_distinct_members(api):
    body = api.get("/api/v1/members").json()
    assert body == {"windows": [
        {"window_start_ms": W3, "window_end_ms": W3 + 60_000, "approx_distinct": 2, "error": 0.0081},
        {"window_start_ms": W2, "window_end_ms": W2 + 60_000, "approx_distinct": 10, "error": 0.0081}],
        "all_time_approx_distinct": 12, "error": 0.0081}


def test_one_event(api):
    assert api.get("/api/v1/events/gyzheubzcxwz").json() == {
        "event_id": "gyzheubzcxwz", "event_name": "Stand-up Comedy Mixer", "yes": 5, "no": 2, "guests": 3}
    missing = api.get("/api/v1/events/nope")
    assert missing.status_code == 404 and "nope" in missing.json()["error"]


def test_unknown_window_is_404_on_every_endpoint(api):
    for path, kind in (("topics/trending", "trending"), ("cities", "cities"), ("members", "members")):
        missing = api.get(f"/api/v1/{path}", params={"window_start_ms": W3 + 5})
        assert missing.status_code == 404, path
        assert missing.json() == {"error": f"no {kind} window starts at {W3 + 5} (expired or never "
                                           "written); leave out window_start_ms for the latest ones"}


def test_errors_have_one_shape(api):
    invalid = api.get("/api/v1/topics/top", params={"limit": 0})
    assert invalid.status_code == 422
    body = invalid.json()
    assert set(body) == {"error", "problems"} and body["error"].startswith("invalid request: query.limit")
    assert [p["location"] for p in body["problems"]] == ["query.limit"]
    for response in (api.get("/api/v1/nothing"), api.post("/api/v1/topics/top"),
                     api.get("/api/v1/events/nope"), api.get("/api/v1/stream?stream=nope")):
        assert response.status_code in (400, 404, 405) and set(response.json()) == {"error"}, response.text


def test_openapi_health_metrics_dashboard(api):
    spec = api.get("/openapi.json").json()
    assert {"/api/v1/topics/top", "/api/v1/topics/trending", "/api/v1/cities", "/api/v1/members",
            "/api/v1/events/{event_id}", "/api/v1/stream", "/healthz", "/metrics"} <= set(spec["paths"])
    health = api.get("/healthz")
    assert health.status_code == 200 and health.json()["ok"] is True
    api.get("/api/v1/topics/top")
    api.get("/api/v1/events/gyzheubzcxwz")
    metrics = api.get("/metrics").text
    assert 'kappa_serve_http_requests_total{route="/api/v1/topics/top",status="200"}' in metrics
    assert 'kappa_serve_http_requests_total{route="/api/v1/events/{event_id}",status="200"}' in metrics
    stream_parameters = {p["name"] for p in spec["paths"]["/api/v1/stream"]["get"]["parameters"]}
    assert {"stream", "topic", "city", "last_event_id"} <= stream_parameters
    page = api.get("/")
    assert page.status_code == 200 and "EventSource" in page.text
    assert "/asyncapi.json" in spec["info"]["description"]
    ws = api.get("/asyncapi.json").json()
    assert ws["asyncapi"] == "3.0.0" and ws["channels"]["stream"]["address"] == "/api/v1/ws"
    assert set(ws["channels"]["stream"]["messages"]) == {"event", "status", "filter"}
    channel = ws["channels"]["stream"]
    assert {"stream", "topic", "city"} <= set(channel["bindings"]["ws"]["query"]["properties"])
    assert {"streams", "topics", "cities"} <= set(channel["messages"]["filter"]["payload"]["properties"])
    icon = api.get("/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/")


def test_empty_redis_answers_empty(start_serve):
    with httpx.Client(base_url=start_serve().url) as client:
        assert client.get("/api/v1/topics/trending").json() == {
            "window_start_ms": None, "window_end_ms": None, "items": []}
        assert client.get("/api/v1/cities").json() == {"windows": []}
        assert client.get("/api/v1/topics/top").json() == {"items": [], "distinct_topics": 0}

"""WebSocket: a client changes its filter mid-stream and gets only matching events from then on."""

from __future__ import annotations

import json
import logging
import time

import httpx
from websockets.sync.client import connect

from tests.integration.serve.support import rsvp


def receive_until(ws, predicate, timeout: float = 15.0) -> list[dict]:
    """Messages until predicate(messages so far) holds."""
    got: list[dict] = []
    deadline = time.monotonic() + timeout
    while not predicate(got):
        got.append(json.loads(ws.recv(timeout=max(0.1, deadline - time.monotonic()))))
    return got


def events(count: int):
    return lambda got: sum(m["type"] == "event" for m in got) >= count


def status(name: str):
    return lambda got: bool(got) and got[-1].get("status") == name


def test_filter_change_mid_stream(start_serve, sender, serve_topics):
    server = start_serve()
    url = server.url.replace("http://", "ws://") + "/api/v1/ws?stream=analyzed&city=Barcelona"
    with connect(url) as ws:
        hello = json.loads(ws.recv(timeout=10))
        assert hello["status"] == "connected" and hello["filter"]["cities"] == ["barcelona"]
        sender.send(serve_topics["analyzed"],
                    [rsvp(n, city=("Barcelona", "Oslo")[n % 2], topics=("Chess" if n % 3 else "Jazz",))
                     for n in range(12)])
        before = receive_until(ws, events(6))
        assert sorted(m["data"]["n"] for m in before) == [0, 2, 4, 6, 8, 10]
        ws.send(json.dumps({"type": "filter", "cities": ["Oslo"], "topics": ["Jazz"]}))
        ack = receive_until(ws, status("filter"))
        assert ack[-1]["filter"] == {"streams": ["analyzed", "summaries"], "topics": ["jazz"],
                                     "cities": ["oslo"]}
        sender.send(serve_topics["analyzed"],
                    [rsvp(n, city=("Barcelona", "Oslo")[n % 2], topics=("Chess" if n % 3 else "Jazz",))
                     for n in range(12, 48)])
        after = [m for m in receive_until(ws, events(6)) if m["type"] == "event"]
        assert sorted(m["data"]["n"] for m in after) == [15, 21, 27, 33, 39, 45]
        assert all(m["data"]["city"] == "Oslo" and "Jazz" in m["data"]["topics"] for m in after)
        ws.send("not json")
        error = receive_until(ws, status("error"))
        assert "filter" in error[-1]["detail"]


def test_websocket_resume_with_last_event_id(start_serve, sender, serve_topics):
    server = start_serve()
    base = server.url.replace("http://", "ws://") + "/api/v1/ws?stream=analyzed"
    with connect(base) as ws:
        json.loads(ws.recv(timeout=10))
        sender.send(serve_topics["analyzed"], [rsvp(n) for n in range(6)])
        got = [m for m in receive_until(ws, events(6)) if m["type"] == "event"]
        assert sorted(m["data"]["n"] for m in got) == list(range(6))
        last = got[-1]["id"]
    sender.send(serve_topics["analyzed"], [rsvp(n) for n in range(6, 15)])
    with connect(f"{base}&last_event_id={last}") as ws:
        hello = json.loads(ws.recv(timeout=10))
        assert hello["id"] == last
        resumed = [json.loads(ws.recv(timeout=10)) for _ in range(9)]
    assert sorted(m["data"]["n"] for m in resumed) == list(range(6, 15))


def clients(server) -> int:
    return httpx.get(f"{server.url}/healthz", timeout=5).json()["clients"]


def wait_clients(server, count: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while clients(server) != count:
        assert time.monotonic() < deadline, f"clients stayed {clients(server)}, expected {count}"
        time.sleep(0.05)


def test_closed_clients_are_unregistered(start_serve):
    server = start_serve(max_clients=3)
    url = server.url.replace("http://", "ws://") + "/api/v1/ws"
    for _ in range(6):  # twice max_clients: each closed session must free its place
        with connect(url) as ws:
            assert json.loads(ws.recv(timeout=10))["status"] == "connected"
        wait_clients(server, 0)
    with connect(url) as ws:
        assert json.loads(ws.recv(timeout=10))["status"] == "connected"


def test_bad_frames_get_an_error_and_the_session_goes_on(start_serve, caplog):
    server = start_serve()
    url = server.url.replace("http://", "ws://") + "/api/v1/ws"
    with caplog.at_level(logging.WARNING, logger="jobs.serve.streams"), connect(url) as ws:
        json.loads(ws.recv(timeout=10))
        ws.send(b"\x00\x01binary")
        assert "binary" in receive_until(ws, status("error"))[-1]["detail"]
        ws.send("[" * 100_000 + "]" * 100_000)
        assert "nested" in receive_until(ws, status("error"))[-1]["detail"]
        ws.send(json.dumps({"type": "filter", "cities": ["Oslo"]}))
        assert receive_until(ws, status("filter"))[-1]["filter"]["cities"] == ["oslo"]
    assert sum("bad message" in r.getMessage() for r in caplog.records) == 2
    wait_clients(server, 0)

"""SSE: filters, one shared consumer, resume with Last-Event-ID from the ring and from Kafka."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from websockets.exceptions import ConnectionClosed

from tests.integration.serve.support import SseReader, city_summary, rsvp, topics_summary

CITIES = ("Barcelona", "Madrid", "Oslo")


def ns(reader: SseReader) -> list[int]:
    return [e.data["n"] for e in reader.of("rsvp")]


def test_filters_by_city_and_topic(start_serve, sender, serve_topics):
    server = start_serve()
    madrid = SseReader(f"{server.url}/api/v1/stream?city=madrid")
    chess = SseReader(f"{server.url}/api/v1/stream?topic=Chess&stream=analyzed")
    everything = SseReader(f"{server.url}/api/v1/stream")
    for reader in (madrid, chess, everything):
        reader.wait_for(lambda r: r.of("status"))
    records = [rsvp(n, city=CITIES[n % 3], topics=("Chess",) if n % 4 == 0 else ("Salsa", "Jazz"))
               for n in range(24)]
    sender.send(serve_topics["analyzed"], records)
    sender.send(serve_topics["summaries"], [city_summary(0, "Madrid", 8), city_summary(0, "Oslo", 8),
                                            topics_summary("top_topics", [("Chess", 6), ("Salsa", 18)])],
                key="key")
    everything.wait_for(lambda r: len(r.of("rsvp")) == 24 and len(r.of("summary")) == 3)
    madrid.wait_for(lambda r: len(r.of("rsvp")) == 8 and len(r.of("summary")) == 1)
    chess.wait_for(lambda r: len(r.of("rsvp")) == 6)
    assert sorted(ns(madrid)) == [1, 4, 7, 10, 13, 16, 19, 22]
    assert [e.data["city"] for e in madrid.of("summary")] == ["Madrid"]
    assert sorted(ns(chess)) == [0, 4, 8, 12, 16, 20]
    assert chess.of("summary") == []  # stream=analyzed only
    assert server.app.service.feeds.keys() == {"analyzed", "summaries"}  # one consumer per topic
    with httpx.Client() as client:
        bad = client.get(f"{server.url}/api/v1/stream?stream=nope")
        assert bad.status_code == 400 and "unknown stream" in bad.json()["error"]
        bad_id = client.get(f"{server.url}/api/v1/stream", headers={"Last-Event-ID": "zz"})
        assert bad_id.status_code == 400 and "event id" in bad_id.json()["error"]
    for reader in (madrid, chess, everything):
        reader.stop()


@pytest.mark.parametrize("ring", [10_000, 4], ids=["from-ring", "from-kafka"])
def test_resume_delivers_every_missed_event_once(start_serve, sender, serve_topics, ring):
    server = start_serve(ring_buffer_size=ring)
    url = f"{server.url}/api/v1/stream?stream=analyzed&city=Barcelona&city=Oslo"
    watcher = SseReader(url)
    client = SseReader(url)
    for reader in (watcher, client):
        reader.wait_for(lambda r: r.of("status"))
    sender.send(serve_topics["analyzed"], [rsvp(n, city=CITIES[n % 3]) for n in range(30)])
    client.wait_for(lambda r: len(r.of("rsvp")) == 20)
    client.stop()
    resume_from = client.last_id()
    sender.send(serve_topics["analyzed"], [rsvp(n, city=CITIES[n % 3]) for n in range(30, 60)])
    watcher.wait_for(lambda r: len(r.of("rsvp")) == 40)  # events kept flowing meanwhile
    again = SseReader(url, headers={"Last-Event-ID": resume_from})
    again.wait_for(lambda r: len(r.of("rsvp")) == 20)
    sender.send(serve_topics["analyzed"], [rsvp(n, city=CITIES[n % 3]) for n in range(60, 72)])
    again.wait_for(lambda r: len(r.of("rsvp")) == 28)
    missed = [n for n in range(30, 72) if n % 3 != 1]
    assert sorted(ns(again)) == missed and len(set(ns(again))) == len(ns(again))
    assert sorted(ns(client) + ns(again)) == [n for n in range(72) if n % 3 != 1]
    source = "ring" if ring > 100 else "kafka"
    metrics = httpx.get(f"{server.url}/metrics").text
    assert f'kappa_serve_resumes_total{{source="{source}"}} 1.0' in metrics
    for reader in (watcher, again):
        reader.stop()


def test_resume_after_retention_says_what_was_lost(start_serve, sender, serve_topics, kafka_props):
    server = start_serve(ring_buffer_size=2)
    url = f"{server.url}/api/v1/stream?stream=analyzed"
    client = SseReader(url)
    client.wait_for(lambda r: r.of("status"))
    sender.send(serve_topics["analyzed"], [rsvp(n) for n in range(3)], partitions=1)
    client.wait_for(lambda r: len(r.of("rsvp")) == 3)
    client.stop()
    resume_from = client.last_id()
    acked = sender.send(serve_topics["analyzed"], [rsvp(n) for n in range(3, 9)], partitions=1)
    assert [offset for _, offset in acked] == [3, 4, 5, 6, 7, 8]
    # The precondition of this test: the service has read 3..8, so its ring (2 records) no
    # longer covers the resume point and the resume must read Kafka, where 3..5 are deleted.
    deadline = time.monotonic() + 30
    while not httpx.get(f"{server.url}/healthz", timeout=5).json()["position"].startswith("a:9,"):
        assert time.monotonic() < deadline, "the service never read offsets 3..8"
        time.sleep(0.1)
    admin = AdminClient(kafka_props)
    futures = admin.delete_records([TopicPartition(serve_topics["analyzed"], 0, 6)])
    for future in futures.values():
        future.result(timeout=15)
    probe = Consumer({**kafka_props, "group.id": "probe"})
    deadline = time.monotonic() + 10
    while probe.get_watermark_offsets(TopicPartition(serve_topics["analyzed"], 0), timeout=5)[0] < 6:
        assert time.monotonic() < deadline, "DeleteRecords never moved the low watermark"
        time.sleep(0.1)
    probe.close()
    again = SseReader(url, headers={"Last-Event-ID": resume_from})
    again.wait_for(lambda r: len(r.of("rsvp")) >= 3)
    lost = [e.data for e in again.of("status") if e.data["status"] == "not_retained"]
    assert lost and lost[0]["gaps"] == [{"stream": "analyzed", "partition": 0, "from_offset": 3,
                                         "earliest_retained": 6}]
    assert lost[0]["lost_at_most"] == 3
    assert ns(again) == [6, 7, 8]
    again.stop()


def test_resume_id_past_the_end_of_the_log_is_refused(start_serve, sender, serve_topics):
    from websockets.sync.client import connect

    server = start_serve()
    sender.send(serve_topics["analyzed"], [rsvp(n) for n in range(3)], partitions=1)
    future = "a:4,0,0"  # partition 0 ends at offset 3
    with httpx.Client() as client:
        refused = client.get(f"{server.url}/api/v1/stream", headers={"Last-Event-ID": future})
        assert refused.status_code == 400
        assert "past the end of the log: partition 0" in refused.json()["error"]
        ahead = SseReader(f"{server.url}/api/v1/stream?stream=analyzed",
                          headers={"Last-Event-ID": "a:3,0,0"})  # the end itself is a position
        ahead.wait_for(lambda r: r.of("status"))
        assert ahead.status_code == 200
        ahead.stop()
    url = server.url.replace("http://", "ws://") + f"/api/v1/ws?last_event_id={future}"
    with connect(url) as ws:
        assert "past the end of the log" in json.loads(ws.recv(timeout=10))["detail"]
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd.code == 1008


def test_resume_from_an_id_issued_during_a_kafka_catch_up(start_serve, sender, serve_topics):
    server = start_serve(ring_buffer_size=4)  # every resume below is older than the ring
    url = f"{server.url}/api/v1/stream?stream=analyzed&city=Barcelona&city=Oslo"
    first = SseReader(url)
    first.wait_for(lambda r: r.of("status"))
    resume_from = first.of("status")[0].id
    first.stop()
    sender.send(serve_topics["analyzed"], [rsvp(n, city=CITIES[n % 3]) for n in range(45)])
    wanted = [n for n in range(45) if n % 3 != 1]
    deadline = time.monotonic() + 30
    while not httpx.get(f"{server.url}/healthz", timeout=5).json()["received"] >= 45:
        assert time.monotonic() < deadline, "the service never read the records"
        time.sleep(0.1)
    caught_up = SseReader(url, headers={"Last-Event-ID": resume_from})
    caught_up.wait_for(lambda r: len(r.of("rsvp")) == len(wanted))
    caught_up.stop()
    events = caught_up.of("rsvp")
    assert sorted(e.data["n"] for e in events) == wanted
    middle = len(events) // 2
    again = SseReader(url, headers={"Last-Event-ID": events[middle].id})
    rest = sorted(e.data["n"] for e in events[middle + 1:])
    again.wait_for(lambda r: len(r.of("rsvp")) >= len(rest))
    time.sleep(0.5)  # anything more would be a duplicate
    again.stop()
    assert sorted(ns(again)) == rest
    metrics = httpx.get(f"{server.url}/metrics").text
    assert 'kappa_serve_resumes_total{source="kafka"} 2.0' in metrics

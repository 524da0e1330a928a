"""Pure logic of the access tier: position ids, filters, the hub's ring buffer and slow-client policy."""

from __future__ import annotations

import asyncio
import json

import pytest

from jobs.pipelines.registry import find, load_spec
from jobs.serve import positions
from jobs.serve.hub import Hub, Subscriber
from jobs.serve.records import Filter, FilterError, Status, shape_of

RSVP = shape_of(load_spec(find("rsvp")).spec)
"""The RSVP pipeline's streams as it declares them (pipelines/rsvp/pipeline.yaml, ``serve:``)."""
build_record = RSVP.record


def make_filter(streams, topics, cities, max_values):
    return RSVP.make_filter(streams, {"topic": topics, "city": cities}, max_values)


def rec(partition: int, offset: int, city: str = "Oslo", topics=("Salsa",), stream: str = "analyzed"):
    value = json.dumps({"city": city, "topics": list(topics), "n": offset}).encode()
    return build_record(stream, partition, offset, 0, value)


def test_event_ids_round_trip_and_reject_garbage():
    vector = {"analyzed": [42, 17, 9], "summaries": [5, 3, 0]}
    assert positions.encode(vector) == "a:42,17,9;s:5,3,0"
    assert positions.parse("a:42,17,9;s:5,3,0") == vector
    for bad in ("", "x:1", "a:1,b", "a:-1", "a"):
        with pytest.raises(positions.PositionError):
            positions.parse(bad)


def test_filter_matches_topics_and_cities_case_insensitively():
    flt = make_filter(["analyzed"], ["salsa"], ["OSLO", " Barcelona "], max_values=5)
    assert flt.matches(rec(0, 0, "Oslo", ("Salsa", "Jazz")))
    assert not flt.matches(rec(0, 1, "Madrid", ("Salsa",)))
    assert not flt.matches(rec(0, 2, "Oslo", ("Jazz",)))
    assert not flt.matches(rec(0, 3, stream="summaries"))
    with pytest.raises(FilterError):
        make_filter(["nope"], None, None, 5)
    with pytest.raises(FilterError):
        make_filter(None, [f"t{i}" for i in range(6)], None, 5)


def test_summary_dimensions():
    trending = build_record("summaries", 0, 0, 0, json.dumps(
        {"kind": "trending", "items": [{"item": "Salsa", "count": 3}]}).encode())
    members = build_record("summaries", 0, 1, 0, json.dumps({"kind": "members_window"}).encode())
    salsa = make_filter(None, ["Salsa"], None, 5)
    assert salsa.matches(trending)
    assert not salsa.matches(members)
    assert Filter().matches(members)
    assert build_record("analyzed", 0, 0, 0, b"[1]") is None
    assert build_record("analyzed", 0, 0, 0, b"{nope") is None


def test_ring_serves_missed_records_after_a_resume_point():
    async def run():
        hub = Hub({"analyzed": [0, 0], "summaries": [0]}, ring_size=3)
        hub.publish([rec(0, 0), rec(1, 0), rec(0, 1), rec(1, 1)])  # (0,0) falls out of the ring
        assert positions.encode(hub.ring_start) == "a:1,0;s:0"
        assert hub.join(Subscriber(Filter(), 10, 0.5), {"analyzed": [0, 0], "summaries": [0]}) is None
        sub = Subscriber(Filter(), 10, 0.5)
        missed = hub.join(sub, {"analyzed": [1, 1], "summaries": [0]})
        assert [(r.partition, r.offset) for r in missed] == [(0, 1), (1, 1)]
        assert missed[0].position_id == "a:2,1;s:0"
        hub.publish([rec(1, 2)])
        assert [(r.partition, r.offset) for r in await sub.take(10)] == [(1, 2)]

    asyncio.run(run())


def test_a_full_buffer_warns_then_overflows_without_blocking():
    async def run():
        hub = Hub({"analyzed": [0], "summaries": [0]}, ring_size=0)
        sub = Subscriber(Filter(), limit=4, warn_fraction=0.5)
        hub.attach(sub)
        hub.publish([rec(0, n) for n in range(10)])
        items = await sub.take(100)
        statuses = [i.status for i in items if isinstance(i, Status)]
        assert statuses == ["lagging", "overflow"]
        assert sum(not isinstance(i, Status) for i in items) == 4
        assert sub.overflowed

    asyncio.run(run())


def test_a_live_gap_reaches_subscribers_in_order_and_the_ring_stops_covering_it():
    async def run():
        hub = Hub({"analyzed": [0], "summaries": [0]}, ring_size=10)
        live, other = Subscriber(Filter(), 10, 0.9), Subscriber(Filter(streams=("summaries",)), 10, 0.9)
        hub.attach(live)
        hub.attach(other)
        hub.publish([rec(0, 0), rec(0, 1)])
        status = hub.skip("analyzed", 0, 5)
        assert status is not None and status.detail["gaps"] == [
            {"stream": "analyzed", "partition": 0, "from_offset": 2, "earliest_retained": 5}]
        assert status.detail["lost_at_most"] == 3
        assert hub.skip("analyzed", 0, 3) is None  # not ahead of the position: nothing was lost
        hub.publish([rec(0, 5)])
        items = await live.take(10)
        assert [getattr(i, "offset", getattr(i, "status", None)) for i in items] == [0, 1, "not_retained", 5]
        assert items[-1].position_id == "a:6;s:0"
        assert not other.queue
        assert hub.join(Subscriber(Filter(), 10, 0.5), {"analyzed": [2], "summaries": [0]}) is None
        assert [r.offset for r in hub.join(Subscriber(Filter(), 10, 0.5),
                                           {"analyzed": [5], "summaries": [0]})] == [5]

    asyncio.run(run())


def sourced(partition: int, offset: int, source_partition: int, source_offset: int):
    value = json.dumps({"city": "Oslo", "topics": ["Salsa"], "source_topic": "rsvps.raw",
                        "source_partition": source_partition, "source_offset": source_offset}).encode()
    return build_record("analyzed", partition, offset, 0, value)


def test_after_a_switch_each_source_position_reaches_a_client_once():
    async def run() -> list[tuple[int, int]]:
        hub = Hub({"analyzed": [0, 0], "summaries": [0]}, ring_size=100)
        subscriber = Subscriber(make_filter(["analyzed"], None, None, 5), 100, 0.8)
        hub.attach(subscriber)
        # version 1 delivered source partition 0 up to 4 and partition 1 up to 2
        hub.publish([sourced(0, o, 0, o) for o in range(5)] + [sourced(1, o, 1, o) for o in range(3)])
        hub.switch({"analyzed": [0, 0], "summaries": [0]}, 2, Status("view_switched"))
        # version 2 from before that point: analyzed again, interleaved, and further
        hub.publish([sourced(0, o, 0, o) for o in range(8)] + [sourced(1, o, 1, o) for o in range(5)])
        items = await subscriber.take(100)
        return [r.source[1:] for r in items if not isinstance(r, Status)]

    delivered = asyncio.run(run())
    assert sorted(delivered) == [(0, o) for o in range(8)] + [(1, o) for o in range(5)]


def test_frames_name_analyzed_records_by_the_pipeline_and_filters_by_its_dimensions():
    analyzed = rec(0, 0).with_id("a:1;s:0")
    assert analyzed.sse.startswith(b"id: a:1;s:0\nevent: rsvp\ndata: {")
    city = build_record("summaries", 0, 0, 0, json.dumps({"kind": "city_window", "city": " Oslo "}).encode())
    assert city.with_id("a:0;s:1").sse.split(b"\n")[1] == b"event: summary"
    assert make_filter(None, None, ["OSLO"], 5).matches(city)
    assert not make_filter(None, ["Salsa"], None, 5).matches(city)
    assert make_filter(None, ["Salsa"], ["Oslo"], 5).describe() == {
        "streams": ["analyzed", "summaries"], "topics": ["salsa"], "cities": ["oslo"]}

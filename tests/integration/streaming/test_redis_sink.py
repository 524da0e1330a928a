"""The fenced Redis sink of the summaries against the session's real Redis (one prefix per test)."""

from __future__ import annotations

import json

import pytest

from jobs.streaming.redis_script import FenceMoved, RedisViewLost, SummarySinkError
from jobs.streaming.redis_sink import RedisSummarySink

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
MINUTE = 60_000
WINDOWS_MS = {"city": MINUTE, "trending": 10 * MINUTE, "members": MINUTE}
RAW0, RAW1 = ("rsvps.raw", 0), ("rsvps.raw", 1)


def inc(kind: str, start: int, item: str, n: int = 1, no: int = 0, guests: int = 0,
        label: str | None = None) -> dict[str, object]:
    return {"kind": kind, "window_start": start, "item": item, "n": n, "n2": no, "n3": guests,
            "label": label}


BATCH = [
    inc("city", T0, "Barcelona", 2),
    inc("city", T0 + MINUTE, "Madrid"),
    inc("topic_minute", T0, "Salsa", 2),
    inc("topic_minute", T0, "Comedy"),
    inc("topic_minute", T0 + MINUTE, "Salsa"),
    inc("topic", 0, "Salsa", 5),
    inc("topic", 0, "Comedy", 1),
    inc("member", T0, "1"),
    inc("member", T0, "2"),
    inc("member_all", 0, "1", 2),
    inc("member_all", 0, "2"),
    inc("member_all", 0, "3"),
    inc("event", 0, "e1", n=3, no=1, guests=4, label="Mixer"),
]
META = {"batch_id": 4, "query": "q-test", "totals": {"input": 9, "valid": 7, "dlq": 2, "late": 1}}


@pytest.mark.parametrize("how", ["read_back", "in_the_apply", "in_chunks"])
def test_apply_then_read_back(sink: RedisSummarySink, how: str) -> None:
    """Read back on a pipeline (a recovered batch published again) or in the apply's last transaction."""
    assert sink.fence() == {}
    if how == "in_chunks":  # a tiny chunk: the batch's writes go in many transactions
        sink._apply.chunk_args = 8
    if how == "read_back":
        applied = sink.apply(BATCH, {}, {RAW0: 10, RAW1: 4}, META)
        records = sink.read_back(applied, WINDOWS_MS, top_n=1)
    else:
        records = sink.apply_and_read(BATCH, {}, {RAW0: 10, RAW1: 4}, META, windows_ms=WINDOWS_MS, top_n=1)
    by_key = {record["key"]: record for record in records}
    assert by_key["city_window/1767225600000/Barcelona"] == {
        "kind": "city_window", "key": "city_window/1767225600000/Barcelona",
        "window_start_ms": T0, "window_end_ms": T0 + MINUTE, "city": "Barcelona", "count": 2}
    assert by_key["city_window/1767225660000/Madrid"]["count"] == 1
    assert by_key["members_window/1767225600000"] == {
        "kind": "members_window", "key": "members_window/1767225600000", "window_start_ms": T0,
        "window_end_ms": T0 + MINUTE, "approx_distinct": 2, "error": 0.0081}
    assert by_key["event/e1"] == {"kind": "event", "key": "event/e1", "event_id": "e1",
                                  "event_name": "Mixer", "yes": 3, "no": 1, "guests": 4}
    assert by_key["top_topics"] == {"kind": "top_topics", "key": "top_topics",
                                    "items": [{"item": "Salsa", "count": 5, "error": 0}]}
    assert by_key[f"trending/{T0}"]["items"] == [{"item": "Salsa", "count": 3, "error": 0}]
    # minute buckets T0 and T0+1m feed the 10-minute windows starting T0-9m .. T0+1m
    trending = sorted(r["window_start_ms"] for r in records if r["kind"] == "trending")
    assert trending == [T0 + k * MINUTE for k in range(-9, 2)]
    assert len(records) == 2 + 11 + 1 + 1 + 1

    r, key = sink.client, sink.keys
    assert sink.fence() == {RAW0: 10, RAW1: 4}
    fence = r.hgetall(key.fence)
    assert (fence["batch_id"], fence["query"]) == ("4", "q-test")
    assert r.hgetall(key("totals")) == {"input": "9", "valid": "7", "dlq": "2", "late": "1"}
    assert r.pfcount(key("members", "all")) == 3
    assert r.zrange(key("cities", "windows"), 0, -1) == [str(T0), str(T0 + MINUTE)]


def test_trending_windows_are_the_union_of_their_minute_buckets(sink: RedisSummarySink) -> None:
    sink.apply(BATCH, {}, {RAW0: 10}, META)
    r, key = sink.client, sink.keys
    assert r.zrange(key("trending", T0), 0, -1, withscores=True) == [("Comedy", 1.0), ("Salsa", 3.0)]
    assert r.zrange(key("trending", T0 - 9 * MINUTE), 0, -1, withscores=True) == [
        ("Comedy", 1.0), ("Salsa", 2.0)]
    assert r.zrange(key("trending", T0 + MINUTE), 0, -1, withscores=True) == [("Salsa", 1.0)]
    assert not r.exists(key("trending", T0 - 10 * MINUTE))
    # a later batch adds to one bucket: every window holding it is rebuilt from the buckets
    sink.apply([inc("topic_minute", T0 + 9 * MINUTE, "Comedy", 4)], {RAW0: 10}, {RAW0: 12}, META)
    assert r.zrange(key("trending", T0), 0, -1, withscores=True) == [("Salsa", 3.0), ("Comedy", 5.0)]
    assert r.zrange(key("trending", T0 + MINUTE), 0, -1, withscores=True) == [
        ("Salsa", 1.0), ("Comedy", 4.0)]
    assert r.zrange(key("trending", T0 - 9 * MINUTE), 0, -1, withscores=True) == [
        ("Comedy", 1.0), ("Salsa", 2.0)]


def test_window_keys_have_ttls_and_all_time_keys_none(sink: RedisSummarySink) -> None:
    sink.apply(BATCH, {}, {RAW0: 10}, META)
    r, key, streaming = sink.client, sink.keys, sink.cfg.streaming
    for name in (key("cities", T0), key("topics", "minute", T0), key("trending", T0), key("members", T0)):
        assert 0 < r.ttl(name) <= streaming.window_ttl_s, name
    assert 0 < r.ttl(key("event", "e1")) <= streaming.params["event_ttl_s"]
    assert streaming.window_ttl_s != streaming.params["event_ttl_s"]
    assert r.ttl(key("event", "e1")) > streaming.window_ttl_s
    for name in (key("topics", "all"), key("members", "all"), key("cities", "windows"),
                 key("trending", "windows"), key("members", "windows"), key.fence, key("totals")):
        assert r.ttl(name) == -1, name


def test_a_second_apply_with_a_stale_fence_raises_and_changes_nothing(sink: RedisSummarySink) -> None:
    sink.apply(BATCH, {}, {RAW0: 10, RAW1: 4}, META)
    before = {name: sink.client.dump(name) for name in sink.client.scan_iter(f"{sink.keys.prefix}:*")}
    with pytest.raises(FenceMoved, match=r"the Redis fence moved .*\('rsvps.raw', 0\): 10"):
        sink.apply(BATCH, {}, {RAW0: 10, RAW1: 4}, META)
    after = {name: sink.client.dump(name) for name in sink.client.scan_iter(f"{sink.keys.prefix}:*")}
    assert after == before
    # with the fence it read, the next batch applies; a partition new to the fence starts unset
    sink.apply([inc("city", T0, "Barcelona")], sink.fence(), {RAW0: 15, ("rsvps.raw", 2): 1}, META)
    assert sink.client.hget(sink.keys("cities", T0), "Barcelona") == "3"
    assert sink.fence() == {RAW0: 15, RAW1: 4, ("rsvps.raw", 2): 1}



def test_an_apply_after_redis_lost_the_view_names_the_loss_not_another_query(sink: RedisSummarySink) -> None:
    sink.apply(BATCH, {}, {RAW0: 10, RAW1: 4}, META)
    expected = sink.fence()
    sink.client.delete(*sink.client.scan_iter(f"{sink.keys.prefix}:*"))   # the view's data is gone
    with pytest.raises(RedisViewLost, match=r"Redis lost the view's data.*kappa reprocess start") as lost:
        sink.apply([inc("city", T0, "Barcelona")], expected, {RAW0: 15, RAW1: 4}, META)
    assert "another query" not in str(lost.value)
    assert not list(sink.client.scan_iter(f"{sink.keys.prefix}:*"))   # no partial counts written


@pytest.mark.parametrize("batch", ["a_partition_new_to_the_fence", "member_ids"])
def test_nothing_of_a_batch_reaches_a_redis_that_lost_the_view(sink: RedisSummarySink, batch: str) -> None:
    """A batch expecting a fence finds none: neither its first offsets of another partition nor
    its member ids (added outside the fenced transaction) are written into the emptied Redis."""
    sink.apply(BATCH, {}, {RAW0: 10}, META)
    expected = sink.fence()
    sink.client.delete(*sink.client.scan_iter(f"{sink.keys.prefix}:*"))   # the view's data is gone
    rows, new_fence = (([inc("city", T0, "Madrid")], {RAW1: 4}) if batch == "a_partition_new_to_the_fence"
                       else ([inc("member", T0, "7"), inc("member_all", 0, "7")], {RAW0: 12}))
    with pytest.raises(RedisViewLost, match=r"Redis lost the view's data"):
        sink.apply(rows, expected, new_fence, META)
    assert not list(sink.client.scan_iter(f"{sink.keys.prefix}:*"))


@pytest.mark.parametrize("when", ["between_the_check_and_the_transaction", "between_two_chunks"])
def test_a_loss_in_the_middle_of_a_chunked_apply_names_the_loss(sink: RedisSummarySink, when: str) -> None:
    sink.apply(BATCH, {}, {RAW0: 10, RAW1: 4}, META)
    expected = sink.fence()
    sink._apply.chunk_args = 8
    wire = sink._apply._wire
    begin, calls = wire.begin, []

    def flush() -> None:
        sink.client.delete(*sink.client.scan_iter(f"{sink.keys.prefix}:*"))

    def lose_redis_after_two_chunks(body, commands, reads):
        calls.append(commands)
        if len(calls) == 3 and when == "between_the_check_and_the_transaction":
            flush()   # the fence is WATCHed: Redis refuses the chunk's transaction
        finish = begin(body, commands, reads)
        if len(calls) == 2 and when == "between_two_chunks":
            return lambda: (finish(), flush())[0]   # the next chunk's check finds no fence
        return finish

    wire.begin = lose_redis_after_two_chunks
    with pytest.raises(RedisViewLost, match=r"Redis lost the view's data") as lost:
        sink.apply(BATCH, expected, {RAW0: 20, RAW1: 8}, META)
    assert "another" not in str(lost.value)
    assert not list(sink.client.scan_iter(f"{sink.keys.prefix}:*"))


def test_the_scripts_reads_give_absent_fields_as_zero_and_a_refused_read_fails_the_apply(
        sink: RedisSummarySink) -> None:
    records = sink.apply_and_read([inc("event", 0, "e9", n=0, no=1)], {}, {RAW0: 1}, META,
                                  windows_ms=WINDOWS_MS, top_n=3)
    assert records == [{"kind": "event", "key": "event/e9", "event_id": "e9", "event_name": None,
                        "yes": 0, "no": 1, "guests": 0}]
    # a task added this window's members (no PFADD here); another program made the key a string
    sink.client.set(sink.keys("members", T0), "not a HyperLogLog")
    with pytest.raises(SummarySinkError, match=r"1 Redis command\(s\) of batch 4 failed .*PFCOUNT "):
        sink.apply_and_read([inc("members_added", T0, "", n=1)], sink.fence(), {RAW0: 2}, META,
                            windows_ms=WINDOWS_MS, top_n=3)
    assert sink.fence() == {RAW0: 2}, "the writes were made and the fence moved, as for a refused write"
    with pytest.raises(SummarySinkError, match=r"1 Redis read\(s\) failed, first: PFCOUNT "):
        sink.read_back(sink.changed([inc("members_added", T0, "", n=1)]), WINDOWS_MS, top_n=3)

def test_batches_with_nothing_windowed_or_nothing_at_all_apply(sink: RedisSummarySink) -> None:
    """A batch of late rows only feeds all-time kinds; a replayed batch (every row below the fence,
    filtered out) has no increments: both move the fence and change nothing else."""
    late_only = [inc("topic", 0, "Salsa"), inc("member_all", 0, "9"), inc("event", 0, "e1", n=0, no=1)]
    applied = sink.apply(late_only, {}, {RAW0: 3}, META)
    assert sink.client.zscore(sink.keys("topics", "all"), "Salsa") == 1.0
    assert not sink.client.exists(sink.keys("topics", "minute", "windows"))
    assert not sink.client.exists(sink.keys("cities", "windows"))
    assert [r["kind"] for r in sink.read_back(applied, WINDOWS_MS, top_n=3)] == ["event", "top_topics"]
    applied = sink.apply([], sink.fence(), {RAW0: 3}, META)
    assert sink.read_back(applied, WINDOWS_MS, top_n=3) == []
    assert sink.fence() == {RAW0: 3}
    assert sink.client.zscore(sink.keys("topics", "all"), "Salsa") == 1.0


def test_metrics_hash_and_history(sink: RedisSummarySink) -> None:
    for batch_id in range(102):
        sink.record_metrics("q-test", {"batch_id": batch_id, "input_rows": 10 * batch_id,
                                       "end_offsets": {"rsvps.raw": {"0": batch_id}}})
    r, key = sink.client, sink.keys
    assert r.hgetall(key("metrics", "q-test")) == {
        "batch_id": "101", "input_rows": "1010", "end_offsets": '{"rsvps.raw": {"0": 101}}'}
    history = [json.loads(item) for item in r.lrange(key("metrics", "q-test", "history"), 0, -1)]
    assert len(history) == 100
    assert [h["batch_id"] for h in history[:2]] == [101, 100]
    assert history[-1]["batch_id"] == 2
    assert history[0]["end_offsets"] == {"rsvps.raw": {"0": 101}}


@pytest.mark.parametrize("chunk_args", [8, 20_000])
def test_names_outside_ascii_and_with_separators_arrive_intact(sink: RedisSummarySink,
                                                               chunk_args: int) -> None:
    """The apply travels as RESP bytes built column-wise (lengths in bytes, not characters): its
    strings, event ids and names among them, must come out as sent, and read back the same."""
    sink._apply.chunk_args = chunk_args
    names = ["Zürich", "東京", 'São "Paulo"', "a:b\\c", "tab\tand\r\nnewline", "", "-1\r\n-ERR"]
    records = sink.apply_and_read(
        [inc("city", T0, name, 2) for name in names] + [inc("topic", 0, name) for name in names]
        + [inc("event", 0, f"é{i}{name}", n=i + 1, no=i % 2, label=name) for i, name in enumerate(names)],
        {}, {RAW0: 1}, META, windows_ms=WINDOWS_MS, top_n=10)
    assert sink.client.hgetall(sink.keys("cities", T0)) == {name: "2" for name in names}
    assert sink.client.zrange(sink.keys("topics", "all"), 0, -1) == sorted(names, key=str.encode)
    for i, name in enumerate(names):
        assert sink.client.hgetall(sink.keys("event", f"é{i}{name}")) == {
            "yes": str(i + 1), "event_name": name, **({"no": "1"} if i % 2 else {})}
    events = {r["event_id"]: r for r in records if r["kind"] == "event"}
    assert {event_id: (r["yes"], r["no"], r["event_name"]) for event_id, r in events.items()} == {
        f"é{i}{name}": (i + 1, i % 2, name) for i, name in enumerate(names)}


def test_a_failing_write_moves_the_fence_applies_the_rest_and_raises(sink: RedisSummarySink) -> None:
    """As with MULTI/EXEC, one refused command (a key of another type under the prefix) neither
    stops the rest nor leaves the fence behind: a replay must not count the rest twice."""
    sink.client.set(sink.keys("cities", T0), "not a hash")
    with pytest.raises(SummarySinkError, match=r"1 Redis command\(s\) of batch 4 failed .*HINCRBY "
                       + sink.keys("cities", T0) + ".*WRONGTYPE"):
        sink.apply(BATCH, {}, {RAW0: 10}, META)
    assert sink.fence() == {RAW0: 10}
    assert sink.client.hget(sink.keys("cities", T0 + MINUTE), "Madrid") == "1"
    assert sink.client.zscore(sink.keys("topics", "all"), "Salsa") == 5.0


def test_a_batch_touching_thousands_of_windows_applies_whole(sink: RedisSummarySink) -> None:
    """A replay batch can span days of minute windows; the index of every one is written (the
    script's commands take no more arguments than Lua can hand to Redis)."""
    windows = 9_000
    sink.apply([inc("city", T0 + k * MINUTE, "Madrid") for k in range(windows)], {}, {RAW0: 1}, META)
    assert sink.client.zcard(sink.keys("cities", "windows")) == windows
    assert sink.client.hget(sink.keys("cities", T0 + (windows - 1) * MINUTE), "Madrid") == "1"
    assert sink.fence() == {RAW0: 1}


def test_a_refused_event_write_is_named_and_the_other_events_are_counted(sink: RedisSummarySink) -> None:
    """An event hash that is not a hash: its counter and name writes are refused (and named), the
    other events of the same transaction are counted, the fence moves."""
    sink._apply.chunk_args = 30   # two events per chunk, the bad one in the middle of one
    sink.client.set(sink.keys("event", "e2"), "not a hash")
    batch = [inc("event", 0, f"e{i}", n=1, label=f"E{i}") for i in range(1, 5)]
    with pytest.raises(SummarySinkError, match=r"2 Redis command\(s\) of batch 4 failed .*HINCRBY "
                       + sink.keys("event", "e2") + ": WRONGTYPE"):
        sink.apply(batch, {}, {RAW0: 4}, META)
    assert sink.fence() == {RAW0: 4}
    for i in (1, 3, 4):
        assert sink.client.hgetall(sink.keys("event", f"e{i}")) == {"yes": "1", "event_name": f"E{i}"}


def test_a_chunked_apply_resumed_after_its_first_chunks_makes_each_chunk_once(sink: RedisSummarySink) -> None:
    """The first two chunks made (as by a job killed between chunks), then the whole apply again:
    the fence hash's chunk marker skips what was made; the totals count once."""
    sink._apply.chunk_args = 8
    wire = sink._apply._wire
    begin, calls = wire.begin, []

    def two_chunks_then_stop(body, commands, reads):
        if len(calls) == 2:
            raise ConnectionError("killed between chunks")
        calls.append(commands)
        return begin(body, commands, reads)

    wire.begin = two_chunks_then_stop
    with pytest.raises(ConnectionError):
        sink.apply(BATCH, {}, {RAW0: 10, RAW1: 4}, META)
    r, key = sink.client, sink.keys
    assert r.hget(key.fence, "apply_chunk") == "2" and sink.fence() == {}
    wire.begin = begin
    sink.apply(BATCH, {}, {RAW0: 10, RAW1: 4}, META)
    assert sink.fence() == {RAW0: 10, RAW1: 4} and r.hget(key.fence, "apply_marker") is None
    assert r.hgetall(key("totals")) == {"input": "9", "valid": "7", "dlq": "2", "late": "1"}
    assert r.hgetall(key("cities", T0)) == {"Barcelona": "2"}
    assert r.zscore(key("topics", "all"), "Salsa") == 5

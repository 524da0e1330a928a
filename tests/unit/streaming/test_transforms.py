"""The streaming job's pure transforms on tiny inline DataFrames of Spark's Kafka source schema.

Every expected value is written by hand from docs/streaming.md; the tests collect as few times as
they can (one Spark job per contract) to stay fast on a shared machine.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual

from pipelines.rsvp import transforms as T

KAFKA_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
                "timestamp timestamp, timestampType int")
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
KAFKA_TS = datetime(2026, 1, 1, 0, 0, 0, 120_000, tzinfo=UTC)  # T0 + 120 ms
RULES = T.Rules(min_event_ms=946_684_800_000, future_skew_ms=300_000, max_record_bytes=2_000)
DELETE = object()

VALID: dict[str, Any] = {
    "venue": {"venue_name": "Sala B", "lon": 2.159007, "lat": 41.365682, "venue_id": 24231817},
    "visibility": "public", "response": "yes", "guests": 1,
    "member": {"member_id": 10343154, "member_name": "Ana"},
    "rsvp_id": 1800000003, "mtime": T0,
    "event": {"event_name": "Stand-up Comedy Mixer", "event_id": "gyzheubzcxwz",
              "time": 1767300000000, "event_url": "https://example.org/e"},
    "group": {"group_topics": [{"urlkey": "comedy", "topic_name": "Stand-up Comedy"},
                               {"urlkey": "salsa", "topic_name": "Salsa"}],
              "group_city": "Barcelona", "group_country": "es", "group_id": 123,
              "group_name": "BCN Comedy", "group_urlname": "bcn-comedy",
              "group_lat": 41.39, "group_lon": 2.17},
}


def record(**changes: Any) -> bytes:
    """VALID with changes: ``group__group_city=None`` sets a nested value, DELETE removes it."""
    data = copy.deepcopy(VALID)
    for path, value in changes.items():
        *parents, name = path.split("__")
        target = data
        for part in parents:
            target = target[part]
        if value is DELETE:
            del target[name]
        else:
            target[name] = value
    return json.dumps(data).encode()


def kafka_frame(spark, values: list[bytes], timestamp: datetime = KAFKA_TS, partition: int = 0):
    """Kafka source rows of topic rsvps.raw, offsets 0, 1, 2, ... in the order given."""
    rows = [(b"k%d" % i, value, "rsvps.raw", partition, i, timestamp, 0) for i, value in enumerate(values)]
    return spark.createDataFrame(rows, KAFKA_SCHEMA)


REASONS: dict[str, tuple[bytes, str | None]] = {
    "valid": (record(), None),
    "valid without venue": (record(venue=DELETE), None),
    "valid at the skew limit": (record(mtime=T0 + 120 + 300_000), None),
    "oversize": (b'{"a": "' + b"x" * 2_000 + b'"}', "oversize: 2009 bytes > max_record_bytes 2000"),
    "invalid_json": (b'{"rsvp_id": 1,', "invalid_json: the value is not valid JSON"),
    "empty value": (b"", "invalid_json: the value is not valid JSON"),
    "array": (b"[1, 2]", "not_an_object: expected a JSON object"),
    "string": (b'"an rsvp"', "not_an_object: expected a JSON object"),
    "object after a newline": (b"\n" + record(), None),
    "rsvp_id as string": (record(rsvp_id="1800000003"), "wrong_type: rsvp_id must be an integer"),
    "mtime as float": (record(mtime=1767225600000.5), "wrong_type: mtime must be an integer"),
    "group as string": (record(group="BCN Comedy"), "wrong_type: group must be an object"),
    "event_id as number": (record(event__event_id=42), "wrong_type: event.event_id must be a string"),
    "city as object": (record(group__group_city={"name": "Barcelona"}),
                       "wrong_type: group.group_city must be a string"),
    "topic_name as number": (record(group__group_topics=[{"urlkey": "n", "topic_name": 5}]),
                             "wrong_type: group.group_topics[].topic_name must be a string"),
    "no member.member_id": (record(member__member_id=DELETE), "missing_field: member.member_id"),
    "no event.event_id": (record(event__event_id=DELETE), "missing_field: event.event_id"),
    "no group.group_city": (record(group__group_city=DELETE), "missing_field: group.group_city"),
    "null group.group_city": (record(group__group_city=None), "missing_field: group.group_city"),
    "no topic_name": (record(group__group_topics=[{"urlkey": "salsa"}]),
                      "missing_field: group.group_topics[].topic_name"),
    "no venue.lat": (record(venue__lat=DELETE), "missing_field: venue.lat"),
    "two missing": (record(rsvp_id=DELETE, event__event_id=DELETE),
                    "missing_field: rsvp_id, event.event_id"),
    "maybe": (record(response="maybe"), 'invalid_value: response must be yes or no, found "maybe"'),
    "negative guests": (record(guests=-2), "invalid_value: guests must be >= 0, found -2"),
    "empty city": (record(group__group_city="   "), "invalid_value: group.group_city is empty"),
    "blank city": (record(group__group_city="\t\n"), "invalid_value: group.group_city is empty"),
    "latitude 91": (record(venue__lat=91.0), "invalid_value: latitude out of range: 91.0"),
    "before 2000": (record(mtime=946_684_799_999),
                    "bad_event_time: mtime 946684799999 is before 946684800000 (2000-01-01)"),
    "too far ahead": (record(mtime=T0 + 120 + 300_001),
                      "bad_event_time: mtime 1767225900121 is more than 300000 ms after the "
                      "record's Kafka timestamp 1767225600120"),
}


def test_every_reason_is_exact(spark) -> None:
    cases = list(REASONS.items())
    parsed = kafka_frame(spark, [value for _, (value, _) in cases]).transform(T.parse_rsvps(RULES))
    rows = parsed.transform(T.reason_code).select("offset", "reason", "reason_code").collect()
    assert {cases[row.offset][0]: row.reason for row in rows} == {name: reason for name, (_, reason) in cases}
    assert all(row.reason_code == (row.reason.split(":")[0] if row.reason else None) for row in rows)


ANALYZED_COLUMNS = ["schema_version", "rsvp_id", "event_time_ms", "event_time", "event_id",
                    "event_name", "group_id", "group_name", "member_id", "response", "guests",
                    "topics", "city", "country", "state", "lat", "lon", "venue_id", "source_topic",
                    "source_partition", "source_offset", "kafka_timestamp_ms", "ingest_lag_ms", "late"]
GRACE_MS = 60_000


def analyzed_input(spark):
    """Three valid records: venue coordinates; group coordinates (late); exactly at the grace.

    And an invalid one that ``T.valid`` leaves out.
    """
    return kafka_frame(spark, [
        record(group__group_city="  new   york ", group__group_country=" us ", group__group_state="NY",
               group__group_topics=[{"urlkey": "a", "topic_name": "Salsa"},
                                    {"urlkey": "b", "topic_name": "Salsa"}]),
        record(venue=DELETE, mtime=T0 - 60_001, response="no", guests=0, rsvp_id=7),
        record(mtime=T0 - GRACE_MS, group__group_city="SAN FRANCISCO", rsvp_id=8),
        b"[]",  # invalid: left out by T.valid
    ]).transform(T.parse_rsvps(RULES)).transform(T.flag_late(GRACE_MS)).transform(T.valid)


def test_analyzed_rows_by_hand(spark) -> None:
    common = {"schema_version": 1, "event_id": "gyzheubzcxwz", "event_name": "Stand-up Comedy Mixer",
              "group_id": 123, "group_name": "BCN Comedy", "member_id": 10343154,
              "source_topic": "rsvps.raw", "source_partition": 0,
              "kafka_timestamp_ms": 1767225600120}
    expected = [
        {**common, "rsvp_id": 1800000003, "event_time_ms": T0, "event_time": "2026-01-01T00:00:00.000Z",
         "response": "yes", "guests": 1, "topics": ["Salsa"], "city": "New York", "country": "US",
         "state": "NY", "lat": 41.365682, "lon": 2.159007, "venue_id": 24231817, "source_offset": 0,
         "ingest_lag_ms": 120, "late": False},
        {**common, "rsvp_id": 7, "event_time_ms": 1767225539999, "event_time": "2025-12-31T23:58:59.999Z",
         "response": "no", "guests": 0, "topics": ["Stand-up Comedy", "Salsa"], "city": "Barcelona",
         "country": "ES", "state": None, "lat": 41.39, "lon": 2.17, "venue_id": None,
         "source_offset": 1, "ingest_lag_ms": 60_121, "late": True},
        {**common, "rsvp_id": 8, "event_time_ms": 1767225540000, "event_time": "2025-12-31T23:59:00.000Z",
         "response": "yes", "guests": 1, "topics": ["Stand-up Comedy", "Salsa"],
         "city": "San Francisco", "country": "ES", "state": None, "lat": 41.365682, "lon": 2.159007,
         "venue_id": 24231817, "source_offset": 2, "ingest_lag_ms": 60_120, "late": False},
    ]
    result = analyzed_input(spark).transform(T.analyzed())
    assert result.columns == ANALYZED_COLUMNS
    assertDataFrameEqual(result, [Row(**{name: row[name] for name in ANALYZED_COLUMNS}) for row in expected])


def test_stream_time_is_per_partition_and_counts_valid_records_only(spark) -> None:
    # partition 0: T0, then a record 2 min behind it (late); partition 1 starts with that same old
    # time (nothing before it there: on time), then an invalid record far ahead (it does not move
    # the stream time: the next one is on time), then one 61 s behind its stream time (late)
    p0 = kafka_frame(spark, [record(mtime=T0), record(mtime=T0 - 120_000, rsvp_id=2)])
    p1 = kafka_frame(spark, [record(mtime=T0 - 120_000, rsvp_id=3),
                             record(mtime=T0 + 10**9, response="maybe", rsvp_id=4),
                             record(mtime=T0 - 110_000, rsvp_id=5),
                             record(mtime=T0 - 120_000 - 61_000, rsvp_id=6)], partition=1)
    result = (p0.unionByName(p1).transform(T.parse_rsvps(RULES)).transform(T.flag_late(GRACE_MS))
              .select("partition", "offset", "late"))
    expected = [(0, 0, False), (0, 1, True), (1, 0, False), (1, 1, False), (1, 2, False), (1, 3, True)]
    assertDataFrameEqual(result, [Row(partition=p, offset=o, late=late) for p, o, late in expected])


def test_analyzed_records_key_and_json(spark) -> None:
    rows = (analyzed_input(spark).where("offset = 1").transform(T.analyzed())
            .transform(T.analyzed_records("rsvps.analyzed")).collect())
    assert len(rows) == 1
    assert (rows[0].topic, bytes(rows[0].key)) == ("rsvps.analyzed", b"gyzheubzcxwz")
    assert json.loads(bytes(rows[0].value)) == {
        "schema_version": 1, "rsvp_id": 7, "event_time_ms": 1767225539999,
        "event_time": "2025-12-31T23:58:59.999Z", "event_id": "gyzheubzcxwz",
        "event_name": "Stand-up Comedy Mixer", "group_id": 123, "group_name": "BCN Comedy",
        "member_id": 10343154, "response": "no", "guests": 0, "topics": ["Stand-up Comedy", "Salsa"],
        "city": "Barcelona", "country": "ES", "state": None, "lat": 41.39, "lon": 2.17,
        "venue_id": None, "source_topic": "rsvps.raw", "source_partition": 0, "source_offset": 1,
        "kafka_timestamp_ms": 1767225600120, "ingest_lag_ms": 60121, "late": True}


def test_dead_letters_headers_and_truncation(spark) -> None:
    big = b"x" * ((1 << 20) + 5)
    invalid = spark.createDataFrame(
        [(b"k1", b"[]", "rsvps.raw", 2, 17, "not_an_object: expected a JSON object"),
         (None, big, "rsvps.raw", 0, 3, "oversize: 1048581 bytes > max_record_bytes 65536")],
        "key binary, value binary, topic string, partition int, offset long, reason string")
    rows = sorted(invalid.transform(T.dead_letters("rsvps.dlq")).collect(), key=lambda r: len(r.value))
    small, large = rows

    def headers(row: Row) -> list[tuple[str, bytes]]:
        return [(h.key, bytes(h.value)) for h in row.headers]

    assert (small.topic, bytes(small.key), bytes(small.value)) == ("rsvps.dlq", b"k1", b"[]")
    assert headers(small) == [
        ("kappa.reason", b"not_an_object: expected a JSON object"),
        ("kappa.source", b"stream:rsvps.raw/2/17"),
        ("kappa.source_topic", b"rsvps.raw"),
        ("kappa.source_partition", b"2"),
        ("kappa.source_offset", b"17"),
    ]
    assert large.key is None
    assert bytes(large.value) == b"x" * (1 << 20)
    assert headers(large) == [
        ("kappa.reason", b"oversize: 1048581 bytes > max_record_bytes 65536"),
        ("kappa.source", b"stream:rsvps.raw/0/3"),
        ("kappa.source_topic", b"rsvps.raw"),
        ("kappa.source_partition", b"0"),
        ("kappa.source_offset", b"3"),
        ("kappa.original_bytes", b"1048581"),
    ]


def test_normalize_city() -> None:
    from pipelines.rsvp.validate import normalize_city

    assert [normalize_city(c) for c in ("  new   york ", "BARCELONA", "\tsant  cugat\n", "o'neil city")] == [
        "New York", "Barcelona", "Sant Cugat", "O'neil City"]

"""``validate.parse`` on hostile and edge-case values: plain Python, reasons written by hand.

The typed fast path and the field-by-field fallback must agree: every case here goes through
``parse`` and its expected outcome is written out, whichever path answers it.
"""

from __future__ import annotations

import json

import pytest

from pipelines.rsvp.validate import Rules, normalize_city, parse

from .test_transforms import DELETE, T0, record

RULES = Rules(min_event_ms=946_684_800_000, future_skew_ms=300_000, max_record_bytes=2_000)
KAFKA_MS = T0 + 120

CASES: dict[str, tuple[bytes, str | None]] = {
    "integer coordinates are numbers": (record(venue__lat=41, venue__lon=2), None),
    "unknown extra fields are ignored": (record(extra={"nested": [1, {"a": None}]}), None),
    "photo may be present": (record(member__photo="https://example.org/p.jpeg"), None),
    "null optional venue": (record(venue=None), None),
    "duplicate key, last wins": (record()[:-1] + b', "response": "no"}', None),
    "trailing bytes": (record() + b" x", "invalid_json: the value is not valid JSON"),
    "NaN is not JSON": (record()[:-1] + b', "x": NaN}', "invalid_json: the value is not valid JSON"),
    "not UTF-8": (b'{"a": "\xff"}', "invalid_json: the value is not valid JSON"),
    "null value": (b"null", "not_an_object: expected a JSON object"),
    "too deep": (b"[" * 40 + b"]" * 40,
                 "too_deep: arrays and objects nested deeper than 32 levels"),
    "number too long": (b'{"rsvp_id": ' + b"9" * 120 + b"}",
                        "number_too_long: a number with more than 100 digits"),
    "rsvp_id beyond a long": (record(rsvp_id=2**63), "wrong_type: rsvp_id must be an integer"),
    "boolean guests": (record(guests=True), "wrong_type: guests must be an integer"),
    "string latitude": (record(venue__lat="41.3"), "wrong_type: venue.lat must be a number"),
    "topics not an array": (record(group__group_topics={"a": 1}),
                            "wrong_type: group.group_topics must be an array"),
    "topic not an object": (record(group__group_topics=["salsa"]),
                            "wrong_type: group.group_topics[] must be an object"),
    "two wrong types, schema order": (
        record(guests="1", event__event_id=42),
        "wrong_type: guests must be an integer, event.event_id must be a string"),
    "wrong type wins over missing": (record(guests="1", rsvp_id=DELETE),
                                     "wrong_type: guests must be an integer"),
    "missing nested in optional venue": (record(venue__venue_id=DELETE), "missing_field: venue.venue_id"),
    "two invalid values": (record(response="maybe", guests=-1),
                           'invalid_value: response must be yes or no, found "maybe"; '
                           "guests must be >= 0, found -1"),
    "longitude out of range": (record(venue__lon=-180.5),
                               "invalid_value: longitude out of range: -180.5"),
    "unicode response quoted as is": (record(response="sí"),
                                      'invalid_value: response must be yes or no, found "sí"'),
}


@pytest.mark.parametrize("name", list(CASES))
def test_reason(name: str) -> None:
    value, reason = CASES[name]
    rsvp, found = parse(value, KAFKA_MS, RULES)
    assert found == reason
    assert (rsvp is None) == (reason is not None and not reason.startswith(("invalid_value", "bad_event")))


def test_a_valid_record_is_typed() -> None:
    rsvp, reason = parse(record(venue__lat=41), KAFKA_MS, RULES)
    assert reason is None
    assert (rsvp.venue.lat, type(rsvp.venue.lat)) == (41.0, float)
    assert rsvp.group.group_topics[1].topic_name == "Salsa"
    assert rsvp.member.photo is None


def test_unknown_kafka_time_skips_the_future_rule() -> None:
    far = json.loads(record())
    far["mtime"] = KAFKA_MS + 10**9
    assert parse(json.dumps(far).encode(), None, RULES)[1] is None
    assert parse(json.dumps(far).encode(), KAFKA_MS, RULES)[1].startswith("bad_event_time: ")


def test_normalize_city_whitespace_and_case() -> None:
    assert normalize_city(" \x0bsan\x0c  JOSÉ\r\n") == "San José"
    assert normalize_city("\t \n") == ""

"""The structural checks the collector applies, and the full schema tree."""

from __future__ import annotations

import json

import pytest

from jobs.common import rsvp_schema as schema

VALID = {
    "venue": {"venue_name": "Hall", "lon": 1.5, "lat": 2, "venue_id": 9},
    "visibility": "public", "response": "yes", "guests": 0,
    "member": {"member_id": 1, "member_name": "Ann"},
    "rsvp_id": 123, "mtime": 1_700_000_000_000,
    "event": {"event_name": "E", "event_id": "abc", "time": 1, "event_url": "https://x"},
    "group": {"group_topics": [{"urlkey": "k", "topic_name": "K"}], "group_city": "C",
              "group_country": "us", "group_id": 5, "group_name": "G", "group_urlname": "g",
              "group_lat": 1.0, "group_lon": 2.0},
}


def _raw(record) -> bytes:
    return json.dumps(record).encode()


def test_valid_record_passes_with_rsvp_id_as_key():
    check = schema.check_structure(_raw(VALID), 65_536)
    assert check.ok and check.key == b"123" and check.reason is None
    assert schema.type_errors(VALID) == []


@pytest.mark.parametrize(("raw", "code", "detail"), [
    (b'{"rsvp_id": 1', "invalid_json", ""),
    (b"\xff\xfe", "invalid_json", ""),
    (b"[1, 2]", "not_an_object", "found array"),
    (b'"text"', "not_an_object", "found string"),
    (_raw({k: v for k, v in VALID.items() if k != "rsvp_id"}), "missing_field", "rsvp_id"),
    (_raw({**VALID, "event": None}), "missing_field", "event"),
    (_raw({**VALID, "rsvp_id": "123"}), "wrong_type", 'rsvp_id must be an integer, found string "123"'),
    (_raw({**VALID, "rsvp_id": True}), "wrong_type", "found boolean"),
    (_raw({**VALID, "mtime": 1.5}), "wrong_type", "mtime must be an integer, found number"),
])
def test_structural_rejections_name_the_problem(raw, code, detail):
    check = schema.check_structure(raw, 65_536)
    assert not check.ok and check.code == code and check.key is None
    assert detail in check.reason


def test_oversize_is_checked_before_parsing():
    check = schema.check_structure(b"x" * 101, 100)
    assert check.code == "oversize" and check.reason == "oversize: 101 bytes > max_record_bytes 100"


def test_venue_is_optional_and_business_fields_are_not_the_collectors_business():
    without_venue = {k: v for k, v in VALID.items() if k != "venue"}
    assert schema.check_structure(_raw(without_venue), 65_536).ok
    odd = {**VALID, "response": "maybe", "member": "not an object"}
    assert schema.check_structure(_raw(odd), 65_536).ok
    assert schema.type_errors(odd) == ["member: expected object, found string"]


def test_type_errors_walk_the_whole_tree():
    record = json.loads(json.dumps(VALID))
    record["group"]["group_topics"][0]["urlkey"] = 3
    record["event"]["event_id"] = 42
    del record["member"]["member_name"]
    assert schema.type_errors(record) == [
        "member.member_name: missing",
        "event.event_id: expected string, found integer",
        "group.group_topics[0].urlkey: expected string, found integer",
    ]


def test_required_top_level_keys_are_derived_from_the_one_schema():
    assert set(schema.REQUIRED_TOP_LEVEL) == {
        "visibility", "response", "guests", "member", "rsvp_id", "mtime", "event", "group"}


def test_spark_struct_type_mirrors_the_schema():
    pytest.importorskip("pyspark")
    struct = schema.to_struct_type()
    assert [f.name for f in struct.fields] == [f.name for f in schema.RSVP_FIELDS]
    topics = struct["group"].dataType["group_topics"].dataType
    assert topics.elementType.fieldNames() == ["urlkey", "topic_name"]
    assert struct["rsvp_id"].dataType.typeName() == "long"
    assert struct["event"].dataType["event_id"].dataType.typeName() == "string"

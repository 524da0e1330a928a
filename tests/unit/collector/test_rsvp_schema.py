"""The structural checks the collector applies, and the full schema tree."""

from __future__ import annotations

import json

import pytest

from pipelines.rsvp import schema

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


# --- issue 18 item 1: parser limits that do not depend on Python's recursion or digit limits ----

TOO_DEEP_32 = "too_deep: arrays and objects nested deeper than 32 levels"


@pytest.mark.parametrize(("raw", "reason"), [
    (b"[" * 5000 + b"]" * 5000, TOO_DEEP_32),
    (b"[" * 33 + b"]" * 33, TOO_DEEP_32),
    (b'{"a":' + b'{"b":' * 40 + b"1" + b"}" * 41, TOO_DEEP_32),
    (b'["]",' * 40 + b"1" + b"]" * 40, TOO_DEEP_32),
    (b'{"rsvp_id":' + b"9" * 5000 + b"}", "number_too_long: a number with more than 100 digits"),
    (b'{"x":"\\\\","rsvp_id":' + b"1" * 101 + b"}", "number_too_long: a number with more than 100 digits"),
])
def test_documents_the_parser_must_not_see_are_rejected_with_a_reason(raw, reason):
    check = schema.check_structure(raw, 1 << 20)
    assert check.reason == reason and check.key is None


@pytest.mark.parametrize(("raw", "code"), [
    (b"[" * 32 + b"]" * 32, "not_an_object"),             # 32 levels: parsed, then judged
    (b'{"a":"' + b"[" * 100 + b'"}', "missing_field"),    # brackets inside a string do not count
    (b'{"a":"\\"' + b"[{" * 60 + b'"}', "missing_field"),  # nor after an escaped quote
    (b'{"a":"' + b"7" * 300 + b'"}', "missing_field"),    # digits inside a string do not count
    (b'{"a":' + b"1" * 100 + b"}", "missing_field"),      # 100 digits are allowed
])
def test_parser_limits_count_only_structure(raw, code):
    assert schema.check_structure(raw, 1 << 20).code == code


def test_parser_limit_reasons_are_dlq_reason_codes():
    assert {"too_deep", "number_too_long", "empty_batch"} <= set(schema.REASON_CODES)


def test_a_deep_document_is_rejected_whatever_the_recursion_limit():
    import sys

    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(100)  # the guard must not lean on RecursionError either way
    try:
        assert schema.check_structure(b"[" * 200 + b"]" * 200, 1 << 20).code == "too_deep"
    finally:
        sys.setrecursionlimit(previous)


# --- issue 18 item 16: one case per required field and per type rule, reasons by hand -----------

@pytest.mark.parametrize("name", ["visibility", "response", "guests", "member", "rsvp_id", "mtime",
                                  "event", "group"])
def test_each_required_field_missing_or_null_is_named(name):
    absent = schema.check_structure(_raw({k: v for k, v in VALID.items() if k != name}), 65_536)
    assert absent.reason == f"missing_field: {name}"
    null = schema.check_structure(_raw({**VALID, name: None}), 65_536)
    assert null.reason == f"missing_field: {name}"


def test_all_missing_fields_are_listed_in_schema_order():
    record = {k: v for k, v in VALID.items() if k not in ("group", "visibility", "mtime")}
    assert schema.check_structure(_raw(record), 65_536).reason == "missing_field: visibility, mtime, group"


@pytest.mark.parametrize(("field", "value", "reason"), [
    ("rsvp_id", "123", 'wrong_type: rsvp_id must be an integer, found string "123"'),
    ("rsvp_id", True, "wrong_type: rsvp_id must be an integer, found boolean true"),
    ("rsvp_id", 1.0, "wrong_type: rsvp_id must be an integer, found number 1.0"),
    ("rsvp_id", [1], "wrong_type: rsvp_id must be an integer, found array [1]"),
    ("rsvp_id", 2**63, "wrong_type: rsvp_id must fit a 64-bit long, found 9223372036854775808"),
    ("mtime", "2026-01-01", 'wrong_type: mtime must be an integer, found string "2026-01-01"'),
    ("mtime", {"ms": 1}, 'wrong_type: mtime must be an integer, found object {"ms": 1}'),
    ("mtime", -(2**63) - 1, "wrong_type: mtime must fit a 64-bit long, found -9223372036854775809"),
])
def test_each_type_rule_names_field_and_value(field, value, reason):
    assert schema.check_structure(_raw({**VALID, field: value}), 65_536).reason == reason


def test_the_64_bit_bounds_themselves_pass():
    check = schema.check_structure(_raw({**VALID, "rsvp_id": 2**63 - 1, "mtime": -(2**63)}), 65_536)
    assert check.ok and check.key == b"9223372036854775807"

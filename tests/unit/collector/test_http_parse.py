"""How request bodies become checked records."""

from __future__ import annotations

import pytest

from jobs.collector.http import parse_body
from pipelines.rsvp.schema import check_record

OK = (b'{"rsvp_id":1,"mtime":2,"visibility":"public","response":"yes","guests":0,'
      b'"member":{},"event":{},"group":{}}')


def test_json_lines_keep_their_bytes_and_skip_blank_lines():
    checked, batch = parse_body(OK + b"\r\n\n" + b"oops\n", "application/x-ndjson", 1000, check_record)
    assert batch and [raw for raw, _ in checked] == [OK, b"oops"]
    assert [check.code for _, check in checked] == [None, "invalid_json"]


def test_single_object_is_not_a_batch():
    checked, batch = parse_body(b"  " + OK + b"\n", "application/json", 1000, check_record)
    assert not batch and checked[0][0] == OK and checked[0][1].key == b"1"


def test_array_elements_are_checked_one_by_one_and_re_encoded_compactly():
    body = b"[" + OK + b', {"rsvp_id": 2}, ' + b'{"x": "' + b"y" * 200 + b'"}]'
    checked, batch = parse_body(body, "", 150, check_record)
    assert batch and checked[0][0] == OK
    assert checked[1][1].code == "missing_field" and checked[1][0] == b'{"rsvp_id":2}'
    assert checked[2][1].code == "oversize"


def test_a_broken_array_is_one_rejected_record():
    checked, batch = parse_body(b'[{"rsvp_id": 1}', "application/json", 1000, check_record)
    assert not batch and len(checked) == 1 and checked[0][1].code == "invalid_json"


@pytest.mark.parametrize(("body", "content_type"), [(b"", ""), (b" \n", "application/x-ndjson"),
                                                    (b"\r\n", "application/json")])
def test_empty_bodies_are_refused(body, content_type):
    with pytest.raises(ValueError, match="empty request body"):
        parse_body(body, content_type, 1000, check_record)


@pytest.mark.parametrize("body", [b"[]", b"[ ]", b" [\n] "])
def test_an_array_without_records_is_one_rejected_record_for_the_dlq(body):
    checked, batch = parse_body(body, "application/json", 1000, check_record)
    assert not batch and len(checked) == 1
    raw, check = checked[0]
    assert raw == body.strip() and check.reason == "empty_batch: a JSON array without records"


def test_a_deep_line_is_rejected_and_the_rest_of_the_batch_kept():
    deep = b"[" * 5000 + b"]" * 5000
    checked, batch = parse_body(OK + b"\n" + deep + b"\n" + OK + b"\n", "application/x-ndjson", 1 << 20,
                                check_record)
    assert batch and [raw for raw, _ in checked] == [OK, deep, OK]
    assert [check.reason for _, check in checked] == [
        None, "too_deep: arrays and objects nested deeper than 32 levels", None]


def test_a_deep_json_array_is_one_rejected_document():
    body = b"[" + OK + b"," + b"[" * 5000 + b"]" * 5000 + b"]"
    checked, batch = parse_body(body, "application/json", 1 << 20, check_record)
    assert not batch and checked[0][0] == body
    assert checked[0][1].reason == (
        "too_deep: arrays and objects nested deeper than 32 levels (the array is judged as one "
        "document; send JSON lines to have each record judged alone)")


def test_an_array_at_the_nesting_limit_is_split_into_records():
    element = b'{"a":' + b"[" * 30 + b"]" * 30 + b"}"  # 31 levels; 32 inside the array
    checked, batch = parse_body(b"[" + element + b"]", "application/json", 1 << 20, check_record)
    assert batch and checked[0][1].code == "missing_field"


def test_a_long_number_in_an_array_is_refused_before_parsing():
    checked, _ = parse_body(b'[{"rsvp_id":' + b"1" * 5000 + b"}]", "application/json", 1 << 20,
                            check_record)
    assert checked[0][1].reason.startswith("number_too_long: a number with more than 100 digits")


def test_an_array_element_with_a_lone_surrogate_is_kept_escaped():
    body = b'[{"rsvp_id":1,"member":"\\ud800"}]'
    checked, batch = parse_body(body, "application/json", 1000, check_record)
    assert batch and checked[0][0] == b'{"rsvp_id":1,"member":"\\ud800"}'
    assert checked[0][1].code == "missing_field"


@pytest.mark.parametrize("constant", [b"NaN", b"Infinity", b"-Infinity"])
@pytest.mark.parametrize("content_type", ["application/x-ndjson", "application/json", "array"])
def test_nan_and_infinity_are_not_json_in_any_body_shape(constant, content_type):
    record = OK.replace(b'"guests":0', b'"guests":' + constant)
    body = b"[" + record + b"]" if content_type == "array" else record
    checked, _ = parse_body(body, content_type, 1000, check_record)
    assert [check.code for _, check in checked] == ["invalid_json"]
    assert "is not JSON" in checked[0][1].reason

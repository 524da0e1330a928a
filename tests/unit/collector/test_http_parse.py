"""How request bodies become checked records."""

from __future__ import annotations

import pytest

from jobs.collector.http import parse_body

OK = (b'{"rsvp_id":1,"mtime":2,"visibility":"public","response":"yes","guests":0,'
      b'"member":{},"event":{},"group":{}}')


def test_json_lines_keep_their_bytes_and_skip_blank_lines():
    checked, batch = parse_body(OK + b"\r\n\n" + b"oops\n", "application/x-ndjson", 1000)
    assert batch and [raw for raw, _ in checked] == [OK, b"oops"]
    assert [check.code for _, check in checked] == [None, "invalid_json"]


def test_single_object_is_not_a_batch():
    checked, batch = parse_body(b"  " + OK + b"\n", "application/json", 1000)
    assert not batch and checked[0][0] == OK and checked[0][1].key == b"1"


def test_array_elements_are_checked_one_by_one_and_re_encoded_compactly():
    body = b"[" + OK + b', {"rsvp_id": 2}, ' + b'{"x": "' + b"y" * 200 + b'"}]'
    checked, batch = parse_body(body, "", 150)
    assert batch and checked[0][0] == OK
    assert checked[1][1].code == "missing_field" and checked[1][0] == b'{"rsvp_id":2}'
    assert checked[2][1].code == "oversize"


def test_a_broken_array_is_one_rejected_record():
    checked, batch = parse_body(b'[{"rsvp_id": 1}', "application/json", 1000)
    assert not batch and len(checked) == 1 and checked[0][1].code == "invalid_json"


@pytest.mark.parametrize(("body", "content_type"), [(b"", ""), (b" \n", "application/x-ndjson"), (b"[]", "")])
def test_empty_bodies_are_refused(body, content_type):
    with pytest.raises(ValueError, match="empty"):
        parse_body(body, content_type, 1000)

"""Generator: deterministic per seed, every schema field, Zipf skew, fault fractions."""

from __future__ import annotations

import json
from collections import Counter
from statistics import median

import pytest

from pipelines.rsvp import schema
from pipelines.rsvp.generator import FaultMix, RsvpGenerator

START = 1_767_225_600_000


def _lines(seed: int, count: int, **faults) -> list:
    return list(RsvpGenerator(seed, FaultMix(**faults), start_ms=START).generate(count))


def test_same_seed_same_lines_other_seed_other_lines():
    assert [i.line for i in _lines(7, 300, malformed=0.1)] == [i.line for i in _lines(7, 300, malformed=0.1)]
    assert [i.line for i in _lines(7, 50)] != [i.line for i in _lines(8, 50)]


def test_valid_lines_carry_every_field_of_the_schema():
    items = _lines(1, 500)
    records = [json.loads(item.line) for item in items]
    for record, item in zip(records, items, strict=True):
        assert schema.type_errors(record) == []
        assert record["rsvp_id"] == item.rsvp_id and isinstance(record["event"]["event_id"], str)
        assert 1 <= len(record["group"]["group_topics"]) <= 15
        assert record["response"] in schema.RESPONSES
    assert sum("venue" in r for r in records) > 400
    assert sum("photo" in r["member"] for r in records) > 200
    assert len({r["rsvp_id"] for r in records}) == 500


def test_popularity_is_skewed_so_top_n_is_meaningful():
    records = [json.loads(item.line) for item in _lines(2, 20_000)]
    events = Counter(r["event"]["event_id"] for r in records)
    cities = Counter(r["group"]["group_city"] for r in records)
    topics = Counter(t["topic_name"] for r in records for t in r["group"]["group_topics"])
    top10_events = sum(count for _, count in events.most_common(10))
    assert top10_events > 0.08 * len(records)  # uniform over 6,000 events would give 0.17 %
    assert cities.most_common(1)[0][1] > 5 * median(cities.values())
    assert topics.most_common(1)[0][1] > 5 * median(topics.values())


def test_fault_fractions_are_honoured():
    items = _lines(3, 20_000, late=0.05, out_of_order=0.05, duplicates=0.02, malformed=0.04)
    kinds = Counter(item.kind.split(":")[0] for item in items)
    for kind, fraction in (("late", 0.05), ("out_of_order", 0.05), ("duplicate", 0.02), ("malformed", 0.04)):
        assert abs(kinds[kind] / len(items) - fraction) < 0.006, (kind, kinds[kind])


def test_faults_look_like_what_they_claim():
    items = _lines(4, 5_000, late=0.1, out_of_order=0.1, duplicates=0.05, malformed=0.1)
    step = 20  # ms per event at the default 50 events/s
    seen: dict[int, bytes] = {}
    for index, item in enumerate(items):
        clock = START + index * step
        if item.malformed:
            code = item.kind.split(":", 1)[1]
            assert schema.check_structure(item.line, 65_536).code == code and item.rsvp_id is None
            continue
        mtime = json.loads(item.line)["mtime"]
        if item.kind == "duplicate":
            assert seen[item.rsvp_id] == item.line
        elif item.kind == "late":
            assert 2 * 60_000 <= clock - mtime <= 30 * 60_000
        elif item.kind == "out_of_order":
            assert 1_000 <= clock - mtime <= 30_000
        else:
            assert mtime == clock
        seen[item.rsvp_id] = item.line


def test_malformed_kinds_can_be_chosen():
    items = _lines(5, 2_000, malformed=0.2, malformed_kinds=("wrong_type",))
    assert {item.kind for item in items if item.malformed} == {"malformed:wrong_type"}


@pytest.mark.parametrize("faults", [{"late": -0.1}, {"malformed": 1.5}, {"late": 0.6, "duplicates": 0.6},
                                    {"malformed_kinds": ("nope",)}])
def test_bad_fault_mix_is_refused(faults):
    with pytest.raises(ValueError):
        FaultMix(**faults)

"""Summary increments of four analyzed rows (one late), expected rows written by hand.

``Increments`` (plain Python) is what the job runs in each task; ``summary_increments`` is the
same counting as a DataFrame transform.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual

from jobs.streaming.aggregates import INCREMENT_COLUMNS, increment_arrow_schema, increments_table
from jobs.streaming.task_output import split_output, task_timings
from pipelines.rsvp.aggregates import Windows, summary_increments
from pipelines.rsvp.records import Increments

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z, a multiple of every window size below
MINUTE = 60_000
# Window sizes that differ, so a mix-up of one for another shows.
WINDOWS = Windows(city_ms=MINUTE, trending_ms=5 * MINUTE, trending_slide_ms=MINUTE, members_ms=2 * MINUTE)
ANALYZED = ("event_time_ms long, event_id string, event_name string, member_id long, response string, "
            "guests long, topics array<string>, city string, late boolean")


TUPLES = [
    (T0 + 5_000, "e1", "Mixer", 1, "yes", 2, ["Salsa", "Comedy"], "Barcelona", False),
    (T0 + 70_000, "e1", "Mixer", 2, "no", 3, ["Salsa"], "Barcelona", False),
    (T0 + 130_000, "e2", "Walk", 1, "yes", 0, ["Comedy"], "Madrid", False),
    (T0 - 200_000, "e2", "Walk", 3, "no", 1, ["Salsa"], "Madrid", True),  # late
]
NAMES = [part.split()[0] for part in ANALYZED.split(", ")]


@pytest.fixture()
def rows(spark):
    return spark.createDataFrame(TUPLES, ANALYZED)


def increments(*tuples: tuple) -> list[Row]:
    return [Row(**dict(zip(INCREMENT_COLUMNS, values, strict=True))) for values in tuples]


def test_increments_of_each_record() -> None:
    """Each record alone: what it adds to every summary it feeds."""
    expected = increments(
        # row 1, T0 + 5 s
        ("city", T0, "Barcelona", 1, 0, 0, None),
        ("member", T0, "1", 1, 0, 0, None),
        ("member_all", 0, "1", 1, 0, 0, None),
        ("event", 0, "e1", 1, 0, 2, "Mixer"),
        ("topic", 0, "Salsa", 1, 0, 0, None),
        ("topic_minute", T0, "Salsa", 1, 0, 0, None),
        ("topic", 0, "Comedy", 1, 0, 0, None),
        ("topic_minute", T0, "Comedy", 1, 0, 0, None),
        # row 2, T0 + 70 s: a "no" brings no guests
        ("city", T0 + MINUTE, "Barcelona", 1, 0, 0, None),
        ("member", T0, "2", 1, 0, 0, None),
        ("member_all", 0, "2", 1, 0, 0, None),
        ("event", 0, "e1", 0, 1, 0, "Mixer"),
        ("topic", 0, "Salsa", 1, 0, 0, None),
        ("topic_minute", T0 + MINUTE, "Salsa", 1, 0, 0, None),
        # row 3, T0 + 130 s: the second members window
        ("city", T0 + 2 * MINUTE, "Madrid", 1, 0, 0, None),
        ("member", T0 + 2 * MINUTE, "1", 1, 0, 0, None),
        ("member_all", 0, "1", 1, 0, 0, None),
        ("event", 0, "e2", 1, 0, 0, "Walk"),
        ("topic", 0, "Comedy", 1, 0, 0, None),
        ("topic_minute", T0 + 2 * MINUTE, "Comedy", 1, 0, 0, None),
        # row 4, late: all-time kinds only
        ("member_all", 0, "3", 1, 0, 0, None),
        ("event", 0, "e2", 0, 1, 0, "Walk"),
        ("topic", 0, "Salsa", 1, 0, 0, None),
    )
    per_record = []
    for values in TUPLES:
        one = Increments(WINDOWS)
        one.add(dict(zip(NAMES, values, strict=True)))
        per_record.extend(one.rows())
    assert sorted(map(_key, per_record)) == sorted(map(_key, (row.asDict() for row in expected)))


def _key(row: dict) -> tuple:
    return tuple(row[name] for name in INCREMENT_COLUMNS)


def test_increments_merge_across_tasks() -> None:
    """Two tasks' counts merged on the driver equal one task's count of every record."""
    first, second, whole = Increments(WINDOWS), Increments(WINDOWS), Increments(WINDOWS)
    for index, values in enumerate(TUPLES):
        record = dict(zip(NAMES, values, strict=True))
        (first if index % 2 else second).add(record)
        whole.add(record)
    _, merged = split_output(pa.Table.from_pylist([*first.rows(), *second.rows()],
                                                   schema=increment_arrow_schema()))
    assert sorted(map(_key, merged.to_pylist())) == sorted(map(_key, whole.rows()))
    assert ("topic", 0, "Salsa", 3, 0, 0, None) in set(map(_key, merged.to_pylist()))


def test_task_timing_rows_are_reported_and_never_counted() -> None:
    """The tasks' ``_task`` rows: left out of the increments, their phases' largest ms reported."""
    city = {"kind": "city", "window_start": T0, "item": "Madrid", "n": 2, "n2": 0, "n3": 0, "label": None}
    timing = {"kind": "_task", "window_start": 0, "item": "", "n": 0, "n2": 0, "n3": 0}
    table = pa.Table.from_pylist([
        city, city,
        timing | {"label": '{"read": 40, "process": 900, "flush": 30, "task": 1000}'},
        timing | {"label": '{"read": 300, "process": 700, "task": 1100}'}],
        schema=increment_arrow_schema())
    stats, merged = split_output(table)
    assert stats == []
    assert merged.to_pylist() == [city | {"n": 4}]
    assert task_timings(table) == {"count": 2, "max_ms": {"flush": 30, "process": 900, "read": 300,
                                                          "task": 1100}}


def test_take_members_leaves_the_other_increments() -> None:
    """What a task adds to the HyperLogLogs itself: every member by window, the late one all-time only."""
    counts = Increments(WINDOWS)
    for values in TUPLES:
        counts.add(dict(zip(NAMES, values, strict=True)))
    members = counts.take_members()
    assert {start: sorted(ids) for start, ids in members.items()} == {
        T0: ["1", "2"], T0 + 2 * MINUTE: ["1"], -1: ["1", "2", "3"]}
    assert {row["kind"] for row in counts.rows()} == {"city", "topic", "topic_minute", "event"}
    assert counts.take_members() == {}


def test_summary_increments(rows) -> None:
    expected = increments(
        ("city", T0, "Barcelona", 1, 0, 0, None),
        ("city", T0 + MINUTE, "Barcelona", 1, 0, 0, None),
        ("city", T0 + 2 * MINUTE, "Madrid", 1, 0, 0, None),
        ("topic_minute", T0, "Salsa", 1, 0, 0, None),
        ("topic_minute", T0, "Comedy", 1, 0, 0, None),
        ("topic_minute", T0 + MINUTE, "Salsa", 1, 0, 0, None),
        ("topic_minute", T0 + 2 * MINUTE, "Comedy", 1, 0, 0, None),
        ("topic", 0, "Salsa", 3, 0, 0, None),
        ("topic", 0, "Comedy", 2, 0, 0, None),
        ("member", T0, "1", 1, 0, 0, None),
        ("member", T0, "2", 1, 0, 0, None),
        ("member", T0 + 2 * MINUTE, "1", 1, 0, 0, None),
        ("member_all", 0, "1", 2, 0, 0, None),
        ("member_all", 0, "2", 1, 0, 0, None),
        ("member_all", 0, "3", 1, 0, 0, None),
        ("event", 0, "e1", 1, 1, 2, "Mixer"),
        ("event", 0, "e2", 1, 1, 0, "Walk"),
    )
    result = rows.transform(summary_increments(WINDOWS))
    assert tuple(result.columns) == INCREMENT_COLUMNS
    assertDataFrameEqual(result, expected)


def test_windows_refuse_a_slide_that_does_not_divide() -> None:
    with pytest.raises(ValueError, match="not a multiple of its slide"):
        Windows(trending_ms=150_000, trending_slide_ms=60_000)


def test_increments_table_takes_dicts_and_tables_of_other_string_types() -> None:
    """The Redis apply's input: rows as dicts, or a table whose strings are large_string and whose
    columns come in another order (as a Spark collect can give them), both to one schema."""
    row = {"kind": "event", "window_start": 0, "item": "e1", "n": 2, "n2": 1, "n3": 3, "label": "Mixer"}
    large = pa.large_string()
    wide = pa.table({"label": pa.array(["Mixer"], large), "kind": pa.array(["event"], large),
                     "window_start": [0], "item": pa.array(["e1"], large), "n": [2], "n2": [1],
                     "n3": [3]})
    for given in ([row], wide):
        table = increments_table(given)
        assert table.schema == increment_arrow_schema()
        assert table.to_pylist() == [row]
    same = increments_table([row])
    assert increments_table(same) is same  # already the schema: not copied

"""Offset arithmetic: checkpoint JSON, rate limiting, range planning and splitting."""

from __future__ import annotations

import pytest

from jobs.errors import KafkaSourceError
from jobs.kafka.dataloss import DataLoss, read_ledger, report, skipped_records
from jobs.kafka.offsets import (
    OffsetRange,
    behind,
    cap,
    from_json,
    plan_ranges,
    rate_limit,
    split_ranges,
    to_json,
)


def test_checkpoint_json_is_the_jvm_connectors_shape():
    offsets = {("b", 1): 7, ("a", 10): 3, ("a", 2): 5}
    assert to_json(offsets) == {"a": {"2": 5, "10": 3}, "b": {"1": 7}}
    assert from_json({"a": {"2": 5, "10": 3}, "b": {"1": 7}}) == offsets
    with pytest.raises(KafkaSourceError, match="not Kafka source offsets JSON"):
        from_json({"index": 3})


def test_rate_limit_is_proportional_and_never_starves_small_partitions():
    begin = {("t", 0): 0, ("t", 1): 100, ("t", 2): 50}
    until = {("t", 0): 900, ("t", 1): 190, ("t", 2): 51}
    # backlogs 900 / 90 / 1 of 991: shares 90.8 -> 90, 9.08 -> 9, 0.1 -> 1 (rounded up)
    assert rate_limit(100, begin, until) == {("t", 0): 90, ("t", 1): 109, ("t", 2): 51}


def test_rate_limit_reads_the_whole_limit_giving_what_floors_leave_to_the_largest_remainders():
    begin = {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}
    until = {("t", 0): 100_000, ("t", 1): 100_000, ("t", 2): 100_000}
    # shares 33,333.33 each: floors leave 1 record over, to the first of the equal remainders
    assert rate_limit(100_000, begin, until) == {("t", 0): 33_334, ("t", 1): 33_333, ("t", 2): 33_333}
    until = {("t", 0): 10, ("t", 1): 20, ("t", 2): 30}
    # backlogs 10 / 20 / 30 of 60, limit 7: shares 1.17 / 2.33 / 3.5 -> 1 / 2 / 3, one left over,
    # to partition 2 (remainder 0.5 against 0.33 and 0.17)
    assert rate_limit(7, begin, until) == {("t", 0): 1, ("t", 1): 2, ("t", 2): 4}


def test_rate_limit_without_backlog_returns_latest():
    assert rate_limit(10, {("t", 0): 5}, {("t", 0): 5, ("t", 1): 3}) == {("t", 0): 5, ("t", 1): 3}


def test_plan_ranges_one_range_per_partition_with_new_partitions_from_earliest():
    start = {("t", 0): 10, ("t", 1): 4}
    end = {("t", 0): 20, ("t", 1): 4, ("t", 2): 6}
    ranges, losses = plan_ranges(start, end, {("t", 0): 0, ("t", 1): 0, ("t", 2): 0})
    assert ranges == [OffsetRange("t", 0, 10, 20), OffsetRange("t", 2, 0, 6)]
    assert losses == []


def test_plan_ranges_reports_each_kind_of_data_loss():
    start = {("t", 0): 10, ("t", 1): 5, ("gone", 0): 3, ("t", 3): 50}
    end = {("t", 0): 20, ("t", 1): 8, ("t", 2): 9, ("t", 3): 40}
    earliest = {("t", 0): 14, ("t", 1): 30, ("t", 2): 2, ("t", 3): 0}
    ranges, losses = plan_ranges(start, end, earliest)
    assert ranges == [OffsetRange("t", 0, 14, 20), OffsetRange("t", 2, 2, 9)]
    assert losses == [
        DataLoss("partition_gone", "gone", 0, requested=3),
        DataLoss("deleted", "t", 0, requested=10, earliest=14, skipped=4),
        DataLoss("deleted", "t", 1, requested=5, earliest=30, skipped=3),
        DataLoss("new_partition", "t", 2, requested=0, earliest=2, skipped=2),
        DataLoss("offset_reset", "t", 3, requested=50, earliest=40),
    ]


def test_split_ranges_like_the_offset_range_calculator():
    ranges = [OffsetRange("t", 0, 0, 100), OffsetRange("t", 1, 0, 10), OffsetRange("t", 2, 5, 5)]
    assert split_ranges(ranges, None, None) == ranges[:2]
    assert split_ranges(ranges, 2, None) == ranges[:2]
    # 110 offsets over 4 tasks: partition 0 gets round(100/110*4)=4 parts, partition 1 one.
    assert split_ranges(ranges, 4, None) == [
        OffsetRange("t", 0, 0, 25), OffsetRange("t", 0, 25, 50), OffsetRange("t", 0, 50, 75),
        OffsetRange("t", 0, 75, 100), OffsetRange("t", 1, 0, 10)]
    assert split_ranges(ranges, None, 40) == [
        OffsetRange("t", 0, 0, 33), OffsetRange("t", 0, 33, 66), OffsetRange("t", 0, 66, 100),
        OffsetRange("t", 1, 0, 10)]


def test_cap_limits_to_the_ending_bound_and_never_moves_back():
    latest = {("t", 0): 100, ("t", 1): 100, ("t", 2): 100}
    bound = {("t", 0): 50, ("t", 1): 5}
    assert cap(latest, bound, {("t", 0): 10, ("t", 1): 8, ("t", 2): 4}) == \
        {("t", 0): 50, ("t", 1): 8, ("t", 2): 4}
    assert cap(latest, None, {}) == latest
    assert behind(latest, {("t", 0): 90, ("t", 1): 100}) == 10


def test_report_fails_or_records_once_per_requested_offset(tmp_path):
    loss = DataLoss("deleted", "t", 0, requested=10, earliest=14, skipped=4)
    with pytest.raises(KafkaSourceError, match="data loss in t-0: requested offset 10 but the "
                                               "earliest available offset is 14"):
        report([loss], fail=True, ledger_dir=str(tmp_path))
    assert skipped_records(tmp_path) == 0
    report([loss], fail=False, ledger_dir=str(tmp_path))
    report([DataLoss("deleted", "t", 0, requested=10, earliest=15, skipped=5)], fail=False,
           ledger_dir=str(tmp_path))
    assert read_ledger(tmp_path) == [DataLoss("deleted", "t", 0, requested=10, earliest=15,
                                              skipped=5)]
    assert skipped_records(tmp_path / "missing") == 0


def test_rate_limit_never_goes_past_the_latest_offset():
    begin, until = {("t", 0): 0, ("t", 1): 10}, {("t", 0): 5, ("t", 1): 12}
    assert rate_limit(1000, begin, until) == {("t", 0): 5, ("t", 1): 12}

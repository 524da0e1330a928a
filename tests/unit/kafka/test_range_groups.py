"""``group_ranges``: a batch's ranges as equal shares for at most N tasks (expected values by hand)."""

from __future__ import annotations

from jobs.common.kafka.offsets import OffsetRange, RangeGroup, group_ranges


def r(partition: int, start: int, end: int) -> OffsetRange:
    return OffsetRange("t", partition, start, end)


def test_three_equal_partitions_in_two_groups_split_the_middle_one() -> None:
    assert group_ranges([r(0, 0, 100), r(1, 0, 100), r(2, 0, 100)], 2) == [
        RangeGroup((r(0, 0, 100), r(1, 0, 50))),
        RangeGroup((r(1, 50, 100), r(2, 0, 100))),
    ]


def test_unequal_backlogs_are_shared_by_records_not_by_partitions() -> None:
    assert group_ranges([r(0, 10, 20), r(1, 500, 590)], 2) == [
        RangeGroup((r(0, 10, 20), r(1, 500, 540))),
        RangeGroup((r(1, 540, 590),)),
    ]


def test_a_remainder_goes_to_the_first_groups_and_empty_ranges_are_dropped() -> None:
    assert group_ranges([r(0, 0, 7), r(1, 3, 3)], 3) == [
        RangeGroup((r(0, 0, 3),)), RangeGroup((r(0, 3, 5),)), RangeGroup((r(0, 5, 7),))]


def test_fewer_records_than_groups_make_fewer_groups_and_nothing_makes_none() -> None:
    assert group_ranges([r(0, 0, 1), r(1, 0, 1)], 4) == [RangeGroup((r(0, 0, 1),)), RangeGroup((r(1, 0, 1),))]
    assert group_ranges([r(0, 5, 5)], 2) == []
    assert group_ranges([], 2) == []


def test_one_group_holds_every_range_whole() -> None:
    ranges = [r(0, 0, 100), r(1, 0, 3)]
    assert group_ranges(ranges, 1) == [RangeGroup(tuple(ranges))]

"""``group_ranges``: a batch's ranges as equal shares for at most N tasks (expected values by hand)."""

from __future__ import annotations

from jobs.kafka.offsets import OffsetRange, RangeGroup, group_ranges


def r(partition: int, start: int, end: int) -> OffsetRange:
    return OffsetRange("t", partition, start, end)


def test_three_equal_partitions_in_two_groups_split_the_middle_one() -> None:
    # the piece before the cut first in its group, the piece after it last in the next one
    assert group_ranges([r(0, 0, 100), r(1, 0, 100), r(2, 0, 100)], 2) == [
        RangeGroup((r(1, 0, 50), r(0, 0, 100)), continued=frozenset({0})),
        RangeGroup((r(2, 0, 100), r(1, 50, 100)), resumes=frozenset({1})),
    ]


def test_unequal_backlogs_are_shared_by_records_not_by_partitions() -> None:
    assert group_ranges([r(0, 10, 20), r(1, 500, 590)], 2) == [
        RangeGroup((r(1, 500, 540), r(0, 10, 20)), continued=frozenset({0})),
        RangeGroup((r(1, 540, 590),), resumes=frozenset({0})),
    ]


def test_a_remainder_goes_to_the_first_groups_and_empty_ranges_are_dropped() -> None:
    assert group_ranges([r(0, 0, 7), r(1, 3, 3)], 3) == [
        RangeGroup((r(0, 0, 3),), continued=frozenset({0})),
        RangeGroup((r(0, 3, 5),), continued=frozenset({0}), resumes=frozenset({0})),
        RangeGroup((r(0, 5, 7),), resumes=frozenset({0}))]


def test_fewer_records_than_groups_make_fewer_groups_and_nothing_makes_none() -> None:
    assert group_ranges([r(0, 0, 1), r(1, 0, 1)], 4) == [RangeGroup((r(0, 0, 1),)), RangeGroup((r(1, 0, 1),))]
    assert group_ranges([r(0, 5, 5)], 2) == []
    assert group_ranges([], 2) == []


def test_one_group_holds_every_range_whole() -> None:
    ranges = [r(0, 0, 100), r(1, 0, 3)]
    assert group_ranges(ranges, 1) == [RangeGroup(tuple(ranges))]


def test_a_cut_at_a_range_end_continues_nothing_and_rows_carry_the_mark() -> None:
    groups = group_ranges([r(0, 0, 50), r(1, 0, 50), r(2, 0, 60)], 3)
    assert groups == [RangeGroup((r(1, 0, 4), r(0, 0, 50)), continued=frozenset({0})),
                      RangeGroup((r(2, 0, 7), r(1, 4, 50)), continued=frozenset({0}), resumes=frozenset({1})),
                      RangeGroup((r(2, 7, 60),), resumes=frozenset({0}))]
    assert group_ranges([r(0, 0, 10), r(1, 0, 10)], 2) == [
        RangeGroup((r(0, 0, 10),)), RangeGroup((r(1, 0, 10),))]
    assert groups[0].rows() == [("t", 1, 0, 4, True, False), ("t", 0, 0, 50, False, False)]
    assert groups[1].rows() == [("t", 2, 0, 7, True, False), ("t", 1, 4, 50, False, True)]


def test_pieces_of_four_partitions_in_three_groups_come_cut_piece_first_continuation_last() -> None:
    assert group_ranges([r(0, 0, 30), r(1, 0, 30), r(2, 0, 30), r(3, 0, 30)], 3) == [
        RangeGroup((r(1, 0, 10), r(0, 0, 30)), continued=frozenset({0})),
        RangeGroup((r(2, 0, 20), r(1, 10, 30)), continued=frozenset({0}), resumes=frozenset({1})),
        RangeGroup((r(3, 0, 30), r(2, 20, 30)), resumes=frozenset({1})),
    ]


def test_without_cuts_every_range_stays_whole_in_the_least_filled_group() -> None:
    ranges = [OffsetRange("t", 0, 0, 400), OffsetRange("t", 1, 0, 300), OffsetRange("t", 2, 0, 250),
              OffsetRange("t", 3, 0, 200), OffsetRange("t", 4, 5, 5)]
    groups = group_ranges(ranges, 2, allow_cuts=False)
    # largest first, each to the group with fewer records: 400 | 300, then 250 -> the 300 group
    # (550), then 200 -> the 400 group (600); the empty range is dropped
    assert [[(r.partition, r.start, r.end) for r in g.ranges] for g in groups] == [
        [(0, 0, 400), (3, 0, 200)], [(1, 0, 300), (2, 0, 250)]]
    assert all(not g.continued and not g.resumes for g in groups)

"""``chunk_writes``: a batch's writes cut into transactions of bounded size (expected values by hand)."""

from __future__ import annotations

from jobs.streaming.apply_chunks import EVENT_ARGS, chunk_writes


def test_ops_are_cut_in_order_at_the_argument_budget_and_never_split() -> None:
    ops = [["HINCRBY", "k1", "f", "1"], ["HINCRBY", "k2", "f", "1"], ["ZADD", "w", "1", "1", "2", "2"],
           ["EXPIRE", "k1", "60"]]
    # 4 + 4 = 8 args fit a budget of 9; the 6-arg ZADD starts a new chunk; the EXPIRE (3) joins it
    assert chunk_writes(ops, 0, 9) == [((0, 2), (0, 0)), ((2, 4), (0, 0))]
    assert chunk_writes(ops, 0, 100) == [((0, 4), (0, 0))]


def test_an_op_larger_than_the_budget_is_a_chunk_of_its_own_and_no_writes_is_one_empty_chunk() -> None:
    big = ["ZADD", "w", *map(str, range(20))]
    assert chunk_writes([["DEL", "a"], big, ["DEL", "b"]], 0, 5) == [((0, 1), (0, 0)), ((1, 2), (0, 0)),
                                                                      ((2, 3), (0, 0))]
    assert chunk_writes([], 0, 5) == [((0, 0), (0, 0))]


def test_events_fill_the_last_ops_chunk_then_go_in_chunks_of_the_budget() -> None:
    assert EVENT_ARGS == 11
    ops = [["HINCRBY", "k1", "f", "1"]]                       # 4 args: room for 2 events of 11 in 30
    assert chunk_writes(ops, 7, 30) == [((0, 1), (0, 2)), ((1, 1), (2, 4)), ((1, 1), (4, 6)),
                                        ((1, 1), (6, 7))]
    assert chunk_writes([], 5, 30) == [((0, 0), (0, 2)), ((0, 0), (2, 4)), ((0, 0), (4, 5))]
    assert chunk_writes([], 3, 5) == [((0, 0), (0, 1)), ((0, 0), (1, 2)), ((0, 0), (2, 3))]  # one at least

"""``chunk_ops``: a batch's writes cut into script calls of bounded size (expected values by hand)."""

from __future__ import annotations

from jobs.streaming.redis_script import chunk_ops


def test_ops_are_cut_in_order_at_the_argument_budget_and_never_split() -> None:
    ops = [["HINCRBY", "k1", "f", "1"], ["HINCRBY", "k2", "f", "1"], ["ZADD", "w", "1", "1", "2", "2"],
           ["EXPIRE", "k1", "60"]]
    # 4 + 4 = 8 args fit a budget of 9; the 6-arg ZADD starts a new chunk; the EXPIRE (3) joins it
    assert chunk_ops(ops, 9) == [ops[:2], ops[2:]]
    assert chunk_ops(ops, 100) == [ops]


def test_an_op_larger_than_the_budget_is_a_chunk_of_its_own_and_no_ops_is_one_empty_chunk() -> None:
    big = ["ZADD", "w", *map(str, range(20))]
    assert chunk_ops([["DEL", "a"], big, ["DEL", "b"]], 5) == [[["DEL", "a"]], [big], [["DEL", "b"]]]
    assert chunk_ops([], 5) == [[]]

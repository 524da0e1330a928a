"""gold.rsvp_summaries' top-N lists against the lake: what a list must show (values by hand)."""

from __future__ import annotations

from jobs.batch.reconcile import compare, top_expected
from pipelines.rsvp.reconcile import EXACT

BOUNDS = dict.fromkeys(EXACT, 0.0)


def test_a_top_list_must_show_every_item_the_lake_ranks_in_it_for_sure_and_true_counts():
    lake = {"trending/60/a": 9, "trending/60/b": 7, "trending/60/c": 5, "trending/60/d": 5,
            "trending/120/a": 1}
    # top 2 of window 60: a (9) and b (7) beat the 3rd largest (5); window 120 has one item
    listed = {"trending/60/a": 9, "trending/60/c": 5, "trending/120/a": 1}
    expected = top_expected(listed, lake, 2, windowed=True)
    assert expected == {"trending/60/a": 9, "trending/60/b": 7, "trending/60/c": 5, "trending/120/a": 1}
    assert [(d.key, d.live_value, d.lake_value) for d in compare("gold", {"trending": listed},
                                                                 {"trending": expected}, BOUNDS)] == [
        ("trending/60/b", None, "7")]


def test_ties_at_the_edge_may_go_either_way_and_a_bogus_item_is_a_drift():
    lake = {"topic/a": 4, "topic/b": 3, "topic/c": 3, "topic/d": 3}
    for tied in ("topic/b", "topic/c", "topic/d"):
        listed = {"topic/a": 4, tied: 3}
        assert top_expected(listed, lake, 2, windowed=False) == listed
    bogus = {"topic/a": 4, "topic/zzz": 3}
    expected = top_expected(bogus, lake, 2, windowed=False)
    drifts = compare("gold", {"topic": bogus}, {"topic": expected}, BOUNDS)
    found = [(d.key, d.live_value, d.lake_value, d.verdict) for d in drifts]
    assert found == [("topic/zzz", "3", None, "drift")]

"""Reconcile leaves out the lake windows whose Redis keys expired as designed (values by hand)."""

from __future__ import annotations

import time

from jobs.batch.reconcile import unexpired
from jobs.batch.report import ReconcileReport
from pipelines.rsvp.reconcile import WINDOWED

DAY_MS = 86_400_000


def test_old_windows_absent_from_redis_are_not_compared_and_old_ones_in_redis_are() -> None:
    now = int(time.time() * 1000)
    old, recent = now - 3 * DAY_MS, now - DAY_MS // 2
    lake = {"city_window": {f"city_window/{old}/Madrid": 4, f"city_window/{recent}/Madrid": 2,
                            f"city_window/{old}/Lyon": 1},
            "members_window": {f"members_window/{old}": 9, f"members_window/{recent}": 3},
            "event": {"event/e1": [1, 0, 0]}}
    live = {"city_window": {f"city_window/{old}/Lyon": 1}, "members_window": {}, "event": {}}
    report = ReconcileReport("r", None)
    kept = unexpired(lake, live, 2 * 86_400, report, WINDOWED)
    assert kept == {"city_window": {f"city_window/{recent}/Madrid": 2, f"city_window/{old}/Lyon": 1},
                    "members_window": {f"members_window/{recent}": 3}, "event": {"event/e1": [1, 0, 0]}}
    assert report.expired == 2
    assert lake["city_window"][f"city_window/{old}/Madrid"] == 4   # the lake's own views untouched

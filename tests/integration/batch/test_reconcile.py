"""``kappa batch reconcile`` on a platform that really ran (tests/integration/batch/conftest.py):
zero differences while Redis and the lake hold what the collector, the streaming job and the
loader made of two days of generated RSVPs; exactly the two keys a test breaks (a city count, a
deleted event hash) otherwise. Keys and values are checked against the plain-Python views of
tests/integration/batch/expected.py.
"""

from __future__ import annotations

import json
from datetime import date

import pytest
from deltalake import DeltaTable

from jobs.batch.reconcile import ViewsDrift, reconcile
from jobs.common.delta import table_uri
from tests.integration.batch import expected

pytestmark = pytest.mark.slow
SOURCES = ("silver.rsvps", "bronze.rsvps_raw", "ops.dlq")


def _reconciliations(platform) -> list[dict]:
    return [metric for metric in (json.loads(m.value) for m in platform.read("metrics_topic"))
            if metric.get("kind") == "reconciliation"]


def _windowed_on(views: dict, day: date) -> int:
    """How many window keys (cities, members) of ``views`` start on ``day``."""
    return sum(expected.day_of(int(key.split("/")[1])) == day
               for kind in ("city_window", "members_window") for key in views[kind])


def test_untouched_views_match_and_two_broken_keys_are_reported(spark, batch_platform, redis_client):
    platform = batch_platform.platform
    first, second = batch_platform.dates[:2]
    cfg, prefix = platform.cfg, platform.cfg.streaming.redis_prefix
    delivered, _ = expected.stream(platform.read("source_topic"))
    flags: dict[int, set[bool]] = {}
    for rsvp in delivered:
        flags.setdefault(rsvp.rsvp_id, set()).add(rsvp.late)
    assert any(len(both) == 2 for both in flags.values())   # copies of an RSVP on time and late
    views = expected.live_views(delivered)
    windowed, events = len(views["city_window"]) + len(views["members_window"]), len(views["event"])

    report = reconcile(spark, cfg)
    assert report.differences == []
    assert report.checked == {"redis": windowed + events + len(views["topic"]),
                              "gold.rsvp_summaries": windowed + events}
    assert report.source_versions == {table: DeltaTable(table_uri(cfg.lake.root, table)).version()
                                      for table in SOURCES}
    metric = _reconciliations(platform)[-1]
    assert (metric["run_id"], metric["differences"], metric["drifts"]) == (report.run_id, 0, 0)
    ranged = reconcile(spark, cfg, [second])   # windows of one date; the all-time views not compared
    assert ranged.differences == []
    assert ranged.checked == dict.fromkeys(("redis", "gold.rsvp_summaries"), _windowed_on(views, second))

    city_key = min(key for key in views["city_window"] if expected.day_of(int(key.split("/")[1])) == first)
    event_key = min(views["event"])
    _, start, city = city_key.split("/", 2)
    redis_client.hset(f"{prefix}:cities:{start}", city, views["city_window"][city_key] + 5)
    redis_client.delete(f"{prefix}:event:{event_key.split('/', 1)[1]}")
    with pytest.raises(ViewsDrift, match="2 live view key") as raised:
        reconcile(spark, cfg)
    assert "docs/runbooks/views-drift.md" in str(raised.value)
    assert f"redis:{city_key}" in str(raised.value) and f"redis:{event_key}" in str(raised.value)
    rows = DeltaTable(table_uri(cfg.lake.root, "ops.reconciliation")).to_pyarrow_table().to_pylist()
    assert _reconciliations(platform)[-1]["drifts"] == 2
    assert sorted((r["view"], r["kind"], r["key"], r["live_value"], r["lake_value"], r["allowed_error"],
                   r["verdict"]) for r in rows) == [
        ("redis", "city_window", city_key, str(views["city_window"][city_key] + 5),
         str(views["city_window"][city_key]), 0.0, "drift"),
        ("redis", "event", event_key, None, json.dumps(views["event"][event_key]), 0.0, "drift"),
    ]
    # a range without the broken window compares neither it nor the (all-time) event views
    assert reconcile(spark, cfg, [second]).differences == []

"""``kappa batch reconcile`` on a platform that really ran (tests/integration/batch/conftest.py):
zero differences while Redis and the lake hold what the collector, the streaming job and the
loader made of two days of generated RSVPs; exactly the keys a test breaks otherwise (a city
count, a deleted event hash; a bogus trending member, a per-minute topic count, a total), also
as the JSON report of `kappa batch reconcile --json` that exits 6. Keys and values are checked
against the plain-Python views of tests/integration/batch/expected.py. Every key a test breaks
is restored after it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date

import pytest
from deltalake import DeltaTable

from jobs.batch.reconcile import reconcile
from jobs.batch.report import ViewsDrift
from jobs.lake.delta import table_uri
from tests.integration.batch import expected

pytestmark = pytest.mark.slow
SOURCES = ("silver.rsvps", "bronze.rsvps_raw", "ops.dlq")
WINDOWED = ("city_window", "members_window", "topic_minute", "trending")
TOP_N = 10   # streaming.top_n


def _reconciliations(platform) -> list[dict]:
    return [metric for metric in (json.loads(m.value) for m in platform.read("metrics_topic"))
            if metric.get("kind") == "reconciliation"]


def _start_day(key: str) -> date:
    return expected.day_of(int(key.split("/")[1]))


@contextmanager
def _restored(redis_client, *keys: str) -> Iterator[None]:
    """The keys as they were before the block, whatever it did to them."""
    saved = {key: (redis_client.dump(key), redis_client.pttl(key)) for key in keys}
    try:
        yield
    finally:
        for key, (dumped, ttl) in saved.items():
            redis_client.delete(key)
            if dumped is not None:
                redis_client.restore(key, max(ttl, 0), dumped)


def _gold_top_keys(cfg, views: dict, day: date | None = None) -> int:
    """The keys of gold's top-N lists compared: each listed item, and each item whose lake count
    beats the lake's (N+1)-th largest of its list (it is in every top N)."""
    rows = DeltaTable(table_uri(cfg.lake.root, "gold.rsvp_summaries")).to_pyarrow_table().to_pylist()
    keys = set()
    for row in rows:
        if row["kind"] == "trending" and (day is None or expected.day_of(row["window_start_ms"]) == day):
            keys |= {f"trending/{row['window_start_ms']}/{item['item']}" for item in row["items"]}
        elif row["kind"] == "top_topics" and day is None:
            keys |= {f"topic/{item['item']}" for item in row["items"]}
    lists: dict[str, dict[str, int]] = {}
    for key, n in views["trending"].items():
        if day is None or _start_day(key) == day:
            lists.setdefault(key.rsplit("/", 1)[0], {})[key] = n
    if day is None:
        lists["topic"] = dict(views["topic"])
    for items in lists.values():
        counts = sorted(items.values(), reverse=True)
        keys |= {key for key, n in items.items() if len(counts) <= TOP_N or n > counts[TOP_N]}
    return len(keys)


def test_untouched_views_match_and_two_broken_keys_are_reported(spark, batch_platform, redis_client):
    platform = batch_platform.platform
    first, second = batch_platform.dates[:2]
    cfg, prefix = platform.cfg, platform.cfg.streaming.redis_prefix
    delivered, dead = expected.stream(platform.read("source_topic"))
    flags: dict[int, set[bool]] = {}
    for rsvp in delivered:
        flags.setdefault(rsvp.rsvp_id, set()).add(rsvp.late)
    assert any(len(both) == 2 for both in flags.values())   # copies of an RSVP on time and late
    views = expected.redis_views(delivered, len(dead))
    gold = sum(len(views[kind]) for kind in ("city_window", "members_window", "event"))

    report = reconcile(spark, cfg)
    assert report.differences == []
    assert report.checked == {"redis": sum(map(len, views.values())),
                              "gold.rsvp_summaries": gold + _gold_top_keys(cfg, views)}
    assert report.source_versions == {table: DeltaTable(table_uri(cfg.lake.root, table)).version()
                                      for table in SOURCES}
    metric = _reconciliations(platform)[-1]
    assert (metric["run_id"], metric["differences"], metric["drifts"]) == (report.run_id, 0, 0)
    ranged = reconcile(spark, cfg, [second])   # windows of one date; the all-time views not compared
    assert ranged.differences == []
    on_second = {kind: sum(_start_day(key) == second for key in views[kind]) for kind in WINDOWED}
    assert ranged.checked == {
        "redis": sum(on_second.values()),
        "gold.rsvp_summaries": on_second["city_window"] + on_second["members_window"]
        + _gold_top_keys(cfg, views, second)}

    city_key = min(key for key in views["city_window"] if _start_day(key) == first)
    event_key = min(views["event"])
    _, start, city = city_key.split("/", 2)
    with _restored(redis_client, f"{prefix}:cities:{start}", f"{prefix}:event:{event_key.split('/', 1)[1]}"):
        redis_client.hset(f"{prefix}:cities:{start}", city, views["city_window"][city_key] + 5)
        redis_client.delete(f"{prefix}:event:{event_key.split('/', 1)[1]}")
        with pytest.raises(ViewsDrift, match="2 live view key") as raised:
            reconcile(spark, cfg)
        assert "docs/runbooks/views-drift.md" in str(raised.value)
        assert f"redis:{city_key}" in str(raised.value) and f"redis:{event_key}" in str(raised.value)
        assert raised.value.report.drifts == raised.value.report.differences
        rows = DeltaTable(table_uri(cfg.lake.root, "ops.reconciliation")).to_pyarrow_table().to_pylist()
        assert _reconciliations(platform)[-1]["drifts"] == 2
        assert sorted((r["view"], r["kind"], r["key"], r["live_value"], r["lake_value"], r["allowed_error"],
                       r["verdict"]) for r in rows if r["run_id"] == raised.value.report.run_id) == [
            ("redis", "city_window", city_key, str(views["city_window"][city_key] + 5),
             str(views["city_window"][city_key]), 0.0, "drift"),
            ("redis", "event", event_key, None, json.dumps(views["event"][event_key]), 0.0, "drift"),
        ]
        # a range without the broken window compares neither it nor the (all-time) event views
        assert reconcile(spark, cfg, [second]).differences == []


def test_the_json_report_names_a_bogus_trending_member_a_wrong_bucket_and_total_and_exits_6(
        run_kappa, batch_platform, redis_client):
    platform = batch_platform.platform
    prefix = platform.cfg.streaming.redis_prefix
    delivered, dead = expected.stream(platform.read("source_topic"))
    views = expected.redis_views(delivered, len(dead))
    trending_start = min(key.split("/")[1] for key in views["trending"])
    minute_key = max(views["topic_minute"])
    _, minute, topic = minute_key.split("/", 2)
    keys = (f"{prefix}:trending:{trending_start}", f"{prefix}:topics:minute:{minute}", f"{prefix}:totals")
    with _restored(redis_client, *keys):
        redis_client.zadd(keys[0], {"Bogus Topic": 3})
        redis_client.zincrby(keys[1], 2, topic)
        redis_client.hincrby(keys[2], "valid", 1)
        done = run_kappa("batch", "reconcile", "--json", env=platform.env, timeout=400)

    assert done.returncode == 6, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: 3 live view key(s) differ"), done.stderr[-2000:]
    report = json.loads(done.stdout)
    valid = views["totals"]["totals/valid"]
    assert report["drifts"] == 3
    assert sorted((d["view"], d["kind"], d["key"], d["live_value"], d["lake_value"], d["verdict"])
                  for d in report["differences"]) == [
        ("redis", "topic_minute", minute_key, str(views["topic_minute"][minute_key] + 2),
         str(views["topic_minute"][minute_key]), "drift"),
        ("redis", "totals", "totals/valid", str(valid + 1), str(valid), "drift"),
        ("redis", "trending", f"trending/{trending_start}/Bogus Topic", "3", None, "drift"),
    ]
    assert report["compared"] == {
        "redis": sorted(["city_window", "members_window", "topic_minute", "trending", "event", "topic",
                         "totals", "members_all"]),
        "gold.rsvp_summaries": sorted(["city_window", "members_window", "trending", "event", "topic"])}
    assert report["not_compared"] and all(item["what"] and item["why"] for item in report["not_compared"])
    assert any("event name" in item["what"] for item in report["not_compared"])

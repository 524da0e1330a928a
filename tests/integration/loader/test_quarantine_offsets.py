"""A batch whose every row is quarantined still records its offsets (the runbook's fix for a
failed batch: one run under `kappa load --policy TABLE=quarantine`, the same override as
``targets(..., parse_policies(...))`` here)."""

from __future__ import annotations

from deltalake import DeltaTable

from jobs.lake.delta import table_uri
from jobs.loader.load import run_load
from jobs.loader.offsets import parse_until
from jobs.loader.sql import run_sql
from jobs.loader.tables import parse_policies, targets
from tests.integration.loader.support import produce, summary

GOLD = "gold.rsvp_summaries"


def _event(key: str, emitted_ms: int, **fields: object) -> bytes:
    return summary("event", key, emitted_ms, 1, event_id=key, yes=1, no=0, guests=0, **fields)


def test_all_rows_quarantined_moves_the_offsets_once(lake, spark, kafka_props):
    env = lake({GOLD: {"quality_policy": "fail"}}, partitions=1)
    topic, uri = env.topics[GOLD], table_uri(env.cfg.lake.root, GOLD)
    produce(kafka_props, topic, [(b"event/a", _event("event/a", 5), 0)])
    assert run_load(spark, env.cfg, targets(env.cfg), parse_until("latest"))[0].outcome == "committed"
    bad = summary("city_window", "city_window/1/X", 6, 2, city="X", count=-3)
    produce(kafka_props, topic, [(b"bad", bad, 0)])
    assert run_load(spark, env.cfg, targets(env.cfg), parse_until("latest"))[0].outcome == "failed_quality"

    policy = parse_policies([f"{GOLD}=quarantine"])
    fixed = run_load(spark, env.cfg, targets(env.cfg, policies=policy), parse_until("latest"))[0]

    assert (fixed.outcome, fixed.rows, fixed.quarantined) == ("committed", 0, 1)
    app = f"kappa-loader/{GOLD}/{topic}/0"
    assert DeltaTable(uri).transaction_version(app) == 2
    audit = run_sql(env.cfg, "SELECT outcome, rows_quarantined, delta_version FROM ops.load_audit "
                             "ORDER BY started_at DESC LIMIT 1")[1]
    assert audit == [("committed", 1, DeltaTable(uri).version())]

    produce(kafka_props, topic, [(b"event/b", _event("event/b", 7), 0)])
    later = [run_load(spark, env.cfg, targets(env.cfg), parse_until("latest"))[0] for _ in range(2)]
    assert [(r.outcome, r.rows) for r in later] == [("committed", 1), ("noop", 0)]
    quarantine = DeltaTable(table_uri(env.cfg.lake.root, "quarantine.gold_rsvp_summaries"))
    assert quarantine.to_pyarrow_table().column("key").to_pylist() == ["city_window/1/X"]
    assert sorted(DeltaTable(uri).to_pyarrow_table().column("key").to_pylist()) == ["event/a", "event/b"]


def test_policy_flag_refuses_an_unknown_policy_with_one_line(run_kappa):
    result = run_kappa("load", "--policy", f"{GOLD}=maybe")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: --policy '{GOLD}=maybe'"), lines

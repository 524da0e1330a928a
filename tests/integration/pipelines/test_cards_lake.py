"""The card pipeline's lake tier: load exactly once, gold by day, reconcile against the views.

Generated transactions -> engine replay -> load (again with `kappa pipelines load`: nothing new;
after the analyzed records were delivered a second time: the same silver rows) -> `kappa
pipelines gold` by day, checked against flag rates computed here from the generator's labels ->
reconcile: no difference; then exactly the one Redis value the test changed, with exit code 6
from `kappa pipelines reconcile`.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import defaultdict
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Producer
from deltalake import DeltaTable

from jobs.engine.lake.reconcile import reconcile_pipeline
from jobs.engine.lake.tables import load_targets
from jobs.engine.run import PipelineRun, ensure_topics, run_pipeline
from jobs.lake.delta import table_uri
from jobs.loader.load import run_load
from jobs.loader.offsets import parse_until
from jobs.pipelines.registry import load
from pipelines.cards.generator import Item, generate
from tests.conftest import KAPPA, REPO
from tests.integration.pipelines.cards_support import DECISION, copy_cards, expected
from tests.integration.streaming.expected import read_topic

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ITEMS = 800
REDELIVERED = 50


def _produce(props: dict[str, str], topic: str, messages: list[tuple[bytes | None, bytes]]) -> None:
    producer = Producer(props)
    for key, value in messages:
        producer.produce(topic, value, key)
    assert producer.flush(30) == 0


def _own_gold_names(folder: Path, name: str) -> dict[str, str]:
    """Give the copy's gold tables names of its own (the copy renames only ``cards`` tables)."""
    path = folder / "pipeline.yaml"
    spec = yaml.safe_load(path.read_text())
    renamed = {table: f"gold.{name}_{table.removeprefix('gold.card_')}" for table in spec["tables"]
               if table.startswith("gold.")}
    spec["tables"] = {renamed.get(table, table): decl for table, decl in spec["tables"].items()}
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return renamed


def _kappa(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``kappa pipelines <args> --json`` against the session's stack."""
    return subprocess.run([*KAPPA, "pipelines", *args, "--json"], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=600, check=False)


def _flag_rates(items: list[Item], by: str) -> dict[tuple[date, str], dict[str, Any]]:
    """Per UTC day and ``by`` field: transactions, flags by reason and flag rate, from the labels."""
    out: dict[tuple[date, str], dict[str, Any]] = defaultdict(lambda: {
        "transactions": 0, "flagged": 0, "impossible_travel": 0, "amount_over_limit": 0})
    for item in items:
        if item.kind.startswith("malformed"):
            continue
        txn = json.loads(item.value)
        day = datetime.fromtimestamp(txn["event_time_ms"] / 1000, UTC).date()
        decision, reason = DECISION[item.kind]
        row = out[(day, txn[by])]
        row["transactions"] += 1
        row["flagged"] += decision == "flag"
        if reason != "ok":
            row[reason] += 1
    for row in out.values():
        row["flag_rate"] = pytest.approx(row["flagged"] / row["transactions"])
    return dict(out)


def _table(cfg: Any, name: str) -> list[dict[str, Any]]:
    return DeltaTable(table_uri(cfg.lake.root, name)).to_pyarrow_table().to_pylist()


def _gold(cfg: Any, name: str, by: str) -> dict[tuple[date, str], dict[str, Any]]:
    return {(row.pop("event_date"), row.pop(by)): row for row in _table(cfg, name)}


def test_cards_lake_load_gold_reconcile(stack, spark, tmp_path, kafka_props, redis_client, kappa_env) -> None:
    folder, name = copy_cards(tmp_path)
    gold_names = _own_gold_names(folder, name)
    pipeline = load(folder)
    assert not pipeline.problems, pipeline.problems
    spec, code = pipeline.spec, pipeline.code
    items = list(generate(ITEMS, seed=23, cards=40, travel_rate=0.06, amount_rate=0.03, malformed_rate=0.02))
    want = expected(items)
    assert want.flags_by_country and want.dead_letters
    ensure_topics(stack, spec)
    _produce(kafka_props, spec.source.topic,
             [(None if i.key is None else i.key.encode(), i.value.encode()) for i in items])
    run_pipeline(stack, pipeline, PipelineRun(mode="replay", ending="latest", fresh=True))

    bronze, silver, dlq = f"bronze.{name}_raw", f"silver.{name}", f"ops.{name}_dlq"
    results = run_load(spark, stack, load_targets(stack, spec, code), parse_until("latest"))
    assert {r.table: (r.outcome, r.rows) for r in results} == {
        bronze: ("committed", ITEMS), silver: ("committed", len(want.decisions)),
        dlq: ("committed", want.dead_letters)}, [r.as_dict() for r in results]
    rows = _table(stack, silver)
    assert {r["txn_id"]: (r["decision"], r["reason"]) for r in rows} == want.decisions
    assert len(rows) == len(want.decisions)
    assert {r["reason_code"] for r in _table(stack, dlq)} <= set(code.reasons)

    env = {**os.environ, **kappa_env, "KAPPA_PIPELINES_PATH": str(tmp_path)}
    again = _kappa(env, "load", name)
    assert again.returncode == 0, again.stderr[-3000:]
    assert {(r["table"], r["outcome"], r["rows"]) for r in json.loads(again.stdout)} == {
        (bronze, "noop", 0), (silver, "noop", 0), (dlq, "noop", 0)}
    first = read_topic(kafka_props, spec.outputs.analyzed.topic, 3)[:REDELIVERED]
    _produce(kafka_props, spec.outputs.analyzed.topic, [(m.key(), m.value()) for m in first])
    redelivered = run_load(spark, stack, load_targets(stack, spec, code, [silver]), parse_until("latest"))
    assert [(r.outcome, r.rows) for r in redelivered] == [("committed", REDELIVERED)]
    assert sorted(_table(stack, silver), key=lambda r: r["txn_id"]) == sorted(rows, key=lambda r: r["txn_id"])

    days = sorted({day for day, _ in _flag_rates(items, "country")})
    built = _kappa(env, "gold", name, *(arg for day in days for arg in ("--date", day.isoformat())))
    assert built.returncode == 0, built.stderr[-3000:]
    assert [r["partitions_replaced"] for r in json.loads(built.stdout)] == [len(days)] * 2
    country = gold_names["gold.card_flags_country_daily"]
    merchant = gold_names["gold.card_flags_merchant_daily"]
    assert _gold(stack, country, "country") == _flag_rates(items, "country")
    assert _gold(stack, merchant, "merchant_id") == _flag_rates(items, "merchant_id")

    report = reconcile_pipeline(spark, stack, spec, code, client=redis_client, prefix=name)
    assert report.differences == [] and report.checked["flags_by_country"] > 0
    window, counts = next(iter(sorted(want.flags_by_country.items())))
    place = sorted(counts)[0]
    redis_client.hincrby(f"{name}:flags_by_country:{window}", place, 1)
    done = _kappa(env, "reconcile", name)
    assert done.returncode == 6, done.stderr[-3000:]
    found = json.loads(done.stdout)
    assert [(d["view"], d["key"], d["live_value"], d["lake_value"]) for d in found["differences"]] == [
        ("flags_by_country", f"{window}/{place}", str(counts[place] + 1), str(counts[place]))]
    batch = subprocess.run([*KAPPA, "batch", "reconcile", "--pipeline", name, "--json"], env=env, cwd=REPO,
                           capture_output=True, text=True, timeout=600, check=False)
    assert batch.returncode == 6, batch.stderr[-3000:]   # the same check through `kappa batch`
    assert [(d["view"], d["key"]) for d in json.loads(batch.stdout)["differences"]] == [
        ("flags_by_country", f"{window}/{place}")]

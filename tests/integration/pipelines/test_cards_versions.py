"""The card pipeline rebuilt with a changed speed limit: diff names exactly the keys that move,
promote switches the REST lookup to the new decisions."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import redis
from confluent_kafka import Producer
from fastapi import FastAPI
from fastapi.testclient import TestClient

from jobs.engine.run import PipelineRun, ensure_topics, run_pipeline
from jobs.engine.versions import version
from jobs.pipelines.registry import load
from jobs.serve import pipelines as served
from pipelines.cards.generator import generate
from tests.conftest import KAPPA, REPO
from tests.integration.pipelines.cards_support import (
    copy_cards,
    expected,
    relabelled,
    slow_pairs,
    view_keys,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]
NEW_LIMIT_KMH = 20_000


def test_reprocess_with_a_new_speed_limit_diff_and_promote(stack, spark, tmp_path, kafka_props, kappa_env):
    folder, name = copy_cards(tmp_path)
    pipeline = load(folder)
    spec = pipeline.spec
    items = list(generate(1500, seed=5, cards=80, travel_rate=0.08, malformed_rate=0.01))
    approve = slow_pairs(items, NEW_LIMIT_KMH)
    assert approve, "the data must hold planted pairs slower than the new limit"
    ensure_topics(stack, spec)
    producer = Producer(kafka_props)
    for item in items:
        producer.produce(spec.source.topic, item.value.encode(), item.key.encode() if item.key else None)
    assert producer.flush(30) == 0
    first = version(spec, 1)
    run_pipeline(stack, pipeline, PipelineRun(mode="replay", ending=None, prefix=first.prefix,
                                              query=first.query))

    env = {**os.environ, **kappa_env, "KAPPA_PIPELINES_PATH": str(tmp_path)}

    def kappa(*args: str) -> dict:
        done = subprocess.run([*KAPPA, "pipelines", *args, "--json"], env=env, cwd=REPO, capture_output=True,
                              text=True, timeout=600, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout)

    built = kappa("reprocess", name, "--version", "2", "--param", f"max_speed_kmh={NEW_LIMIT_KMH}")
    assert built["valid_rows"] == sum(not i.kind.startswith("malformed") for i in items)

    old, new = view_keys(expected(items)), view_keys(expected(relabelled(items, approve)))
    report = kappa("diff", name, "--version", "2")
    assert set(report["changed_keys"]) == {k for k in old.keys() & new.keys() if old[k] != new[k]}
    assert report["only_in_current"] == sorted(old.keys() - new.keys())
    assert report["only_in_version"] == sorted(new.keys() - old.keys())
    assert report["keys_changed"] + len(report["only_in_current"]) > 0

    app = FastAPI()
    app.include_router(served.router(stack, [spec]))
    card = next(json.loads(i.value)["card_id"] for i in items
                if i.kind == "planted_travel" and json.loads(i.value)["txn_id"] in approve)
    with TestClient(app) as client:
        before = client.get(f"/api/v1/pipelines/{name}/views/last_use/{card}").json()
        assert (before["version"], before["value"]["decision"]) == (1, "flag")
        assert kappa("promote", name, "--version", "2")["current"] == 2
        served.POINTER_TTL_S, ttl = 0.0, served.POINTER_TTL_S
        try:
            after = client.get(f"/api/v1/pipelines/{name}/views/last_use/{card}").json()
        finally:
            served.POINTER_TTL_S = ttl
    assert (after["version"], after["value"]["decision"], after["value"]["reason"]) == (2, "approve", "ok")
    client_redis = redis.Redis(**stack.redis.client_kwargs())
    assert client_redis.exists(f"{version(spec, 2).prefix}:fence")

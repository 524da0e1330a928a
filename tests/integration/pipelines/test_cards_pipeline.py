"""The card pipeline on the engine, against the generator's labels; keyed state the same in every run.

Generated transactions go through the collector (`kappa collect --pipeline`); then live in small
batches with two kill -9s, one replay, and a bounded replay starting in the middle
of the log (its state before the range folded from the log) give the same decisions; the live
run and the replay the same value under every Redis key; all of them what the labels say.

The live driver moves between hosts: "host A" and "host B" have their own working folder,
``var/``, lake, temp folders and ``KAPPA_HOSTNAME`` and share only ``lake.checkpoint_root`` and
the stack. A second driver started on B while A runs is refused naming A; A is killed -9 and B
continues once A's lease expired; B is killed -9 and restarted on B at once (its own dead driver).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import redis
from confluent_kafka import Consumer, TopicPartition

from jobs.engine.reads import read_view, snapshot
from jobs.engine.run import PipelineRun, ensure_topics, output_topic, run_pipeline
from jobs.pipelines.registry import load
from jobs.streaming.lease import lease_key
from jobs.streaming.state import checkpoint_path
from pipelines.cards.generator import generate
from tests.conftest import KAPPA, REPO
from tests.integration.pipelines.cards_support import copy_cards, expected, family
from tests.integration.streaming.expected import read_topic
from tests.integration.streaming.test_determinism import LEASE_TTL_S, _host_env
from tests.integration.streaming.test_kill_restart import _kill_group

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ITEMS = 3000


def _applied(client: redis.Redis, prefix: str, topic: str) -> int:
    fence = client.hgetall(f"{prefix}:fence")
    return sum(int(v) for k, v in fence.items() if k.decode().rpartition(":")[0] == topic)


def _wait_applied(client: redis.Redis, prefix: str, topic: str, at_least: int, proc: subprocess.Popen,
                  log: Path) -> None:
    deadline = time.monotonic() + 300
    while _applied(client, prefix, topic) < at_least:
        assert proc.poll() is None, f"the live run exited {proc.returncode}: {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"applied {_applied(client, prefix, topic)} of {at_least}"
        time.sleep(0.2)


def _decisions(props: dict[str, str], topic: str) -> dict[str, dict]:
    """txn_id -> analyzed record; a record written twice (a batch run again) must be identical."""
    seen: dict[tuple[int, int], dict] = {}
    for message in read_topic(props, topic, 3):
        record = json.loads(message.value())
        place = (record["source_partition"], record["source_offset"])
        assert seen.setdefault(place, record) == record, f"a re-run wrote another record at {place}"
    return {record["txn_id"]: record for record in seen.values()}


def _highs(props: dict[str, str], topic: str) -> dict[int, int]:
    consumer = Consumer({**props, "group.id": "highs"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15)[1] for p in range(3)}
    finally:
        consumer.close()


def test_cards_live_on_two_hosts_with_kills_replay_and_mid_log_replay_agree(
        stack, spark, tmp_path, kafka_props, kappa_env) -> None:
    folder, name = copy_cards(tmp_path)
    pipeline = load(folder)
    assert not pipeline.problems, pipeline.problems
    spec = pipeline.spec
    items = list(generate(ITEMS, seed=11, cards=120, travel_rate=0.05, amount_rate=0.02, malformed_rate=0.01))
    want = expected(items)
    ensure_topics(stack, spec)
    env = {**os.environ, **kappa_env, "KAPPA_PIPELINES_PATH": str(tmp_path),
           "KAPPA_COLLECTOR__LOG_PATH": str(tmp_path / "collector.sqlite")}
    lines = tmp_path / "transactions.jsonl"
    lines.write_text("".join(item.value + "\n" for item in items))
    collected = subprocess.run([*KAPPA, "collect", "--pipeline", name, "--file", str(lines)], env=env,
                               cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert collected.returncode == 0, collected.stderr[-3000:]
    door = ("malformed:invalid_json", "malformed:not_an_object")   # the collector's structural checks
    rejected_at_the_door = sum(item.kind in door for item in items)
    highs = _highs(kafka_props, spec.source.topic)
    assert sum(highs.values()) == ITEMS - rejected_at_the_door

    # A: live, 150 records per batch, on host A then host B, killed with SIGKILL twice
    client = redis.Redis(**stack.redis.client_kwargs())
    command = [*KAPPA, "pipelines", "run", name, "--mode", "live", "--max-offsets-per-trigger", "150"]
    host_a, host_b = tmp_path / "host-a", tmp_path / "host-b"
    hosts = {"a": (host_a, _host_env(env, "host-a", host_a)), "b": (host_b, _host_env(env, "host-b", host_b))}
    total = sum(highs.values())
    query = spec.streaming.query_name
    lease = lease_key(checkpoint_path(stack.lake.checkpoint_root, query), query)
    for host, kill_at in (("a", total // 3), ("b", 2 * total // 3), ("b", None)):
        folder, host_env = hosts[host]
        log = folder / "live.log"
        with log.open("a") as out:
            proc = subprocess.Popen(command, env=host_env, cwd=folder, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        try:
            if host == "a":   # a second driver of the query on host B is refused, naming A
                _wait_applied(client, name, spec.source.topic, 1, proc, log)
                second = subprocess.run(command, env=hosts["b"][1], cwd=host_b, capture_output=True,
                                        text=True, timeout=300, check=False)
                said = second.stdout + second.stderr
                assert second.returncode == 3, said
                assert f"already runs (host host-a, pid {proc.pid}, since " in said, said
                assert f"kappa pipelines stop {name}" in said and "Traceback" not in said, said
            _wait_applied(client, name, spec.source.topic, kill_at or total, proc, log)
        finally:
            if kill_at:
                _kill_group(proc)
            else:
                proc.send_signal(signal.SIGTERM)
                assert proc.wait(90) == 0, log.read_text()[-3000:]
        if host == "a":   # host A's lease, renewed by nobody, expires before B can take the query
            assert _applied(client, name, spec.source.topic) < total, "host A finished before it was killed"
            deadline = time.monotonic() + LEASE_TTL_S + 10
            while client.exists(lease):
                assert time.monotonic() < deadline, "host A's lease did not expire"
                time.sleep(0.2)
    assert not list(host_b.glob("**/checkpoints")), "host B wrote a checkpoint of its own"

    # B: one replay into another prefix; C: Kafka-only replay of the second half of each partition
    run_pipeline(stack, pipeline, PipelineRun(mode="replay", ending="latest", fresh=True, prefix=f"{name}b",
                                              query=f"{name}-b", output_suffix="b"))
    middle = {p: high // 2 for p, high in highs.items()}
    run_pipeline(stack, pipeline, PipelineRun(
        mode="replay", starting={spec.source.topic: {str(p): o for p, o in middle.items()}},
        ending="latest", fresh=True, sinks=frozenset({"kafka"}), query=f"{name}-c", output_suffix="c"))

    live = _decisions(kafka_props, spec.outputs.analyzed.topic)
    assert {txn: (r["decision"], r["reason"]) for txn, r in live.items()} == want.decisions
    assert _decisions(kafka_props, output_topic(spec.outputs.analyzed.topic, "b")) == live
    mid = _decisions(kafka_props, output_topic(spec.outputs.analyzed.topic, "c"))
    assert mid == {txn: r for txn, r in live.items() if r["source_offset"] >= middle[r["source_partition"]]}
    before_range = {txn for txn, r in live.items() if r["source_offset"] < middle[r["source_partition"]]}
    carried = [r for r in mid.values() if r["prev_txn_id"] in before_range]
    assert any(r["reason"] == "impossible_travel" for r in carried), "no planted pair spans the range start"
    letters = [dict(m.headers()) for m in read_topic(kafka_props, spec.outputs.dlq.topic, 1)]
    by_job = {h["kappa.source"] for h in letters if h["kappa.source"].startswith(b"stream:")}
    at_the_door = [h for h in letters if not h["kappa.source"].startswith(b"stream:")]
    assert (len(at_the_door), len(by_job)) == (rejected_at_the_door, want.dead_letters - rejected_at_the_door)

    views = spec.views
    live_views, replayed = snapshot(client, name, views), snapshot(client, f"{name}b", views)
    assert live_views == replayed
    assert family(live_views, "flags_by_country") == {
        str(m): {c: str(n) for c, n in sorted(counts.items())} for m, counts in want.flags_by_country.items()}
    assert family(live_views, "top_merchants") == {
        str(m): {c: str(n) for c, n in sorted(counts.items())} for m, counts in want.merchant_flags.items()}
    assert family(live_views, "amount_by_currency") == {
        cur: {"amount": str(want.amount_cents[cur]), "transactions": str(want.transactions[cur])}
        for cur in want.transactions}
    seen = family(live_views, "cards_seen")
    assert set(seen) == {str(m) for m in want.cards_seen}
    assert all(abs(seen[str(m)] - len(cards)) <= max(1, len(cards) // 50)
               for m, cards in want.cards_seen.items())
    lookups = {card: read_view(client, name, "last_use", views["last_use"], key=card)["value"]
               for card in want.last_use}
    assert lookups == want.last_use

"""The streaming job end to end on the embedded stack: generated events with late, duplicate and
malformed ones in, Redis summaries / rsvps.analyzed / rsvps.dlq / metrics out, each checked
against an independent plain-Python computation (tests/integration/streaming/expected.py)."""

from __future__ import annotations

import json

import pytest

from jobs.config.load import KappaConfig
from jobs.streaming.job import RunSpec, run_stream
from pipelines.rsvp.generator import FaultMix, RsvpGenerator
from tests.integration.streaming.conftest import produce
from tests.integration.streaming.expected import Expected, Sent, compute, metrics_batches, read_topic

FAULTS = FaultMix(late=0.03, out_of_order=0.05, duplicates=0.03, malformed=0.01)
HLL_BOUND = 3 * 0.0081  # three standard errors of Redis HyperLogLog


def generate(count: int, seed: int = 11, partitions: int = 3) -> list[Sent]:
    """Generated lines with the position each will take (round-robin, fresh topic)."""
    items = RsvpGenerator(seed=seed, faults=FAULTS).generate(count)
    return [Sent(i % partitions, i // partitions, g.line, g.kind) for i, g in enumerate(items)]


def check_redis(cfg: KappaConfig, redis_client, expected: Expected) -> None:
    p = cfg.streaming.redis_prefix

    def text(value) -> str:
        return value.decode() if isinstance(value, bytes) else value

    totals = {text(k): int(v) for k, v in redis_client.hgetall(f"{p}:totals").items()}
    assert totals == {k: v for k, v in expected.totals.items() if v}
    topics = {text(k): int(v) for k, v in redis_client.zrange(f"{p}:topics:all", 0, -1, withscores=True)}
    assert topics == dict(expected.topics)
    for start, counts in expected.cities.items():
        found = {text(k): int(v) for k, v in redis_client.hgetall(f"{p}:cities:{start}").items()}
        assert found == dict(counts), f"cities window {start}"
    assert len(redis_client.zrange(f"{p}:cities:windows", 0, -1)) == len(expected.cities)
    for start, counts in expected.trending.items():
        found = {text(k): int(v) for k, v in
                 redis_client.zrange(f"{p}:trending:{start}", 0, -1, withscores=True)}
        assert found == dict(counts), f"trending window {start}"
    for start, members in expected.members.items():
        estimate = redis_client.pfcount(f"{p}:members:{start}")
        assert abs(estimate - len(members)) <= max(1, HLL_BOUND * len(members)), f"members {start}"
    for event_id, counts in expected.events.items():
        found = {text(k): text(v) for k, v in redis_client.hgetall(f"{p}:event:{event_id}").items()}
        assert {k: int(found.get(k, 0)) for k in ("yes", "no", "guests")} == {
            k: counts[k] for k in ("yes", "no", "guests")}, event_id
    assert redis_client.ttl(f"{p}:cities:{next(iter(expected.cities))}") > 0


def check_kafka(cfg: KappaConfig, props, expected: Expected, allow_duplicates: bool = False) -> None:
    s = cfg.streaming
    analyzed = [json.loads(m.value()) for m in read_topic(props, s.analyzed_topic, 3)]
    positions = [(r["source_partition"], r["source_offset"]) for r in analyzed]
    assert set(positions) == expected.valid_positions
    if not allow_duplicates:
        assert len(positions) == len(set(positions))
    assert {r["schema_version"] for r in analyzed} == {1}
    assert sum(r["late"] for r in {(r["source_partition"], r["source_offset"]): r
                                   for r in analyzed}.values()) == expected.totals["late"]
    dead = read_topic(props, s.dlq_topic, 1)
    reasons = {}
    for message in dead:
        headers = {k: v.decode() for k, v in message.headers()}
        position = (int(headers["kappa.source_partition"]), int(headers["kappa.source_offset"]))
        reasons[position] = headers["kappa.reason"].split(":", 1)[0]
        assert headers["kappa.source_topic"] == s.source_topic
        assert ": " in headers["kappa.reason"]  # code and detail
    assert reasons == expected.invalid
    if not allow_duplicates:
        assert len(dead) == len(expected.invalid)


def check_metrics(batches, total: int) -> None:
    assert sum(b["input_rows"] for b in batches) == total
    for batch in batches:
        assert batch["input_rows"] == batch["valid_rows"] + batch["dlq_rows"]
        assert batch["late_rows"] <= batch["valid_rows"]
        # every task reports its phases; none took longer than the Spark pass that ran it
        tasks = batch["tasks"]
        if not batch["input_rows"]:
            continue
        assert tasks["count"] >= 1, tasks
        assert 0 <= tasks["max_ms"]["task"] <= batch["phases_ms"]["read_process_produce"] + 1, batch
        assert {"read", "process", "flush", "members", "output", "trim"} <= tasks["max_ms"].keys(), tasks


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_fifty_thousand_events_match_an_independent_computation(stream_cfg, spark, redis_client,
                                                                 kafka_props, run_kappa):
    sent = generate(50_000)
    produce(stream_cfg, stream_cfg.streaming.source_topic, (s.line for s in sent))
    report = run_stream(stream_cfg, RunSpec(mode="replay", ending="latest",
                                            max_offsets_per_trigger=20_000))
    assert report.records_read == 50_000
    s = stream_cfg.streaming
    batches = metrics_batches(kafka_props, s.metrics_topic, report.query)
    assert len(batches) == report.batches >= 3
    check_metrics(batches, 50_000)
    expected = compute(sent)
    assert expected.totals["late"] > 0 and expected.totals["dlq"] > 0
    assert report.dead_lettered == expected.totals["dlq"] and report.late == expected.totals["late"]
    check_redis(stream_cfg, redis_client, expected)
    check_kafka(stream_cfg, kafka_props, expected)
    summaries = [json.loads(m.value()) for m in read_topic(kafka_props, s.summaries_topic, 3)]
    latest_top = [r for r in summaries if r["kind"] == "top_topics"][-1]
    top = expected.topics.most_common()
    assert [i["count"] for i in latest_top["items"]] == [c for _, c in top[: s.top_n]]
    assert all(i["error"] == 0 for i in latest_top["items"])
    check_status(run_kappa, stream_cfg, report.query, batches[-1])


def check_status(run_kappa, cfg: KappaConfig, query: str, last: dict) -> None:
    """`kappa stream status` reports the query's last batch as the metrics topic has it."""
    env = {"KAPPA_STREAMING__REDIS_PREFIX": cfg.streaming.redis_prefix,
           "KAPPA_LAKE__CHECKPOINT_ROOT": cfg.lake.checkpoint_root}
    result = run_kappa("stream", "status", "--json", env=env)
    assert result.returncode == 0, result.stderr
    [row] = json.loads(result.stdout)
    assert (row["query"], row["running"], row["last_batch"]) == (query, False, last["batch_id"])
    assert (row["state"], row["mode"]) == ("finished", "replay")
    assert (row["input_rows"], row["batch_duration_ms"]) == (last["input_rows"], last["batch_duration_ms"])
    assert row["tasks"] == last["tasks"] and row["phases_ms"] == last["phases_ms"]
    assert row["apply_ms"] == last["apply_ms"] and row["pending_apply_batch"] is None
    text = run_kappa("stream", "status", env=env)
    assert text.returncode == 0, text.stderr
    assert f"{query}: finished (replay) at " in text.stdout and "NOT running" not in text.stdout
    assert f"records read; last batch {last['batch_id']}" in text.stdout
    assert f"last batch {last['batch_duration_ms']} ms: Spark job" in text.stdout
    assert "slowest task" in text.stdout, text.stdout
    assert f"redis apply {last['apply_ms']['redis_apply']} ms" in text.stdout, text.stdout


def test_a_replay_again_through_either_read_path_or_regrouped_leaves_redis_as_after_the_first(
        stream_cfg, spark, redis_client):
    sent = generate(3_000, seed=5)
    produce(stream_cfg, stream_cfg.streaming.source_topic, (s.line for s in sent))
    spec = RunSpec(mode="replay", ending="latest", max_offsets_per_trigger=1_500, sinks=frozenset({"redis"}))
    run_stream(stream_cfg, spec)
    prefix = stream_cfg.streaming.redis_prefix

    def snapshot() -> dict:
        keys = sorted(k for k in redis_client.scan_iter(f"{prefix}:*") if b":metrics:" not in k)
        state = {}
        for key in keys:
            kind = redis_client.type(key)
            if kind == b"hash":
                value = redis_client.hgetall(key)
                value.pop(b"updated_ms", None)
                value.pop(b"batch_id", None)
                value.pop(b"query", None)
            elif kind == b"zset":
                value = redis_client.zrange(key, 0, -1, withscores=True)
            else:
                value = redis_client.dump(key)
            state[key] = value
        return state

    first = snapshot()
    # The second run also takes the other read path: the source reads the records and they
    # reach the tasks through the JVM (as with Spark's JVM connector), not read by the tasks.
    through_jvm = stream_cfg.model_copy(update={
        "streaming": stream_cfg.streaming.model_copy(update={"read_in_tasks": False})})
    again = run_stream(through_jvm, RunSpec(mode="replay", ending="latest", max_offsets_per_trigger=1_000,
                                            sinks=frozenset({"redis"}), fresh=True))
    assert again.records_read == 3_000
    assert snapshot() == first
    # A third: ranges split (max_records_per_partition) and regrouped into one task (task_slots).
    regrouped = stream_cfg.model_copy(update={"streaming": stream_cfg.streaming.model_copy(
        update={"task_slots": 1, "max_records_per_partition": 400})})
    third = run_stream(regrouped, RunSpec(mode="replay", ending="latest", max_offsets_per_trigger=1_500,
                                          sinks=frozenset({"redis"}), fresh=True))
    assert third.records_read == 3_000
    assert snapshot() == first

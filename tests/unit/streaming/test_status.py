"""`kappa stream status` text from a status row (pure; lines written by hand)."""

from __future__ import annotations

from jobs.streaming.status import status_lines

ROW = {"query": "rsvps-live", "running": False, "pid": None, "last_batch": 57, "last_batch_age_s": 3.2,
       "rows_per_s": 51000.4, "offsets_behind_latest": 0, "watermark_ms": 1_767_225_600_000,
       "input_rows": 100_000, "dlq_rows": 10, "late_rows": 3, "batch_duration_ms": 1750,
       "phases_ms": {"read_process_produce": 1600, "merge": 12, "wait_apply": 0, "metrics": 3},
       "tasks": {"count": 2, "max_ms": {"read": 55, "process": 1169, "flush": 4, "members": 98,
                                        "task": 1480}},
       "apply_ms": {"redis_apply": 127, "summaries": 89}, "pending_apply_batch": None}


def test_state_then_where_the_last_batch_went() -> None:
    assert status_lines(ROW) == [
        "rsvps-live: NOT running; last batch 57 3.2 s ago, 51000 rows/s, 0 behind latest, watermark "
        "2026-01-01T00:00:00+00:00",
        "  last batch 1750 ms: Spark job 1600 ms (slowest task 1480 ms: read 55, process 1169, flush 4, "
        "members 98), wait apply 0 ms, redis apply 127 ms, summaries 89 ms"]


def test_a_pending_apply_of_a_stopped_query_is_named() -> None:
    lines = status_lines(ROW | {"pending_apply_batch": 56})
    assert lines[-1] == ("  the Redis effects of batch 56 are pending: the next start applies them "
                         '(docs/streaming.md, "Applied in the background")')
    running = status_lines(ROW | {"pending_apply_batch": 56, "running": True, "pid": 42})
    assert running[0].startswith("rsvps-live: running (pid 42);") and len(running) == 2


def test_metrics_from_before_the_background_apply_still_show_their_apply() -> None:
    old = ROW | {"apply_ms": None, "phases_ms": {"read_process_produce": 1600, "redis_apply": 120,
                                                 "summaries": 90}}
    assert status_lines(old)[1].endswith("members 98), redis apply 120 ms, summaries 90 ms")


def test_a_finished_replay_reads_finished_and_a_killed_one_ended() -> None:
    done = ROW | {"state": "finished", "mode": "replay", "state_since_ms": 1_767_225_660_000,
                  "state_detail": "3 batches, 300 records read"}
    assert status_lines(done)[0].startswith(
        "rsvps-live: finished (replay) at 2026-01-01T00:01:00+00:00: 3 batches, 300 records read; "
        "last batch 57")
    assert status_lines(ROW | {"state": "ended"})[0].startswith(
        "rsvps-live: NOT running (ended without a final state: killed, or its machine went down);")


def test_a_query_waiting_for_kafka_says_for_what_and_since_when() -> None:
    waiting = ROW | {"running": True, "pid": 42, "state": "waiting", "state_since_ms": 1_767_225_600_000,
                     "state_detail": "Kafka at 127.0.0.1:9092 (kafka unreachable)"}
    assert status_lines(waiting)[0].startswith(
        "rsvps-live: running (pid 42), WAITING for Kafka at 127.0.0.1:9092 (kafka unreachable) since "
        "2026-01-01T00:00:00+00:00; last batch 57")


def test_a_run_without_batch_metrics_in_redis_says_only_how_it_ended() -> None:
    bare = {key: None for key in ROW} | {"query": "q-kafka-only", "running": False, "rows_per_s": 0.0}
    done = bare | {"state": "finished", "mode": "replay", "state_since_ms": 1_767_225_660_000,
                   "state_detail": "2 batches, 40 records read"}
    assert status_lines(done) == ["q-kafka-only: finished (replay) at 2026-01-01T00:01:00+00:00: 2 batches, "
                                  "40 records read"]
    assert status_lines(bare | {"state": "running", "running": True, "pid": 7}) == [
        "q-kafka-only: running (pid 7); no batch yet"]

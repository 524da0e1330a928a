"""State beside a query's checkpoint: watermark log, fingerprint, lock, Spark's offset log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.streaming.state import (
    AlreadyRunning,
    BatchWatermark,
    CheckpointError,
    QueryLock,
    WatermarkLog,
    check_fingerprint,
    fingerprint,
    last_committed,
    last_offsets,
    lock_holder,
)

REPO = Path(__file__).resolve().parents[3]
DELAY = 60_000


def test_first_batch_has_no_watermark(tmp_path: Path) -> None:
    assert WatermarkLog(tmp_path / "q", DELAY).for_batch(0) == BatchWatermark(None, None)


def test_next_batch_uses_max_minus_delay_and_a_replay_reuses_its_record(tmp_path: Path) -> None:
    log = WatermarkLog(tmp_path / "q", DELAY)
    log.record(0, BatchWatermark(None, None), 1_000_000)
    log.record(1, BatchWatermark(940_000, 1_000_000), 1_500_000)
    assert log.for_batch(2) == BatchWatermark(1_440_000, 1_500_000)
    # batch 1 replayed after a crash: the watermark it used, not one from its own max
    assert log.for_batch(1) == BatchWatermark(940_000, 1_000_000)
    assert log.for_batch(0) == BatchWatermark(None, None)
    # a batch id after a gap takes the latest earlier record
    assert log.for_batch(7) == BatchWatermark(1_440_000, 1_500_000)
    assert json.loads((tmp_path / "q/kappa-state/watermarks/1.json").read_text()) == {
        "batch_id": 1, "watermark_ms": 940_000, "max_event_ms_before": 1_000_000,
        "max_event_ms": 1_500_000}


def test_a_batch_without_events_keeps_no_watermark(tmp_path: Path) -> None:
    log = WatermarkLog(tmp_path / "q", DELAY)
    log.record(0, BatchWatermark(None, None), None)
    assert log.for_batch(1) == BatchWatermark(None, None)


def test_seed_carries_the_max_over_a_new_checkpoint(tmp_path: Path) -> None:
    folder = tmp_path / "q/kappa-state/watermarks"
    folder.mkdir(parents=True)
    (folder / "seed.json").write_text('{"max_event_ms": 2000000}')
    log = WatermarkLog(tmp_path / "q", DELAY)
    assert log.for_batch(0) == BatchWatermark(1_940_000, 2_000_000)
    log.record(0, BatchWatermark(1_940_000, 2_000_000), 2_100_000)
    assert log.for_batch(1) == BatchWatermark(2_040_000, 2_100_000)


def test_old_records_are_pruned(tmp_path: Path) -> None:
    log = WatermarkLog(tmp_path / "q", DELAY)
    for batch_id in range(203):
        log.record(batch_id, BatchWatermark(None, None), batch_id)
    names = {p.name for p in log.folder.iterdir()}
    assert len(names) == 200
    assert {"0.json", "1.json", "2.json"}.isdisjoint(names)
    assert {"3.json", "202.json"} <= names


FINGERPRINT = fingerprint(["rsvps.raw"], {"city": 60_000}, ["redis", "kafka"])


def test_fingerprint_written_then_accepted(tmp_path: Path) -> None:
    checkpoint = tmp_path / "rsvps-live"
    assert FINGERPRINT == {"format": "kappa-streaming-state/1", "source_topics": ["rsvps.raw"],
                           "windows_ms": {"city": 60_000}, "sinks": ["kafka", "redis"]}
    check_fingerprint(checkpoint, FINGERPRINT, "rsvps-live")
    assert json.loads((tmp_path / "rsvps-live.fingerprint.json").read_text()) == FINGERPRINT
    check_fingerprint(checkpoint, FINGERPRINT, "rsvps-live")


def test_fingerprint_mismatch_names_the_recovery_options(tmp_path: Path) -> None:
    checkpoint = tmp_path / "rsvps-live"
    check_fingerprint(checkpoint, FINGERPRINT, "rsvps-live")
    other = fingerprint(["rsvps.other"], {"city": 60_000}, ["redis", "kafka"])
    with pytest.raises(CheckpointError) as caught:
        check_fingerprint(checkpoint, other, "rsvps-live")
    message = str(caught.value)
    for part in ("source_topics changed", "['rsvps.raw']", "['rsvps.other']", "revert the config",
                 "kappa stream checkpoint reset rsvps-live --to <timestamp>",
                 "kappa stream checkpoint rebuild rsvps-live", "new streaming.query_name",
                 "docs/runbooks/checkpoint.md"):
        assert part in message, part


def test_a_foreign_checkpoint_without_fingerprint_is_refused(tmp_path: Path) -> None:
    checkpoint = tmp_path / "rsvps-live"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "offsets" / "0").write_text("v1\n{}\n{}\n")
    with pytest.raises(CheckpointError, match=r"no fingerprint.*kappa stream checkpoint inspect rsvps-live"):
        check_fingerprint(checkpoint, FINGERPRINT, "rsvps-live")
    assert not (tmp_path / "rsvps-live.fingerprint.json").exists()


def test_lock_refuses_a_second_fd_and_reports_the_pid(tmp_path: Path) -> None:
    checkpoint = tmp_path / "q"
    assert lock_holder(checkpoint) is None
    first, second = QueryLock(checkpoint, "q"), QueryLock(checkpoint, "q")
    first.acquire()
    try:
        with pytest.raises(AlreadyRunning, match=rf"query 'q' already runs \(pid {os.getpid()}, lock "):
            second.acquire()
        assert lock_holder(checkpoint) == os.getpid()
    finally:
        first.release()
    assert lock_holder(checkpoint) is None
    second.acquire()
    second.release()


HOLD = ("import sys; from pathlib import Path; from jobs.streaming.state import QueryLock; "
        "lock = QueryLock(Path(sys.argv[1]), 'q'); lock.acquire(); print('held', flush=True); "
        "sys.stdin.read()")


def test_lock_refuses_a_second_process_until_it_exits(tmp_path: Path) -> None:
    checkpoint = tmp_path / "q"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(checkpoint)], cwd=REPO,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert lock_holder(checkpoint) == holder.pid
        with pytest.raises(AlreadyRunning, match=rf"pid {holder.pid}\b") as caught:
            QueryLock(checkpoint, "q").acquire()
        assert caught.value.exit_code == 3
    finally:
        holder.communicate("", timeout=30)
    assert lock_holder(checkpoint) is None
    lock = QueryLock(checkpoint, "q")
    lock.acquire()
    lock.release()


def test_last_offsets_reads_spark_offset_log(tmp_path: Path) -> None:
    checkpoint = tmp_path / "q"
    assert last_offsets(checkpoint) is None
    offsets = checkpoint / "offsets"
    offsets.mkdir(parents=True)
    meta = ('{"batchWatermarkMs":0,"batchTimestampMs":1767225600000,"conf":'
            '{"spark.sql.shuffle.partitions":"2"}}')
    (offsets / "9").write_text(f'v1\n{meta}\n{{"rsvps.raw":{{"0":100,"1":250}}}}\n')
    (offsets / "10").write_text(f'v1\n{meta}\n{{"rsvps.raw":{{"0":120,"1":250,"2":7}}}}')
    (offsets / ".10.crc").write_text("x")
    assert last_offsets(checkpoint) == (10, {"rsvps.raw": {"0": 120, "1": 250, "2": 7}})
    assert last_committed(checkpoint) is None
    (checkpoint / "commits").mkdir()
    (checkpoint / "commits" / "9").write_text('v1\n{"nextBatchWatermarkMs":0}')
    assert last_committed(checkpoint) == 9

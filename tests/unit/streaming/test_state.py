"""State beside a query's checkpoint: stream time, fingerprint, lock, Spark's offset log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.streaming.state import (
    AlreadyRunning,
    CheckpointError,
    QueryLock,
    check_fingerprint,
    fingerprint,
    last_committed,
    last_offsets,
    lock_holder,
)
from jobs.streaming.stream_time import KEEP_POINTS, StreamTimeLog, is_late, nearest_point

REPO = Path(__file__).resolve().parents[3]


def test_stream_time_log_keeps_the_points_of_the_last_batches(tmp_path: Path) -> None:
    log = StreamTimeLog(tmp_path / "q")
    assert log.points() == {}
    log.record({("t", 0): (100, 5_000), ("t", 1): (40, None)})
    log.record({("t", 0): (250, 9_000)})
    assert log.points() == {("t", 0): {100: 5_000, 250: 9_000}, ("t", 1): {40: None}}
    for end in range(300, 300 + KEEP_POINTS + 5):
        log.record({("t", 0): (end, end)})
    kept = log.points()[("t", 0)]
    assert len(kept) == KEEP_POINTS and min(kept) == 305  # the oldest ones went: 100, 250, 300-304


def test_nearest_point_and_the_late_rule() -> None:
    points = {100: 5_000, 250: 9_000}
    assert nearest_point(points, 99) is None
    assert nearest_point(points, 100) == (100, 5_000)
    assert nearest_point(points, 260) == (250, 9_000)
    assert is_late(2_999, 5_000, 2_000) and not is_late(3_000, 5_000, 2_000)
    assert not is_late(0, None, 2_000)


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

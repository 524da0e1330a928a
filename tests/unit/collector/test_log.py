"""The SQLite log and its single writer: ids, group commit, acks, failed store, redrive."""

from __future__ import annotations

import sqlite3

import pytest

from jobs.collector.log import RECORD, REJECT, Entry, MessageLog
from jobs.collector.writer import LogWriter


def _entries(count: int, kind: str = RECORD) -> list[Entry]:
    return [Entry(kind, "raw", str(i).encode(), b"v%d" % i) for i in range(count)]


@pytest.fixture()
def log(tmp_path):
    opened = MessageLog(tmp_path / "log.sqlite")
    yield opened
    opened.close()


def test_deletes_of_scattered_ids_remove_exactly_those(log):
    log.begin()
    log.append(_entries(1200), now=1.0)
    log.delete([*range(1, 601), 700, 702, *range(900, 1101)])
    log.commit()
    left = [row.id for row in log.read_after(0, 2000)]
    assert left == [i for i in range(1, 1201) if not (i <= 600 or i in (700, 702) or 900 <= i <= 1100)]


def test_log_is_wal_with_full_sync(log):
    assert log.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert log.db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_ids_are_never_reused_even_after_the_newest_rows_are_deleted(log):
    log.begin()
    first = [row.id for row in log.append(_entries(3), now=1.0)]
    log.commit()
    log.begin()
    log.delete(first)
    log.commit()
    log.begin()
    second = [row.id for row in log.append(_entries(2), now=2.0)]
    log.commit()
    assert first == [1, 2, 3] and second == [4, 5]
    assert [row.id for row in log.read_after(0, 10)] == [4, 5]
    assert [row.id for row in log.read_after(4, 10)] == [5]


def test_writer_commits_groups_and_tracks_pending(log):
    commits: list[list[int]] = []
    writer = LogWriter(log)
    writer.on_commit = lambda rows: commits.append([row.id for row in rows])
    futures = [writer.append(_entries(100)) for _ in range(5)]
    futures.append(writer.append(_entries(2, REJECT), ["invalid_json", "oversize"]))
    writer.start()  # everything is queued already: one group, one commit
    ids = [future.result(timeout=10) for future in futures]
    assert sorted(i for batch in ids for i in batch) == list(range(1, 503))
    assert writer.state.pending == 500 and writer.state.pending_rejects == 2
    writer.acknowledge(ids[0], ids[5])
    writer.barrier().result(timeout=10)
    assert writer.state.pending == 400 and writer.state.pending_rejects == 0
    assert writer.state.totals["acknowledged"] == 100 and writer.state.totals["rejected:oversize"] == 1
    assert commits == [list(range(1, 503))]
    writer.stop()
    assert log.pending_counts() == {RECORD: 400, REJECT: 0, "failed": 0}
    assert log.counters()["accepted"] == 500 and log.counters()["dlq_delivered"] == 2


def test_failed_records_are_kept_with_their_reason_and_can_be_redriven(log, tmp_path):
    writer = LogWriter(log)
    writer.start()
    ids = writer.append(_entries(4)).result(timeout=10)
    writer.note_attempts([(ids[0], "timed out")])
    writer.fail([(ids[0], RECORD, "Broker: Message size too large"), (ids[1], RECORD, "too large")])
    writer.barrier().result(timeout=10)
    assert writer.state.failed == 2 and writer.state.pending == 2
    rows = log.failed_rows(10)
    assert [(r["id"], r["key"], r["attempts"]) for r in rows] == [(1, "0", 2), (2, "1", 1)]
    assert rows[0]["reason"] == "Broker: Message size too large"

    other = MessageLog(tmp_path / "log.sqlite")  # another process: `kappa collect failed redrive`
    with pytest.raises(Exception, match="no failed record with id 99"):
        other.redrive([99], now=5.0)
    assert other.redrive([1], now=5.0) == 1
    other.db.close()
    writer.request_resync()
    writer.barrier().result(timeout=10)
    assert writer.state.failed == 1 and writer.state.pending == 3 and writer.state.max_id == 5
    assert [row.key for row in log.read_after(4, 10)] == [b"0"]
    writer.stop()


def test_a_write_failure_fails_the_callers_future(tmp_path):
    log = MessageLog(tmp_path / "log.sqlite")
    writer = LogWriter(log)
    writer.start()
    log.db.execute("PRAGMA query_only = 1")
    future = writer.append(_entries(1))
    with pytest.raises(Exception, match="were not accepted"):
        future.result(timeout=10)
    assert writer.error is not None
    writer.stop()
    log.db.close()
    assert sqlite3.connect(tmp_path / "log.sqlite").execute("SELECT COUNT(*) FROM outbox").fetchone()[0] == 0


def test_dead_letter_values_over_256_kib_are_cut_and_carry_their_original_size():
    from jobs.collector.service import reject_entry

    big = reject_entry("dlq", b"x" * 300_000, "oversize: 300000 bytes > max_record_bytes 65536", "http")
    assert big.kind == REJECT and big.topic == "dlq" and big.key is None
    assert big.value == b"x" * 262_144
    assert big.headers == (("kappa.reason", b"oversize: 300000 bytes > max_record_bytes 65536"),
                           ("kappa.source", b"http"), ("kappa.original_bytes", b"300000"))
    exact = reject_entry("dlq", b"y" * 262_144, "invalid_json: x", "file")
    assert exact.value == b"y" * 262_144
    assert exact.headers == (("kappa.reason", b"invalid_json: x"), ("kappa.source", b"file"))

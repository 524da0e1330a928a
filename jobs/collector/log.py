"""The collector's durable message log: SQLite in WAL mode with ``synchronous=FULL``.

Tables: ``outbox`` (records logged but not yet acknowledged by the broker: accepted records
for the raw topic and rejected ones for the dead-letter topic), ``failed`` (records that ran out
of produce attempts; inspect and re-drive with ``kappa collect failed``) and ``counters``
(running totals, updated in the same transaction as the rows they count).

WAL with ``synchronous=FULL`` fsyncs the WAL at every commit, so a commit the collector has
acknowledged survives a power loss, not only a process crash (``NORMAL`` would survive only the
latter). The cost is one fsync per transaction, which group commit spreads over many records.
Ids come from ``AUTOINCREMENT`` so they are never reused: the producer pump reads the outbox in
id order with a cursor.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from jobs.errors import KappaError

RECORD, REJECT = "record", "reject"
BUSY_TIMEOUT_MS = 10_000
PARAMS_PER_STATEMENT = 500
ROWS_PER_INSERT = 500
COUNTERS = ("accepted", "rejected", "acknowledged", "dlq_delivered", "failed", "retried", "redriven")
SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
  id INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, topic TEXT NOT NULL, key BLOB,
  value BLOB NOT NULL, headers TEXT, attempts INTEGER NOT NULL DEFAULT 0, last_error TEXT,
  created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS failed (
  id INTEGER PRIMARY KEY, kind TEXT NOT NULL, topic TEXT NOT NULL, key BLOB, value BLOB NOT NULL,
  headers TEXT, attempts INTEGER NOT NULL, reason TEXT NOT NULL, created_at REAL NOT NULL,
  failed_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""
COLUMNS = "id, kind, topic, key, value, headers, attempts"


class LogError(KappaError):
    """The message log cannot be opened or written (disk full, permissions, corruption)."""


@dataclass(frozen=True)
class Entry:
    """A record to log: where it goes and its exact bytes."""

    kind: str
    topic: str
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...] | None = None


@dataclass(frozen=True)
class Row:
    """A logged record as the pump reads it back."""

    id: int
    kind: str
    topic: str
    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]] | None
    attempts: int


class MessageLog:
    """One connection to the log file. Writes happen on exactly one thread per process."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self.db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=FULL")
            self.db.executescript(SCHEMA)
            self.db.executemany("INSERT OR IGNORE INTO counters VALUES (?, 0)", [(c,) for c in COUNTERS])
        except (OSError, sqlite3.Error) as exc:
            raise LogError(f"cannot open the collector log {self.path}: {exc}; check the folder "
                           "exists and is writable, and that the disk is not full") from exc

    def close(self) -> None:
        """Checkpoint the WAL into the database file and close."""
        try:
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error:
            pass
        self.db.close()

    # ------------------------------------------------------------------ writes (one thread)
    def begin(self) -> None:
        """Start a write transaction (takes the database write lock now)."""
        self.db.execute("BEGIN IMMEDIATE")

    def commit(self) -> None:
        """Commit (fsync of the WAL with synchronous=FULL)."""
        self.db.execute("COMMIT")

    def rollback(self) -> None:
        """Abandon the open transaction, if any."""
        if self.db.in_transaction:
            self.db.execute("ROLLBACK")

    def append(self, entries: Sequence[Entry], now: float) -> list[Row]:
        """Insert entries inside an open transaction; return them as rows (with ids), in order.

        Many rows go in one statement: the sqlite3 module releases and re-takes the GIL at
        every statement step, which costs far more than the insert when threads contend.
        """
        row = self.db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'outbox'").fetchone()
        first = (row[0] if row else 0) + 1
        for start in range(0, len(entries), ROWS_PER_INSERT):
            chunk = entries[start:start + ROWS_PER_INSERT]
            params = [value for e in chunk
                      for value in (e.kind, e.topic, e.key, e.value, _dump_headers(e.headers), now)]
            self.db.execute("INSERT INTO outbox (kind, topic, key, value, headers, created_at) VALUES "
                            + ",".join(["(?,?,?,?,?,?)"] * len(chunk)), params)
        return [Row(first + offset, e.kind, e.topic, e.key, e.value,
                    list(e.headers) if e.headers else None, 0) for offset, e in enumerate(entries)]

    def delete(self, ids: Sequence[int]) -> None:
        """Remove acknowledged records (runs of consecutive ids become one range each)."""
        ranges = _ranges(ids)
        for start in range(0, len(ranges), PARAMS_PER_STATEMENT // 2):
            chunk = ranges[start:start + PARAMS_PER_STATEMENT // 2]
            where = " OR ".join(["id BETWEEN ? AND ?"] * len(chunk))
            self.db.execute(f"DELETE FROM outbox WHERE {where}", [bound for pair in chunk for bound in pair])

    def note_attempt(self, errors: Sequence[tuple[int, str]]) -> None:
        """Count one failed produce attempt per record, with its error."""
        self.db.executemany("UPDATE outbox SET attempts = attempts + 1, last_error = ? WHERE id = ?",
                            [(error, rid) for rid, error in errors])

    def move_to_failed(self, errors: Sequence[tuple[int, str]], now: float) -> None:
        """Move records that ran out of attempts to the failed store."""
        self.db.executemany(
            "INSERT OR REPLACE INTO failed SELECT id, kind, topic, key, value, headers, attempts + 1,"
            " ?, created_at, ? FROM outbox WHERE id = ?", [(error, now, rid) for rid, error in errors])
        self.delete([rid for rid, _ in errors])

    def add_counters(self, deltas: dict[str, int]) -> None:
        """Add to running totals (names outside COUNTERS, like ``rejected:oversize``, are created)."""
        items = [(name, value) for name, value in deltas.items() if value]
        self.db.executemany("INSERT OR IGNORE INTO counters VALUES (?, 0)", [(n,) for n, _ in items])
        self.db.executemany("UPDATE counters SET value = value + ? WHERE name = ?",
                            [(value, name) for name, value in items])

    def redrive(self, ids: Iterable[int] | None, now: float) -> int:
        """Move failed records (all when ``ids`` is None) back to the outbox with new ids."""
        self.begin()
        try:
            selected = self._failed_ids(ids)
            for chunk in _chunks(selected):
                self.db.execute(
                    "INSERT INTO outbox (kind, topic, key, value, headers, created_at) SELECT kind,"
                    f" topic, key, value, headers, ? FROM failed WHERE id IN ({_marks(chunk)}) ORDER BY id",
                    [now, *chunk])
                self.db.execute(f"DELETE FROM failed WHERE id IN ({_marks(chunk)})", chunk)
            self.add_counters({"redriven": len(selected)})
            self.commit()
        except BaseException:
            self.rollback()
            raise
        return len(selected)

    # ------------------------------------------------------------------ reads
    def read_after(self, cursor: int, limit: int) -> list[Row]:
        """Outbox records with id greater than ``cursor``, in id order."""
        rows = self.db.execute(
            f"SELECT {COLUMNS} FROM outbox WHERE id > ? ORDER BY id LIMIT ?", (cursor, limit))
        return [Row(r[0], r[1], r[2], r[3], r[4], _load_headers(r[5]), r[6]) for r in rows]

    def pending_counts(self) -> dict[str, int]:
        """Outbox rows by kind, and rows in the failed store."""
        counts = dict(self.db.execute("SELECT kind, COUNT(*) FROM outbox GROUP BY kind").fetchall())
        failed = self.db.execute("SELECT COUNT(*) FROM failed").fetchone()[0]
        return {RECORD: counts.get(RECORD, 0), REJECT: counts.get(REJECT, 0), "failed": failed}

    def max_id(self) -> int:
        """The largest id ever assigned (0 for a new log)."""
        row = self.db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'outbox'").fetchone()
        return row[0] if row else 0

    def oldest_pending_age(self, now: float) -> float:
        """Seconds since the oldest outbox record was logged (0 when empty)."""
        row = self.db.execute("SELECT created_at FROM outbox ORDER BY id LIMIT 1").fetchone()
        return max(0.0, now - row[0]) if row else 0.0

    def counters(self) -> dict[str, int]:
        """Running totals."""
        return dict(self.db.execute("SELECT name, value FROM counters").fetchall())

    def failed_rows(self, limit: int) -> list[dict[str, object]]:
        """The oldest failed records, for ``kappa collect failed list``."""
        rows = self.db.execute(
            "SELECT id, kind, topic, key, length(value), attempts, reason, failed_at FROM failed"
            " ORDER BY id LIMIT ?", (limit,))
        names = ("id", "kind", "topic", "key", "bytes", "attempts", "reason", "failed_at")
        return [{**dict(zip(names, r, strict=True)), "key": r[3].decode(errors="replace") if r[3] else None}
                for r in rows]

    def _failed_ids(self, ids: Iterable[int] | None) -> list[int]:
        if ids is None:
            return [r[0] for r in self.db.execute("SELECT id FROM failed ORDER BY id")]
        wanted = sorted(set(ids))
        found: list[int] = []
        for chunk in _chunks(wanted):
            found += [r[0] for r in self.db.execute(
                f"SELECT id FROM failed WHERE id IN ({_marks(chunk)})", chunk)]
        missing = sorted(set(wanted) - set(found))
        if missing:
            raise KappaError(f"no failed record with id {', '.join(map(str, missing[:10]))}; "
                             "list them with `kappa collect failed list`")
        return sorted(found)


def _ranges(ids: Sequence[int]) -> list[tuple[int, int]]:
    """Sorted ids as (first, last) runs of consecutive values."""
    ranges: list[tuple[int, int]] = []
    for rid in sorted(ids):
        if ranges and rid == ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], rid)
        else:
            ranges.append((rid, rid))
    return ranges


def _chunks(ids: Sequence[int]) -> Iterable[list[int]]:
    ids = list(ids)
    for start in range(0, len(ids), PARAMS_PER_STATEMENT):
        yield ids[start:start + PARAMS_PER_STATEMENT]


def _marks(chunk: Sequence[int]) -> str:
    return ",".join("?" * len(chunk))


def _dump_headers(headers: tuple[tuple[str, bytes], ...] | None) -> str | None:
    if not headers:
        return None
    return json.dumps([[name, value.decode("utf-8", "replace")] for name, value in headers])


def _load_headers(text: str | None) -> list[tuple[str, bytes]] | None:
    if not text:
        return None
    return [(name, value.encode()) for name, value in json.loads(text)]

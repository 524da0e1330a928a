"""The single writer of the message log, with group commit.

Every change to the log (appending accepted and rejected records, deleting acknowledged ones,
counting attempts, moving records to the failed store) is an operation queued to one thread.
That thread takes every operation waiting in the queue, applies them in one transaction and
commits once, then hands the committed rows to the pump and resolves the callers' futures:
an HTTP request is answered only after the fsync'd commit that holds its records. Counts of
pending and failed records are kept here in memory (they change only here) and resynchronised
from the file when another process (``kappa collect failed redrive``) has changed it.
"""

from __future__ import annotations

import logging
import queue
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from jobs.collector.log import RECORD, REJECT, Entry, LogError, MessageLog, Row

logger = logging.getLogger(__name__)

MAX_OPS_PER_COMMIT = 500


@dataclass
class _Op:
    name: str
    payload: Any = None
    future: Future | None = None


@dataclass
class LogState:
    """What the writer knows about the log (read by other threads without locking)."""

    pending: int = 0
    pending_rejects: int = 0
    failed: int = 0
    max_id: int = 0
    totals: Counter[str] = field(default_factory=Counter)


class LogWriter:
    """Owns the write connection; everything else enqueues operations."""

    def __init__(self, log: MessageLog) -> None:
        self._log = log
        self.on_commit: Callable[[list[Row]], None] = lambda rows: None
        self._queue: queue.SimpleQueue[_Op | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="collector-log-writer", daemon=True)
        self.state = LogState()
        self.error: str | None = None
        self.resync()

    def start(self) -> None:
        """Start the writer thread."""
        self._thread.start()

    def stop(self) -> None:
        """Apply every queued operation, then stop the thread (the caller closes the log)."""
        self._queue.put(None)
        self._thread.join()

    def append(self, entries: Sequence[Entry], rejected_codes: Sequence[str] = ()) -> Future:
        """Log entries durably; the future resolves to their ids once committed."""
        future: Future = Future()
        self._queue.put(_Op("append", (list(entries), list(rejected_codes)), future))
        return future

    def acknowledge(self, record_ids: Sequence[int], reject_ids: Sequence[int]) -> None:
        """Delete records the broker acknowledged."""
        self._queue.put(_Op("ack", (list(record_ids), list(reject_ids))))

    def note_attempts(self, errors: Sequence[tuple[int, str]]) -> None:
        """Count a failed produce attempt per record (they will be retried)."""
        self._queue.put(_Op("attempt", list(errors)))

    def fail(self, errors: Sequence[tuple[int, str, str]]) -> None:
        """Move (id, kind, error) records that ran out of attempts to the failed store."""
        self._queue.put(_Op("fail", list(errors)))

    def barrier(self) -> Future:
        """A future that resolves once every operation queued before it is committed."""
        future: Future = Future()
        self._queue.put(_Op("barrier", None, future))
        return future

    def request_resync(self) -> None:
        """Recount pending and failed rows from the file (after another process changed it)."""
        self._queue.put(_Op("resync"))

    def resync(self) -> None:
        """Recount from the file (writer thread, or before it starts)."""
        counts = self._log.pending_counts()
        self.state.pending, self.state.pending_rejects = counts[RECORD], counts[REJECT]
        self.state.failed = counts["failed"]
        self.state.max_id = self._log.max_id()
        self.state.totals = Counter(self._log.counters())

    # ------------------------------------------------------------------ writer thread
    def _run(self) -> None:
        stopping = False
        while not stopping:
            ops: list[_Op] = []
            first = self._queue.get()
            while True:
                if first is None:
                    stopping = True
                else:
                    ops.append(first)
                if stopping or len(ops) >= MAX_OPS_PER_COMMIT:
                    break
                try:
                    first = self._queue.get_nowait()
                except queue.Empty:
                    break
            if ops:
                self._commit_group(ops)

    def _commit_group(self, ops: list[_Op]) -> None:
        try:
            results, delta = self._apply(ops)
        except Exception as exc:  # every failure must reach the waiting callers
            try:
                self._log.rollback()
            except sqlite3.Error:
                pass
            self.error = f"cannot write the collector log {self._log.path}: {exc}"
            logger.error("log write failed ops=%d error=%s", len(ops), exc)
            for op in ops:
                if op.future is not None and not op.future.done():
                    op.future.set_exception(LogError(f"{self.error}; the records were not accepted"))
            return
        self.error = None
        self._account(delta)
        appended = [row for op, rows in zip(ops, results, strict=True) if op.name == "append" for row in rows]
        if appended:
            self.on_commit(appended)
        for op, result in zip(ops, results, strict=True):
            if op.future is not None:
                op.future.set_result([row.id for row in result] if op.name == "append" else result)

    def _apply(self, ops: list[_Op]) -> tuple[list[Any], Counter[str]]:
        log, now = self._log, time.time()
        results: list[Any] = []
        delta: Counter[str] = Counter()
        log.begin()
        for op in ops:
            result: Any = None
            if op.name == "append":
                entries, codes = op.payload
                result = log.append(entries, now)
                rejects = sum(1 for e in entries if e.kind == REJECT)
                delta.update({"accepted": len(entries) - rejects, "rejected": rejects,
                              "+pending": len(entries) - rejects, "+pending_rejects": rejects})
                delta.update(f"rejected:{code}" for code in codes)
                delta["max_id"] = max(delta["max_id"], result[-1].id if result else 0)
            elif op.name == "ack":
                records, rejects = op.payload
                log.delete(records + rejects)
                delta.update({"acknowledged": len(records), "dlq_delivered": len(rejects),
                              "-pending": len(records), "-pending_rejects": len(rejects)})
            elif op.name == "attempt":
                log.note_attempt(op.payload)
                delta["retried"] += len(op.payload)
            elif op.name == "fail":
                self._apply_fail(op.payload, now, delta)
            elif op.name == "resync":
                delta["resync"] = 1
            results.append(result)
        log.add_counters({k: v for k, v in delta.items() if k[0] not in "+-" and k not in _LOCAL})
        log.commit()
        return results, delta

    def _apply_fail(self, errors: list[tuple[int, str, str]], now: float, delta: Counter[str]) -> None:
        self._log.move_to_failed([(rid, error) for rid, _, error in errors], now)
        records = sum(1 for _, kind, _ in errors if kind == RECORD)
        delta.update({"failed": len(errors), "-pending": records,
                      "-pending_rejects": len(errors) - records, "+failed_store": len(errors)})

    def _account(self, delta: Counter[str]) -> None:
        state = self.state
        if delta["resync"]:
            self.resync()
            return
        state.pending += delta["+pending"] - delta["-pending"]
        state.pending_rejects += delta["+pending_rejects"] - delta["-pending_rejects"]
        state.failed += delta["+failed_store"]
        state.max_id = max(state.max_id, delta["max_id"])
        state.totals.update({k: v for k, v in delta.items() if k[0] not in "+-" and k not in _LOCAL})


_LOCAL = ("max_id", "resync")

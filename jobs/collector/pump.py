"""The pump: reads the log in id order and produces each record, deleting it only on ack.

It is the only code that talks to the broker. Records are taken in id order behind a cursor
(ids are never reused), at most ``window`` of them in flight; a record is deleted from the log
only when its delivery report succeeds. The writer hands over the rows it has just committed,
so in steady state nothing is read back; when that hand-off has a gap (on start, after a fatal
error, when the pump fell behind, or after ``kappa collect failed redrive`` from another
process) the pump reads the log from its cursor. On start the cursor is 0, so records left
pending by a previous run are produced first. A fatal producer error (an idempotent producer's sequence
lost by a broker that crashed) rebuilds the producers and re-reads the whole log: records in
flight at that moment may be produced twice, never lost.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import KafkaException, Producer

from jobs.collector.log import MessageLog, Row
from jobs.collector.producer import Deliveries, new_producer, producer_config
from jobs.collector.writer import LogWriter

logger = logging.getLogger(__name__)

WINDOW = 50_000
READ_CHUNK = 2_000
HANDOFF_MAX = 20_000
IDLE_POLL_S = 0.02
ACK_INTERVAL_S = 0.05
ACK_BATCH = 5_000
HOUSEKEEPING_S = 1.0
FINAL_FLUSH_S = 2.5


class Pump:
    """Produce logged records to Kafka on a thread of its own."""

    def __init__(self, client_config: dict[str, str], log_path: Path, writer: LogWriter, *,
                 max_retries: int, window: int = WINDOW,
                 on_tick: Callable[[], None] = lambda: None) -> None:
        self._config = producer_config(client_config)
        self._isolated_config = producer_config(client_config, isolated=True)
        self._log_path = log_path
        self._writer = writer
        self._window = window
        self._on_tick = on_tick
        self.deliveries = Deliveries(max_retries)
        self.oldest_pending_age_s = 0.0
        self.recoveries = 0
        self.error: str | None = None
        self._cursor = 0
        self._handoff: deque[Row] = deque()
        self._stop_at: float | None = None
        self._thread = threading.Thread(target=self._run, name="collector-pump", daemon=True)
        self._producers = self._new_producers()
        self._last_handover = 0.0
        self._last_housekeeping = 0.0

    @property
    def broker_up(self) -> bool:
        """False while librdkafka reports every broker down."""
        return not self.deliveries.broker_down

    def start(self) -> None:
        """Start producing."""
        self._thread.start()

    def offer(self, rows: list[Row]) -> None:
        """Rows the writer just committed (writer thread); dropped when the pump is far behind."""
        if len(self._handoff) < HANDOFF_MAX:
            self._handoff.extend(rows)

    def stop(self, drain_timeout_s: float) -> None:
        """Keep producing until the log is empty or the timeout passes, then stop."""
        self._stop_at = time.monotonic() + drain_timeout_s
        self._thread.join()

    # ------------------------------------------------------------------ pump thread
    def _run(self) -> None:
        reader = MessageLog(self._log_path)
        try:
            while not self._finished():
                if self.deliveries.fatal is not None:
                    self._recover()
                busy = self._send_retries() | self._send_new(reader)
                self._poll(0 if busy else IDLE_POLL_S)
                self._hand_over(force=False)
                self._housekeeping(reader)
            self._final_flush()
        except Exception as exc:
            self.error = f"pump stopped: {type(exc).__name__}: {exc}"
            logger.exception("collector pump stopped by an unexpected error; records stay in the log")
        finally:
            reader.db.close()

    def _new_producers(self) -> tuple[Producer, Producer]:
        error_cb = self.deliveries.on_error
        return (new_producer({**self._config, "error_cb": error_cb}),
                new_producer({**self._isolated_config, "error_cb": error_cb}))

    def _finished(self) -> bool:
        if self._stop_at is None:
            return False
        state, deliveries = self._writer.state, self.deliveries
        drained = (deliveries.inflight == 0 and not deliveries.retries
                   and state.pending + state.pending_rejects == 0)
        return drained or deliveries.broker_down or time.monotonic() >= self._stop_at

    def _send_new(self, reader: MessageLog) -> bool:
        room = self._window - self.deliveries.inflight
        handoff, sent = self._handoff, 0
        while handoff and handoff[0].id <= self._cursor:
            handoff.popleft()
        while handoff and sent < room and handoff[0].id == self._cursor + 1:
            row = handoff.popleft()
            self._send(self._producers[0], row)
            self._cursor, sent = row.id, sent + 1
        known = self._writer.state.max_id
        if sent or room <= 0 or self._cursor >= known:
            return bool(sent)
        rows = reader.read_after(self._cursor, min(READ_CHUNK, room))
        self._cursor = rows[-1].id if rows else known
        for row in rows:
            self._send(self._producers[0], row)
        return bool(rows)

    def _send_retries(self) -> bool:
        due = self.deliveries.due_retries(time.monotonic())
        for row, isolated in due:
            self._send(self._producers[1 if isolated else 0], row)
        return bool(due)

    def _send(self, producer: Producer, row: Row) -> None:
        callback = self.deliveries.callback(row)
        while True:
            try:
                producer.produce(row.topic, row.value, row.key, headers=row.headers,  # type: ignore[arg-type]  # stubs: list is invariant
                                 on_delivery=callback)
            except BufferError:
                producer.poll(0.05)
                continue
            except KafkaException as exc:
                error = exc.args[0]
                if error.fatal():
                    self.deliveries.fatal = error
                self.deliveries.produce_failed(row, error.str())
                return
            self.deliveries.inflight += 1
            return

    def _poll(self, timeout_s: float) -> None:
        try:
            self._producers[0].poll(timeout_s)
            self._producers[1].poll(0)
        except KafkaException as exc:
            if exc.args[0].fatal():
                self.deliveries.fatal = exc.args[0]
            else:
                raise

    def _hand_over(self, force: bool) -> None:
        now = time.monotonic()
        deliveries = self.deliveries
        pending_acks = len(deliveries.acked_records) + len(deliveries.acked_rejects)
        if not force and pending_acks < ACK_BATCH and now - self._last_handover < ACK_INTERVAL_S:
            return
        self._last_handover = now
        records, rejects, attempts, failures = deliveries.take()
        if records or rejects:
            self._writer.acknowledge(records, rejects)
        if attempts:
            self._writer.note_attempts(attempts)
        if failures:
            logger.warning("moved %d record(s) to the failed store, last error: %s",
                           len(failures), failures[-1][2])
            self._writer.fail(failures)

    def _housekeeping(self, reader: MessageLog) -> None:
        now = time.monotonic()
        if now - self._last_housekeeping < HOUSEKEEPING_S:
            return
        self._last_housekeeping = now
        if reader.max_id() > self._writer.state.max_id:
            self._writer.request_resync()
        self.oldest_pending_age_s = reader.oldest_pending_age(time.time())
        if self.deliveries.broker_down and self.deliveries.inflight == 0:
            self._probe_broker()
        self._on_tick()

    def _probe_broker(self) -> None:
        try:
            self._producers[0].list_topics(timeout=0.5)
        except KafkaException:
            return
        self.deliveries.broker_down = False

    def _recover(self) -> None:
        fatal = self.deliveries.fatal
        logger.error("producer fatal error (%s): rebuilding the producers and re-reading the log; "
                     "records in flight may be produced twice", fatal.str() if fatal else "?")
        self._hand_over(force=True)
        self.deliveries.new_generation()
        self.deliveries.fatal = None
        for producer in self._producers:
            try:
                producer.purge()
                producer.poll(0)
            except KafkaException:
                pass
        self._producers = self._new_producers()
        self._writer.barrier().result()
        self._cursor = 0
        self._handoff.clear()
        self.recoveries += 1

    def _final_flush(self) -> None:
        for producer in self._producers:
            try:
                producer.flush(FINAL_FLUSH_S)
            except KafkaException as exc:
                logger.warning("final flush failed: %s", exc)
        self._hand_over(force=True)
        self._writer.barrier().result()
        left = self._writer.state.pending + self._writer.state.pending_rejects
        if left:
            logger.warning("stopped with %d record(s) in the log; they are produced on next start", left)

"""The collector: structural checks, the durable log, the pump, and its metrics.

Ingest paths (HTTP, stream pull) call :meth:`Collector.submit_lines` or
:meth:`Collector.submit`; the returned future resolves after the records are committed to the
log, never before. Rejected records are logged too, bound for the dead-letter topic with their
reason in headers, so nothing a client sent is dropped silently.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from jobs.collector import metrics
from jobs.collector.log import RECORD, REJECT, Entry, MessageLog
from jobs.collector.pump import Pump
from jobs.collector.writer import LogWriter
from jobs.config.load import CollectorConfig, KappaConfig
from jobs.errors import KappaError
from jobs.pipelines.structure import OVERSIZE, RecordCheck, StructureCheck, check_structure

logger = logging.getLogger(__name__)

DLQ_MAX_BYTES = 256 * 1024
DRAIN_TIMEOUT_S = 30.0
RETRY_AFTER_UP_S = 1
RETRY_AFTER_DOWN_S = 5


class CollectorBusyError(KappaError):
    """Another collector process holds the log file."""


@dataclass(frozen=True)
class HttpLimits:
    """What protects the HTTP endpoint: body cap, connection limit, timeouts, optional token."""

    max_body_bytes: int = 16 * 1024 * 1024
    max_connections: int = 256
    header_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    token: str | None = field(default=None, repr=False)
    token_env: str = "KAPPA_COLLECTOR_TOKEN"


@dataclass(frozen=True)
class Settings:
    """What one collector process needs (from config, with CLI overrides)."""

    topic: str
    dlq_topic: str
    log_path: Path
    buffer_limit: int
    max_record_bytes: int
    max_retries: int
    host: str
    port: int
    record_check: RecordCheck
    """The pipeline's checks of a parsed record, which give its Kafka key (``collect:`` in its
    pipeline.yaml, else :func:`jobs.pipelines.structure.keyed_object` of its ``source.key``)."""
    post_path: str = "/records"
    """The pipeline's own path for ``POST`` (``/records`` is always served too)."""
    drain_timeout_s: float = DRAIN_TIMEOUT_S
    http: HttpLimits = field(default_factory=HttpLimits)

    @classmethod
    def from_config(cls, cfg: KappaConfig, record_check: RecordCheck, *, topic: str | None = None,
                    dlq_topic: str | None = None, port: int | None = None,
                    drain_timeout_s: float | None = None) -> Settings:
        """Settings from ``cfg.collector`` and a pipeline's record check, with CLI overrides."""
        section = cfg.collector
        limits = HttpLimits(max_body_bytes=section.max_body_bytes, max_connections=section.max_connections,
                            header_timeout_s=section.header_timeout_s, body_timeout_s=section.body_timeout_s,
                            token=_token(section), token_env=_token_source(section))
        return cls(topic=topic or section.topic,
                   dlq_topic=dlq_topic or section.dlq_topic,
                   log_path=Path(section.log_path), buffer_limit=section.buffer_limit,
                   max_record_bytes=section.max_record_bytes, max_retries=section.max_retries,
                   host=section.host, port=section.port if port is None else port,
                   record_check=record_check, drain_timeout_s=drain_timeout_s or section.drain_timeout_s,
                   http=limits)


def _token(section: CollectorConfig) -> str | None:
    """The bearer token: the environment's, else the one read from the secret store at load."""
    stored = section.auth_token.get_secret_value() if section.auth_token is not None else None
    return os.environ.get(section.auth_token_env) or stored


def _token_source(section: CollectorConfig) -> str:
    """Where the token comes from, for messages (never the value)."""
    if os.environ.get(section.auth_token_env) or section.auth_token is None:
        return section.auth_token_env
    return f"secret {section.auth_token_secret_arn}"


@dataclass(frozen=True)
class Outcome:
    """The answer for one submitted record: its log id, or why it was rejected."""

    id: int
    error: str | None = None

    @property
    def status(self) -> int:
        """HTTP status of this record alone: 200, 413 (oversize) or 400."""
        if self.error is None:
            return 200
        return 413 if self.error.startswith(OVERSIZE) else 400

    def as_json(self) -> dict[str, object]:
        """The per-record result in HTTP responses."""
        if self.error is None:
            return {"id": self.id}
        return {"error": self.error, "status": self.status}


class Collector:
    """One running collector: owns the log file (exclusively), its writer and the pump."""

    def __init__(self, settings: Settings, client_config: dict[str, str]) -> None:
        self.settings = settings
        self._client_config = client_config
        self._lock_file = _lock(settings.log_path)
        self.log = MessageLog(settings.log_path)
        self.rates = metrics.RateMeter()
        self.writer = LogWriter(self.log)
        self.pump = Pump(client_config, settings.log_path, self.writer, max_retries=settings.max_retries,
                         on_tick=lambda: self.rates.sample(self.writer.state.totals))
        self.writer.on_commit = self.pump.offer
        self.stopping = False
        self.started_at = time.monotonic()

    def start(self) -> Collector:
        """Start the writer and the pump; records left in the log are produced first."""
        state = self.writer.state
        logger.info("collector starting log=%s pending=%d failed=%d topic=%s", self.settings.log_path,
                    state.pending + state.pending_rejects, state.failed, self.settings.topic)
        self.writer.start()
        self.pump.start()
        return self

    def stop(self, drain_timeout_s: float = DRAIN_TIMEOUT_S) -> None:
        """Stop accepting, drain the log to the broker (up to the timeout), close the log."""
        self.stopping = True
        self.pump.stop(drain_timeout_s)
        self.writer.stop()
        self.log.close()
        self._lock_file.close()
        logger.info("collector stopped pending=%d", self.pending)

    @property
    def pending(self) -> int:
        """Records in the log not yet acknowledged by the broker (accepted and rejected)."""
        return self.writer.state.pending + self.writer.state.pending_rejects

    def full(self) -> bool:
        """True when the buffer is full (new records get 503 / the pull waits)."""
        return self.pending >= self.settings.buffer_limit

    def retry_after_s(self) -> int:
        """Seconds a client should wait before retrying a 503."""
        return RETRY_AFTER_UP_S if self.pump.broker_up else RETRY_AFTER_DOWN_S

    def check(self, raw: bytes) -> StructureCheck:
        """Structural checks of one record (see :mod:`jobs.pipelines.structure`)."""
        return check_structure(raw, self.settings.max_record_bytes, self.settings.record_check)

    def submit_lines(self, raws: Sequence[bytes], source: str) -> Future:
        """Check and log raw records; the future resolves to one :class:`Outcome` each."""
        return self.submit([(raw, self.check(raw)) for raw in raws], source)

    def submit(self, checked: Sequence[tuple[bytes, StructureCheck]], source: str) -> Future:
        """Log already checked records (valid ones for the topic, the others for the DLQ)."""
        entries: list[Entry] = []
        codes: list[str] = []
        for raw, check in checked:
            if check.ok:
                entries.append(Entry(RECORD, self.settings.topic, check.key, raw))
            else:
                entries.append(self._reject_entry(raw, check.reason or "", source))
                codes.append(check.code or "unknown")
        result: Future = Future()
        errors = [check.reason for _, check in checked]

        def resolve(done: Future) -> None:
            if done.exception() is not None:
                result.set_exception(done.exception())
            else:
                result.set_result([Outcome(i, e) for i, e in zip(done.result(), errors, strict=True)])

        self.writer.append(entries, codes).add_done_callback(resolve)
        return result

    def snapshot(self) -> metrics.Snapshot:
        """Counters, gauges and rates right now."""
        state = self.writer.state
        totals = dict(state.totals)
        reasons = {k.split(":", 1)[1]: v for k, v in totals.items() if k.startswith("rejected:")}
        gauges = {"pending": state.pending, "pending_rejects": state.pending_rejects,
                  "failed_store": state.failed, "buffer_limit": self.settings.buffer_limit,
                  "inflight": self.pump.deliveries.inflight, "broker_up": int(self.pump.broker_up),
                  "oldest_pending_age_seconds": round(self.pump.oldest_pending_age_s, 1)}
        return metrics.Snapshot(totals, reasons, gauges, self.rates.rates())

    def wait_drained(self, timeout_s: float) -> bool:
        """Wait until nothing is pending; False on timeout."""
        deadline = time.monotonic() + timeout_s
        while self.pending and time.monotonic() < deadline:
            time.sleep(0.05)
        return not self.pending

    def _reject_entry(self, raw: bytes, reason: str, source: str) -> Entry:
        return reject_entry(self.settings.dlq_topic, raw, reason, source)


def reject_entry(dlq_topic: str, raw: bytes, reason: str, source: str) -> Entry:
    """The dead-letter entry of a rejected record: its bytes (cut to ``DLQ_MAX_BYTES``) and headers."""
    headers = [("kappa.reason", reason.encode()), ("kappa.source", source.encode())]
    if len(raw) > DLQ_MAX_BYTES:
        headers.append(("kappa.original_bytes", str(len(raw)).encode()))
        raw = raw[:DLQ_MAX_BYTES]
    return Entry(REJECT, dlq_topic, None, raw, tuple(headers))


def _lock(log_path: Path):
    """Hold an exclusive lock beside the log so two collectors never share one log."""
    lock_path = Path(f"{log_path}.lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    handle = lock_path.open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        owner = handle.read().strip() or "unknown"
        handle.close()
        raise CollectorBusyError(
            f"another collector (pid {owner}) is using the log {log_path}; stop it "
            "(`kill -TERM <pid>`), or give this one its own log with KAPPA_COLLECTOR__LOG_PATH") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle

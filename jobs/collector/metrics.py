"""Collector metrics: one snapshot type, Prometheus text out, and the same text parsed back.

Counters are the log's running totals (they survive restarts); gauges describe now; rates
are records per second over the last ``RATE_WINDOW_S`` seconds of this process.
"""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

PREFIX = "kappa_collector_"
RATE_WINDOW_S = 10.0
RATED = ("accepted", "acknowledged", "rejected", "failed")
_COUNTERS = {
    "accepted": "Records accepted: valid and durably logged.",
    "acknowledged": "Records the broker acknowledged (delivered) and the log removed.",
    "rejected": "Malformed records rejected (kept in the dead-letter topic with a reason).",
    "dlq_delivered": "Rejected records delivered to the dead-letter topic.",
    "failed": "Records moved to the failed store after max_retries delivery attempts.",
    "retried": "Failed delivery attempts that were retried.",
    "redriven": "Records moved from the failed store back to the log.",
}
_GAUGES = {
    "pending": "Accepted records in the log, not yet acknowledged by the broker.",
    "pending_rejects": "Rejected records in the log, not yet in the dead-letter topic.",
    "failed_store": "Records in the failed store (`kappa collect failed list`).",
    "buffer_limit": "Pending records at which the collector answers 503.",
    "inflight": "Records handed to the producer and awaiting a delivery report.",
    "broker_up": "1 while the producer reaches a broker, else 0.",
    "oldest_pending_age_seconds": "Age of the oldest record in the log.",
}
_LINE = re.compile(r'^([a-z_]+)(?:\{([a-z_]+)="([^"]*)"\})?\s+(\S+)$')


@dataclass
class Snapshot:
    """Everything the collector reports."""

    totals: dict[str, int]
    rejected_by_reason: dict[str, int]
    gauges: dict[str, float]
    rates: dict[str, float] = field(default_factory=dict)

    def value(self, name: str) -> float:
        """A counter, gauge or ``rate:<name>`` by name (0 when unknown)."""
        if name.startswith("rate:"):
            return self.rates.get(name[5:], 0.0)
        return self.totals.get(name, self.gauges.get(name, 0))


class RateMeter:
    """Records per second of chosen counters over a sliding window."""

    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        self.window_s = window_s
        self._samples: deque[tuple[float, dict[str, int]]] = deque()
        self._lock = threading.Lock()

    def sample(self, totals: Mapping[str, int], now: float | None = None) -> None:
        """Remember the totals at ``now`` (monotonic seconds)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            self._samples.append((now, {name: totals.get(name, 0) for name in RATED}))
            while len(self._samples) > 2 and now - self._samples[1][0] >= self.window_s:
                self._samples.popleft()

    def rates(self) -> dict[str, float]:
        """Per-second rates between the oldest and newest sample (0 with fewer than two)."""
        with self._lock:
            if len(self._samples) < 2:
                return dict.fromkeys(RATED, 0.0)
            (t0, first), (t1, last) = self._samples[0], self._samples[-1]
        elapsed = max(t1 - t0, 1e-9)
        return {name: round((last[name] - first[name]) / elapsed, 1) for name in RATED}


def render(snapshot: Snapshot) -> str:
    """Prometheus text exposition format (version 0.0.4)."""
    lines: list[str] = []
    for name, help_text in _COUNTERS.items():
        lines += [f"# HELP {PREFIX}{name}_total {help_text}", f"# TYPE {PREFIX}{name}_total counter",
                  f"{PREFIX}{name}_total {snapshot.totals.get(name, 0)}"]
    lines += [f"# HELP {PREFIX}rejected_by_reason_total Rejected records by reason code.",
              f"# TYPE {PREFIX}rejected_by_reason_total counter"]
    lines += [f'{PREFIX}rejected_by_reason_total{{reason="{reason}"}} {count}'
              for reason, count in sorted(snapshot.rejected_by_reason.items())]
    for name, help_text in _GAUGES.items():
        value = snapshot.gauges.get(name, 0)
        lines += [f"# HELP {PREFIX}{name} {help_text}", f"# TYPE {PREFIX}{name} gauge",
                  f"{PREFIX}{name} {_number(value)}"]
    lines += [f"# HELP {PREFIX}rate Records per second over the last {RATE_WINDOW_S:g} s.",
              f"# TYPE {PREFIX}rate gauge"]
    lines += [f'{PREFIX}rate{{kind="{kind}"}} {rate}' for kind, rate in sorted(snapshot.rates.items())]
    return "\n".join(lines) + "\n"


def parse(text: str) -> Snapshot:
    """Read back what :func:`render` wrote (``kappa collect status``)."""
    totals: dict[str, int] = {}
    reasons: dict[str, int] = {}
    gauges: dict[str, float] = {}
    rates: dict[str, float] = {}
    for line in text.splitlines():
        match = _LINE.match(line.strip())
        if not match or not match.group(1).startswith(PREFIX):
            continue
        name, label, label_value, raw = match.groups()
        name = name[len(PREFIX):]
        if name == "rejected_by_reason_total" and label_value is not None:
            reasons[label_value] = int(float(raw))
        elif name == "rate" and label_value is not None:
            rates[label_value] = float(raw)
        elif name.endswith("_total") and label is None:
            totals[name[: -len("_total")]] = int(float(raw))
        elif label is None:
            gauges[name] = float(raw)
    return Snapshot(totals, reasons, gauges, rates)


def from_log(counters: Mapping[str, int], pending: Mapping[str, int], buffer_limit: int,
             oldest_age_s: float) -> Snapshot:
    """A snapshot built from the log file alone (collector not running)."""
    totals = {name: counters.get(name, 0) for name in _COUNTERS}
    reasons = {name.split(":", 1)[1]: value for name, value in counters.items()
               if name.startswith("rejected:")}
    gauges = {"pending": pending.get("record", 0), "pending_rejects": pending.get("reject", 0),
              "failed_store": pending.get("failed", 0), "buffer_limit": buffer_limit,
              "oldest_pending_age_seconds": round(oldest_age_s, 1)}
    return Snapshot(totals, reasons, gauges)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.3f}"

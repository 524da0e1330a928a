"""Collector metrics: one snapshot type, Prometheus text out, and the same text parsed back.

Counters are the log's running totals (they survive restarts); gauges describe now; rates
are records per second over the last ``RATE_WINDOW_S`` seconds of this process. The text is
written and read by ``prometheus-client``, the platform's one convention for ``/metrics``: a
custom collector turns a :class:`Snapshot` into metric families at scrape time, since the
values live in the log and the writer, not in client-side counters.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

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
CONTENT_TYPE = CONTENT_TYPE_LATEST


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


class SnapshotCollector:
    """A prometheus-client collector that reports a fresh :class:`Snapshot` at every scrape."""

    def __init__(self, source: Callable[[], Snapshot]) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        """The metric families of one snapshot."""
        snapshot = self._source()
        for name, help_text in _COUNTERS.items():
            yield CounterMetricFamily(f"{PREFIX}{name}", help_text, value=snapshot.totals.get(name, 0))
        by_reason = CounterMetricFamily(f"{PREFIX}rejected_by_reason", "Rejected records by reason code.",
                                        labels=["reason"])
        for reason, count in sorted(snapshot.rejected_by_reason.items()):
            by_reason.add_metric([reason], count)
        yield by_reason
        for name, help_text in _GAUGES.items():
            yield GaugeMetricFamily(f"{PREFIX}{name}", help_text, value=snapshot.gauges.get(name, 0))
        rate = GaugeMetricFamily(f"{PREFIX}rate", f"Records per second over the last {RATE_WINDOW_S:g} s.",
                                 labels=["kind"])
        for kind, value in sorted(snapshot.rates.items()):
            rate.add_metric([kind], value)
        yield rate


def registry(source: Callable[[], Snapshot]) -> CollectorRegistry:
    """A registry holding only the collector's metrics (not the process defaults)."""
    holder = CollectorRegistry(auto_describe=False)
    holder.register(SnapshotCollector(source))
    return holder


def render(snapshot: Snapshot) -> str:
    """Prometheus text exposition format, as prometheus-client writes it."""
    return generate_latest(registry(lambda: snapshot)).decode()


def parse(text: str) -> Snapshot:
    """Read back what :func:`render` wrote (``kappa collect status``), with prometheus-client's parser."""
    totals: dict[str, int] = {}
    reasons: dict[str, int] = {}
    gauges: dict[str, float] = {}
    rates: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith(PREFIX):
            continue
        name = family.name[len(PREFIX):]
        for sample in family.samples:
            if name == "rejected_by_reason" and "reason" in sample.labels:
                reasons[sample.labels["reason"]] = int(sample.value)
            elif name == "rate" and "kind" in sample.labels:
                rates[sample.labels["kind"]] = sample.value
            elif family.type == "counter" and sample.name.endswith("_total") and not sample.labels:
                totals[name] = int(sample.value)
            elif family.type == "gauge" and not sample.labels:
                gauges[name] = sample.value
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

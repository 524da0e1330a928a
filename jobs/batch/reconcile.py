"""``kappa batch reconcile``: the lake checks the live views (Redis and ``gold.rsvp_summaries``).

The lake's recomputation (jobs/batch/views.py, from one pinned snapshot of bronze, silver and
ops.dlq) is compared key by key with what Redis holds now and with the mirror of the summaries
in the lake. Exact summaries (city windows, event responses, all-time topics) allow no
difference; HyperLogLog member counts allow three standard errors (Redis: 0.81 %). Every
difference goes to ``ops.reconciliation``, the run's counts to ``platform.metrics``, and a
difference beyond its bound raises :class:`ViewsDrift`. Runbook: docs/runbooks/views-drift.md.
"""

from __future__ import annotations

import json
import logging
import math
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any

from jobs.common.errors import KappaError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from jobs.common.config import KappaConfig

logger = logging.getLogger(__name__)

RECONCILIATION_TABLE = "ops.reconciliation"
HLL_STANDARD_ERROR = 0.0081
HLL_BOUND_ERRORS = 3
EXACT, APPROXIMATE = ("city_window", "event", "topic"), ("members_window",)
RSVP_COLUMNS = "rsvp_id long, event_id string, member_id long, topics array<string>, city string"
DELIVERED_COLUMNS = ("rsvp_id long, mtime long, value string, kafka_topic string, kafka_partition int, "
                     "kafka_offset long")
WINDOWED = ("city_window", "members_window")

Views = dict[str, dict[str, Any]]   # kind -> key -> value


class ViewsDrift(KappaError):
    """A live view differs from the lake's recomputation beyond its bound."""

    exit_code = 6


@dataclass(frozen=True)
class Difference:
    """One key whose live value is not the lake's (a row of ``ops.reconciliation``)."""

    view: str
    kind: str
    key: str
    live_value: str | None
    lake_value: str | None
    allowed_error: float
    verdict: str


@dataclass
class ReconcileReport:
    """What one reconciliation compared and found."""

    run_id: str
    dates: list[str] | None
    checked: dict[str, int] = field(default_factory=dict)
    differences: list[Difference] = field(default_factory=list)
    source_versions: dict[str, int | None] = field(default_factory=dict)
    expired: int = 0
    """Lake windows absent from Redis that started over ``streaming.window_ttl_s`` ago: their
    Redis keys expired as designed, so they are not compared."""

    @property
    def drifts(self) -> list[Difference]:
        """The differences beyond their bound."""
        return [item for item in self.differences if item.verdict == "drift"]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        return {"run_id": self.run_id, "dates": self.dates, "checked": self.checked,
                "differences": [asdict(item) for item in self.differences], "drifts": len(self.drifts),
                "source_versions": self.source_versions, "expired_windows_not_compared": self.expired}


def compare(view: str, live: Views, lake: Views) -> list[Difference]:
    """Every key of either side whose values differ, judged against its kind's bound."""
    found = []
    for kind in (*EXACT, *APPROXIMATE):
        mine, theirs = lake.get(kind, {}), live.get(kind, {})
        for key in sorted(mine.keys() | theirs.keys()):
            lake_value, live_value = mine.get(key), theirs.get(key)
            if lake_value == live_value:
                continue
            allowed = 0.0
            if kind in APPROXIMATE and isinstance(lake_value, int):
                allowed = float(math.ceil(HLL_BOUND_ERRORS * HLL_STANDARD_ERROR * lake_value))
            within = (live_value is not None and lake_value is not None and allowed > 0
                      and abs(live_value - lake_value) <= allowed)
            found.append(Difference(view, kind, key, _text(live_value), _text(lake_value), allowed,
                                    "within_bound" if within else "drift"))
    return found


def _text(value: Any) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True)


def reconcile(spark: SparkSession, cfg: KappaConfig, dates: list[date] | None = None,
              progress: Callable[[str], None] = lambda line: None) -> ReconcileReport:
    """Compare the live views with the lake; record the differences; raise on drift.

    ``dates`` limits the windowed views to windows starting on those dates (event dates) and
    skips the all-time views (they need the whole lake); None compares everything.
    """
    from jobs.batch.live import gold_views, redis_views

    report = ReconcileReport(uuid.uuid4().hex[:12], None if dates is None else [d.isoformat() for d in dates])
    lake = lake_views(spark, cfg, dates, report, progress)
    span = _span(dates)
    live_views = {"redis": redis_views(cfg, lake, span), "gold.rsvp_summaries": gold_views(cfg, span)}
    for view, found in live_views.items():
        if found is None:
            progress(f"reconcile: {view} does not exist yet: not compared")
            continue
        live = {kind: values for kind, values in found.items() if dates is None or kind in WINDOWED}
        mine = lake if view != "redis" else _unexpired(lake, live, cfg.streaming.window_ttl_s, report)
        report.checked[view] = sum(len(values.keys() | mine.get(kind, {}).keys())
                                   for kind, values in live.items())
        report.differences += compare(view, live, {kind: mine[kind] for kind in live if kind in mine})
        progress(f"reconcile: {view}: {report.checked[view]} keys, "
                 f"{sum(item.view == view for item in report.differences)} differences")
    _record(cfg, report)
    if report.drifts:
        keys = ", ".join(f"{item.view}:{item.key}" for item in report.drifts[:10])
        raise ViewsDrift(f"{len(report.drifts)} live view key(s) differ from the lake beyond their bound "
                         f"({keys}); run {report.run_id} wrote them to {RECONCILIATION_TABLE}: see "
                         "docs/runbooks/views-drift.md")
    return report


def _unexpired(lake: Views, live: Views, ttl_s: int, report: ReconcileReport) -> Views:
    """The lake's views without the windows Redis let expire.

    A window key expires ``ttl_s`` after its last write, which is never before the window's
    start: a lake window absent from Redis that started over ``ttl_s`` ago is left out; one still
    in Redis is compared whatever its age.
    """
    oldest = int(time.time() * 1000) - ttl_s * 1000
    out = dict(lake)
    for kind in WINDOWED:
        have = live.get(kind, {})
        out[kind] = {key: value for key, value in lake.get(kind, {}).items()
                     if key in have or int(key.split("/")[1]) >= oldest}
        report.expired += len(lake.get(kind, {})) - len(out[kind])
    return out


def _span(dates: list[date] | None) -> tuple[int, int] | None:
    if not dates:
        return None
    first = datetime.combine(min(dates), datetime.min.time(), UTC)
    last = datetime.combine(max(dates), datetime.min.time(), UTC)
    return int(first.timestamp() * 1000), int(last.timestamp() * 1000) + 86_400_000


def lake_views(spark: SparkSession, cfg: KappaConfig, dates: list[date] | None, report: ReconcileReport,
               progress: Callable[[str], None]) -> Views:
    """The views recomputed from one snapshot of bronze, silver and ops.dlq.

    Every partition of each is read, also for ``dates``: a delivery's ``late`` flag depends on
    every delivery before it in its Kafka partition, and its RSVP's silver row may lie on
    another date (a later version); ``dates`` only narrow the windows compared.
    """
    from jobs.batch import views
    from jobs.batch.jobs import BRONZE, DLQ, DLQ_POSITIONS, SILVER, Source
    from jobs.batch.lake import read_source, snapshot_at
    from jobs.common.delta import table_uri

    frames = {}
    for source in (Source(SILVER, RSVP_COLUMNS, None), Source(BRONZE, DELIVERED_COLUMNS, None),
                   Source(DLQ, DLQ_POSITIONS, None)):
        uri = table_uri(cfg.lake.root, source.table)
        snapshot = snapshot_at(uri, None)
        report.source_versions[source.table] = None if snapshot is None else snapshot.version()
        frames[source.table], count = read_source(spark, uri, snapshot, source, [])
        progress(f"reconcile: {source.table} at version {report.source_versions[source.table]}: {count} rows")
    streaming = cfg.streaming
    rows = views.deliveries(frames[BRONZE], frames[DLQ], frames[SILVER], streaming.watermark_s * 1000).cache()
    try:
        lake: Views = {
            "city_window": {f"city_window/{r.window_start_ms}/{r.city}": r["count"] for r in
                            views.city_windows(rows, streaming.city_window_s * 1000).collect()},
            "members_window": {f"members_window/{r.window_start_ms}": r.members for r in
                               views.member_windows(rows, streaming.members_window_s * 1000).collect()},
            "event": {f"event/{r.event_id}": [r.yes, r.no, r.guests] for r in
                      views.event_responses(rows).collect()},
            "topic": {f"topic/{r.topic}": r["count"] for r in views.topic_totals(rows).collect()},
        }
    finally:
        rows.unpersist()
    span = _span(dates)
    if span is not None:
        for kind in WINDOWED:
            lake[kind] = {key: value for key, value in lake[kind].items()
                          if span[0] <= int(key.split("/")[1]) < span[1]}
    return lake


def _record(cfg: KappaConfig, report: ReconcileReport) -> None:
    """Append the differences to ops.reconciliation and publish the run's metric."""
    import pyarrow as pa

    from jobs.common.delta import open_delta, table_uri, write_delta

    now = datetime.now(UTC)
    if report.differences:
        rows = [{"run_id": report.run_id, "checked_at": now, **asdict(item)} for item in report.differences]
        uri = table_uri(cfg.lake.root, RECONCILIATION_TABLE)
        write_delta(uri, pa.Table.from_pylist(rows), snapshot=open_delta(uri), exclusive_create=False)
    metric = {"schema_version": 1, "kind": "reconciliation", "run_id": report.run_id, "dates": report.dates,
              "checked": report.checked, "differences": len(report.differences), "drifts": len(report.drifts),
              "source_versions": report.source_versions, "emitted_ms": int(time.time() * 1000)}
    _publish(cfg, metric)


def _publish(cfg: KappaConfig, metric: Mapping[str, Any]) -> None:
    from confluent_kafka import Producer

    producer = Producer(cfg.kafka.client_config())
    producer.produce(cfg.streaming.metrics_topic, json.dumps(metric).encode(), key=b"reconcile")
    if producer.flush(10):
        raise KappaError(f"the reconciliation metric was not delivered to {cfg.streaming.metrics_topic} "
                         "within 10 s; the differences are in ops.reconciliation (see kappa stack status)")

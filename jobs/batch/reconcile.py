"""``kappa batch reconcile``: the lake checks the live views (Redis and ``gold.rsvp_summaries``).

The lake's recomputation (jobs/batch/lake_views.py, from one pinned snapshot of bronze, silver
and ops.dlq) is compared key by key with what Redis holds now and with the mirror of the
summaries in the lake. Exact summaries (city windows, per-minute topic buckets, trending
windows, event responses, all-time topics, totals) allow no difference; HyperLogLog member
counts allow three standard errors (Redis: 0.81 %). The top-N lists of gold.rsvp_summaries are
compared as lists (:func:`top_expected`). What is not compared, and why, is in the report
(:data:`NOT_COMPARED`). Every difference goes to ``ops.reconciliation``, the run's counts to
``platform.metrics``, and a difference beyond its bound raises :class:`ViewsDrift`, which
carries the whole report. Runbook: docs/runbooks/views-drift.md.
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

from jobs.batch.lake_views import ALL_TIME, WINDOWED, Views, lake_views, span
from jobs.common.errors import KappaError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from jobs.common.config import KappaConfig

logger = logging.getLogger(__name__)

RECONCILIATION_TABLE = "ops.reconciliation"
HLL_STANDARD_ERROR = 0.0081
HLL_BOUND_ERRORS = 3
EXACT = ("city_window", "topic_minute", "trending", "event", "topic", "totals")
APPROXIMATE = ("members_window", "members_all")
TOP_LISTS = ("trending", "topic")
"""Kinds gold.rsvp_summaries holds as top-N lists (``trending/<start>``, ``top_topics``)."""
NOT_COMPARED = (
    {"what": "event name (Redis event hash field event_name, gold event rows)",
     "why": "the name the last batch that counted the event carried: it depends on where the "
            "micro-batches were cut, so it is no function of the log the lake could recompute"},
    {"what": "window keys absent from Redis that started over streaming.window_ttl_s ago",
     "why": "their Redis keys expired as designed (counted in expired_windows_not_compared)"},
    {"what": "fence (<prefix>:fence:summaries), metrics and status hashes, window indexes (*:windows)",
     "why": "the streaming job's bookkeeping (what it applied, its last batches, which windows exist), "
            "not views of the log"},
    {"what": "per-minute topic buckets, totals and all-time distinct members in gold.rsvp_summaries",
     "why": "rsvps.summaries does not carry them; they are compared in Redis"},
)
RANGED_NOT_COMPARED = {
    "what": f"all-time views ({', '.join(ALL_TIME)}) and gold's top_topics",
    "why": "--from/--to compares the windows that start on those dates; the all-time views need "
           "the whole log: run without --from/--to"}


class ViewsDrift(KappaError):
    """A live view differs from the lake's recomputation beyond its bound; ``report`` says where."""

    exit_code = 6

    def __init__(self, message: str, report: ReconcileReport) -> None:
        super().__init__(message)
        self.report = report


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
    compared: dict[str, list[str]] = field(default_factory=dict)
    not_compared: list[dict[str, str]] = field(default_factory=list)

    @property
    def drifts(self) -> list[Difference]:
        """The differences beyond their bound."""
        return [item for item in self.differences if item.verdict == "drift"]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        return {"run_id": self.run_id, "dates": self.dates, "checked": self.checked,
                "differences": [asdict(item) for item in self.differences], "drifts": len(self.drifts),
                "source_versions": self.source_versions, "expired_windows_not_compared": self.expired,
                "compared": self.compared, "not_compared": self.not_compared}


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


def top_expected(kind: str, listed: Mapping[str, int], lake: Mapping[str, int], top_n: int) -> dict[str, int]:
    """The lake's values a top-N list must show: its listed items, and every item ranked in it for sure.

    ``kind`` ``trending`` has one list per window (keys ``trending/<start>/<topic>``), ``topic``
    one list (``topic/<name>``). Per list, an item is in every top ``top_n`` when its count beats
    the lake's ``top_n + 1``-th largest (all items when there are no more than ``top_n``); ties at
    the edge may go either way, so only the items listed are compared there.
    """
    def group(key: str) -> str:
        return "/".join(key.split("/", 2)[:2]) if kind == "trending" else kind

    groups: dict[str, dict[str, int]] = {}
    for key, value in lake.items():
        groups.setdefault(group(key), {})[key] = value
    expected = {key: lake[key] for key in listed if key in lake}
    for items in groups.values():
        counts = sorted(items.values(), reverse=True)
        edge = counts[top_n] if len(counts) > top_n else None
        expected |= {key: value for key, value in items.items() if edge is None or value > edge}
    return expected


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
    report.not_compared = [*NOT_COMPARED, *([] if dates is None else [RANGED_NOT_COMPARED])]
    lake = lake_views(spark, cfg, dates, report, progress)
    within = span(dates)
    live_views = {"redis": redis_views(cfg, lake, within), "gold.rsvp_summaries": gold_views(cfg, within)}
    for view, found in live_views.items():
        if found is None:
            progress(f"reconcile: {view} does not exist yet: not compared")
            report.not_compared.append({"what": view,
                                        "why": "the table does not exist yet (nothing loaded it)"})
            continue
        live = {kind: values for kind, values in found.items() if dates is None or kind in WINDOWED}
        mine = lake if view != "redis" else _unexpired(lake, live, cfg.streaming.window_ttl_s, report)
        mine = {kind: mine[kind] for kind in live if kind in mine}
        if view != "redis":
            mine |= {kind: top_expected(kind, live[kind], mine[kind], cfg.streaming.top_n)
                     for kind in TOP_LISTS if kind in live}
        report.compared[view] = sorted(live)
        report.checked[view] = sum(len(values.keys() | mine.get(kind, {}).keys())
                                   for kind, values in live.items())
        report.differences += compare(view, live, mine)
        progress(f"reconcile: {view}: {report.checked[view]} keys, "
                 f"{sum(item.view == view for item in report.differences)} differences")
    _record(cfg, report)
    if report.drifts:
        keys = ", ".join(f"{item.view}:{item.key}" for item in report.drifts[:10])
        raise ViewsDrift(f"{len(report.drifts)} live view key(s) differ from the lake beyond their bound "
                         f"({keys}); run {report.run_id} wrote them to {RECONCILIATION_TABLE}: see "
                         "docs/runbooks/views-drift.md", report)
    return report


def _unexpired(lake: Views, live: Views, ttl_s: int, report: ReconcileReport) -> Views:
    """The lake's views without the windows Redis let expire.

    A window key expires ``ttl_s`` after its last write, which is never before the window's
    start: a lake window absent from Redis that started over ``ttl_s`` ago is left out; one still
    in Redis is compared whatever its age.
    """
    oldest = int(time.time() * 1000) - ttl_s * 1000
    out = dict(lake)
    for kind in (kind for kind in WINDOWED if kind in lake):
        have = live.get(kind, {})
        out[kind] = {key: value for key, value in lake.get(kind, {}).items()
                     if key in have or int(key.split("/")[1]) >= oldest}
        report.expired += len(lake.get(kind, {})) - len(out[kind])
    return out


def _record(cfg: KappaConfig, report: ReconcileReport) -> None:
    """Append the differences to ops.reconciliation and publish the run's metric."""
    import pyarrow as pa

    from jobs.common.delta import open_delta, table_uri, write_delta
    from jobs.common.lake_storage import storage_options

    now = datetime.now(UTC)
    if report.differences:
        rows = [{"run_id": report.run_id, "checked_at": now, **asdict(item)} for item in report.differences]
        uri = table_uri(cfg.lake.root, RECONCILIATION_TABLE)
        storage = storage_options(cfg.lake)
        write_delta(uri, pa.Table.from_pylist(rows), snapshot=open_delta(uri, storage),
                    exclusive_create=False, storage=storage)
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

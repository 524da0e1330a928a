"""``kappa batch reconcile``: the lake checks a pipeline's live views, in its own key scheme.

A pipeline whose views the engine's ``reconcile:`` cannot compare (jobs/engine/lake/reconcile.py:
views of the engine's kinds under the engine's keys) registers a :class:`ViewsCheck` builder
(``@pipeline.reconciler``): its views as the lake recomputes them from one pinned snapshot, the
places the live views are read from (:class:`LiveSide`: a store such as Redis, a table mirroring
them), and each kind's bound. Both sides are ``Views``: kind -> key -> value. They are compared
key by key: exact kinds allow no difference, approximate ones (HyperLogLog) a relative error;
the top-N lists of a side are compared as lists (:func:`top_expected`). What is not compared, and
why, is in the report. Every difference goes to ``ops.reconciliation``, the run's counts to
``platform.metrics``, and a difference beyond its bound raises :class:`ViewsDrift`, which
carries the whole report (jobs/batch/report.py). Runbook: docs/runbooks/views-drift.md.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any

from jobs.batch.report import RECONCILIATION_TABLE, Difference, ReconcileReport, ViewsDrift, record, text
from jobs.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from jobs.config.load import KappaConfig

logger = logging.getLogger(__name__)

Views = dict[str, dict[str, Any]]   # kind -> key -> value
Progress = Callable[[str], None]
HLL_STANDARD_ERROR = 0.0081
HLL_BOUND_ERRORS = 3
HLL_BOUND = HLL_BOUND_ERRORS * HLL_STANDARD_ERROR
"""The relative error a Redis HyperLogLog count may show: three standard errors (0.81 %)."""
DAY_MS = 86_400_000


@dataclass(frozen=True)
class LiveSide:
    """One place a pipeline's live views are read from.

    Attributes:
        read: ``(lake views, span)`` -> the views it holds, None when it does not exist yet. The
            lake's keys name what must be found; ``span`` (:func:`span`) limits the windows.
        expires_s: windows absent from it that started over this long ago expired as designed
            (a Redis TTL) and are not compared; None: nothing expires.
        top_n: the length of the top-N lists it holds (kinds in :attr:`ViewsCheck.top_lists`).
    """

    read: Callable[[Views, tuple[int, int] | None], Views | None]
    expires_s: int | None = None
    top_n: int | None = None


@dataclass(frozen=True)
class ViewsCheck:
    """What a pipeline's own reconcile compares (built by its ``@pipeline.reconciler``).

    Attributes:
        lake: ``(report, progress)`` -> the views recomputed from one snapshot of the lake (it
            records the versions read in ``report.source_versions``).
        live: name -> where live views are read (``redis``, a table name).
        bounds: kind -> the relative error allowed (0: exact), in the order compared.
        windowed: kinds keyed ``<kind>/<window start ms>/...``: ``--from/--to`` compares these only.
        top_lists: kinds a side with ``top_n`` holds as top-N lists, one per window when windowed.
        not_compared: what is not compared, and why (``what``, ``why``).
        ranged_not_compared: what a run with ``--from/--to`` leaves out besides.
    """

    lake: Callable[[ReconcileReport, Progress], Views]
    live: Mapping[str, LiveSide]
    bounds: Mapping[str, float]
    windowed: tuple[str, ...]
    top_lists: tuple[str, ...] = ()
    not_compared: tuple[dict[str, str], ...] = ()
    ranged_not_compared: dict[str, str] = field(default_factory=dict)


def compare(view: str, live: Views, lake: Views, bounds: Mapping[str, float]) -> list[Difference]:
    """Every key of either side whose values differ, judged against its kind's bound.

    ``bounds``: kind -> relative error allowed (0: exact); the kinds compared, in order.
    """
    found = []
    for kind, bound in bounds.items():
        mine, theirs = lake.get(kind, {}), live.get(kind, {})
        for key in sorted(mine.keys() | theirs.keys()):
            lake_value, live_value = mine.get(key), theirs.get(key)
            if lake_value == live_value:
                continue
            allowed = 0.0
            if bound > 0 and isinstance(lake_value, int):
                allowed = float(math.ceil(bound * lake_value))
            within = (live_value is not None and lake_value is not None and allowed > 0
                      and abs(live_value - lake_value) <= allowed)
            found.append(Difference(view, kind, key, text(live_value), text(lake_value), allowed,
                                    "within_bound" if within else "drift"))
    return found


def top_expected(listed: Mapping[str, int], lake: Mapping[str, int], top_n: int, *,
                 windowed: bool) -> dict[str, int]:
    """The lake's values a top-N list must show: its listed items, and every item ranked in it for sure.

    A ``windowed`` kind has one list per window (keys ``<kind>/<start>/<item>``), another one list
    (``<kind>/<item>``). Per list, an item is in every top ``top_n`` when its count beats the lake's
    ``top_n + 1``-th largest (all items when there are no more than ``top_n``); ties at the edge
    may go either way, so only the items listed are compared there.
    """
    def group(key: str) -> str:
        return "/".join(key.split("/", 2)[:2]) if windowed else ""

    groups: dict[str, dict[str, int]] = {}
    for key, value in lake.items():
        groups.setdefault(group(key), {})[key] = value
    expected = {key: lake[key] for key in listed if key in lake}
    for items in groups.values():
        counts = sorted(items.values(), reverse=True)
        edge = counts[top_n] if len(counts) > top_n else None
        expected |= {key: value for key, value in items.items() if edge is None or value > edge}
    return expected


def span(dates: list[date] | None) -> tuple[int, int] | None:
    """The event-time range ``[first midnight, last midnight + 1 day)`` of ``dates`` in ms (None: all)."""
    if not dates:
        return None
    first = datetime.combine(min(dates), datetime.min.time(), UTC)
    last = datetime.combine(max(dates), datetime.min.time(), UTC)
    return int(first.timestamp() * 1000), int(last.timestamp() * 1000) + DAY_MS


def views_check(spark: SparkSession, cfg: KappaConfig,
                pipeline: str | None = None) -> tuple[str, ViewsCheck]:
    """The pipeline's name and its own :class:`ViewsCheck`; ConfigError when it registers none."""
    from jobs.batch.jobs import pipeline_definition

    loaded = pipeline_definition(pipeline, cfg)
    assert loaded.code is not None
    if loaded.code.reconciler_fn is None:
        raise ConfigError(f"pipeline {loaded.name} registers no @pipeline.reconciler: its views are "
                          "reconciled as declared under `reconcile:` "
                          f"(kappa pipelines reconcile {loaded.name})")
    return loaded.name, loaded.code.reconciler_fn(spark, cfg)


def reconcile(spark: SparkSession, cfg: KappaConfig, dates: list[date] | None = None,
              progress: Progress = lambda line: None, *, pipeline: str | None = None) -> ReconcileReport:
    """Compare the pipeline's live views with the lake; record the differences; raise on drift.

    ``dates`` limits the windowed views to windows starting on those dates (event dates) and
    skips the others (they need the whole lake); None compares everything. ``pipeline``: default
    ``pipelines.default``, or the only one.
    """
    _, check = views_check(spark, cfg, pipeline)
    report = ReconcileReport(uuid.uuid4().hex[:12], None if dates is None else [d.isoformat() for d in dates])
    ranged = [check.ranged_not_compared] if dates is not None and check.ranged_not_compared else []
    report.not_compared = [*check.not_compared, *ranged]
    within = span(dates)
    lake = _within(check.lake(report, progress), check.windowed, within)
    for view, side in check.live.items():
        found = side.read(lake, within)
        if found is None:
            progress(f"reconcile: {view} does not exist yet: not compared")
            report.not_compared.append({"what": view,
                                        "why": "the table does not exist yet (nothing loaded it)"})
            continue
        live = {kind: values for kind, values in found.items() if dates is None or kind in check.windowed}
        mine = (lake if side.expires_s is None
                else unexpired(lake, live, side.expires_s, report, check.windowed))
        mine = {kind: mine[kind] for kind in live if kind in mine}
        if side.top_n is not None:
            mine |= {kind: top_expected(live[kind], mine[kind], side.top_n, windowed=kind in check.windowed)
                     for kind in check.top_lists if kind in live}
        report.compared[view] = sorted(live)
        report.checked[view] = sum(len(values.keys() | mine.get(kind, {}).keys())
                                   for kind, values in live.items())
        report.differences += compare(view, live, mine, check.bounds)
        progress(f"reconcile: {view}: {report.checked[view]} keys, "
                 f"{sum(item.view == view for item in report.differences)} differences")
    record(cfg, report)
    if report.drifts:
        keys = ", ".join(f"{item.view}:{item.key}" for item in report.drifts[:10])
        raise ViewsDrift(f"{len(report.drifts)} live view key(s) differ from the lake beyond their bound "
                         f"({keys}); run {report.run_id} wrote them to {RECONCILIATION_TABLE}: see "
                         "docs/runbooks/views-drift.md", report)
    return report


def _within(lake: Views, windowed: tuple[str, ...], within: tuple[int, int] | None) -> Views:
    """The lake's views with the windowed kinds limited to windows starting in ``within``."""
    if within is None:
        return lake
    return lake | {kind: {key: value for key, value in lake[kind].items()
                          if within[0] <= int(key.split("/")[1]) < within[1]}
                   for kind in windowed if kind in lake}


def unexpired(lake: Views, live: Views, ttl_s: int, report: ReconcileReport,
              windowed: tuple[str, ...]) -> Views:
    """The lake's views without the windows the live side let expire.

    A window key expires ``ttl_s`` after its last write, which is never before the window's
    start: a lake window absent from the live side that started over ``ttl_s`` ago is left out;
    one still there is compared whatever its age.
    """
    oldest = int(time.time() * 1000) - ttl_s * 1000
    out = dict(lake)
    for kind in (kind for kind in windowed if kind in lake):
        have = live.get(kind, {})
        out[kind] = {key: value for key, value in lake.get(kind, {}).items()
                     if key in have or int(key.split("/")[1]) >= oldest}
        report.expired += len(lake.get(kind, {})) - len(out[kind])
    return out

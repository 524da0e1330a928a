"""``kappa pipelines reconcile``: a pipeline's views in Redis against its lake queries over silver.

Each ``reconcile: {VIEW: QUERY}`` entry runs the registered lake query over the whole silver
table (one pinned snapshot) and compares its rows, key by key, with what the view holds in Redis
now. The query returns, per view kind:

- ``tumbling`` / ``sliding``: ``window_start_ms`` (of the window, or of the slide bucket), the
  view's ``key`` and a count (the last column): Redis hashes ``P:V:<start>``;
- ``counter``: the view's ``key`` and a count: the sorted set ``P:V:all``.

Counts are exact, so any difference is a drift. A lake window absent from Redis that started
over the view's ``ttl_s`` ago expired as designed and is not compared (``expired``). A drift
raises :class:`~jobs.batch.report.ViewsDrift` (exit 6) carrying the whole report.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from jobs.batch.report import Difference, ReconcileReport, ViewsDrift
from jobs.config.load import KappaConfig
from jobs.engine.lake.gold import silver_source
from jobs.errors import ConfigError
from jobs.pipelines.define import Definitions
from jobs.pipelines.spec import PipelineSpec
from jobs.pipelines.views import Counter, Sliding, Tumbling, View

if TYPE_CHECKING:
    import redis
    from pyspark.sql import DataFrame, SparkSession

SUPPORTED = ("tumbling", "sliding", "counter")
WINDOWS, ALL = "windows", "all"


def checked_entries(spec: PipelineSpec, code: Definitions) -> dict[str, Callable[..., Any]]:
    """View name -> its lake query; ConfigError naming the first entry that cannot be compared."""
    entries = {}
    for view, query in spec.reconcile.items():
        if view not in spec.views:
            raise ConfigError(f"pipeline {spec.name}: reconcile names view {view!r}, which it does not "
                              f"declare (views: {', '.join(spec.views)})")
        if spec.views[view].kind not in SUPPORTED:
            raise ConfigError(f"pipeline {spec.name}: reconcile of view {view} ({spec.views[view].kind}) "
                              f"is not implemented; views of kind {', '.join(SUPPORTED)} can be reconciled")
        if query not in code.lake_queries:
            raise ConfigError(f"pipeline {spec.name}: reconcile maps view {view} to lake query {query!r}, "
                              "which its code does not register; add @pipeline.lake_query"
                              f"({query!r})")
        entries[view] = code.lake_queries[query]
    return entries


def lake_values(view: View, frame: DataFrame) -> dict[str, int]:
    """The lake query's rows as ``<window start>/<key>`` (windowed) or ``<key>`` (counter) -> count."""
    rows = frame.collect()
    if isinstance(view, Counter):
        return {str(row[0]): int(row[-1]) for row in rows}
    assert isinstance(view, Tumbling | Sliding)
    return {f"{int(row['window_start_ms'])}/{row[view.key]}": int(row[-1]) for row in rows}


def live_values(client: redis.Redis, prefix: str, name: str, view: View) -> dict[str, int]:
    """The view's keys in Redis in the shape of :func:`lake_values`."""
    def text(value: Any) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    base = f"{prefix}:{name}:"
    if isinstance(view, Counter):
        ranked: Any = client.zrange(f"{base}{ALL}", 0, -1, withscores=True)
        return {text(member): int(score) for member, score in ranked}
    out: dict[str, int] = {}
    for raw in client.scan_iter(match=f"{base}*", count=1000):
        start = text(raw)[len(base):]
        if start == WINDOWS or text(client.type(raw)) != "hash":
            continue
        out |= {f"{start}/{text(k)}": int(v) for k, v in client.hgetall(raw).items()}
    return out


def _unexpired(view: View, lake: dict[str, int], live: dict[str, int]) -> tuple[dict[str, int], int]:
    """The lake's values without the windows whose Redis keys expired; and how many were left out."""
    if not isinstance(view, Tumbling | Sliding):
        return lake, 0
    oldest = int(time.time() * 1000) - view.ttl_s * 1000
    kept = {key: n for key, n in lake.items() if key in live or int(key.split("/", 1)[0]) >= oldest}
    return kept, len(lake) - len(kept)


def reconcile_pipeline(spark: SparkSession, cfg: KappaConfig, spec: PipelineSpec, code: Definitions, *,
                       client: redis.Redis, prefix: str,
                       progress: Callable[[str], None] = lambda line: None) -> ReconcileReport:
    """Compare each reconciled view under ``prefix`` with its lake query; ViewsDrift on a difference."""
    from jobs.batch.lake import read_source, snapshot_at
    from jobs.lake.delta import table_uri
    from jobs.lake.storage import storage_options

    entries = checked_entries(spec, code)
    report = ReconcileReport(uuid.uuid4().hex[:12], None)
    source = silver_source(spec, code, by_date=False)
    uri = table_uri(cfg.lake.root, source.table)
    pinned = snapshot_at(uri, None, storage_options(cfg.lake))
    report.source_versions[source.table] = None if pinned is None else pinned.version()
    silver, rows = read_source(spark, uri, pinned, source, [], storage=storage_options(cfg.lake))
    progress(f"reconcile: {source.table} at version {report.source_versions[source.table]}: {rows} rows")
    for name, query in entries.items():
        view = spec.views[name]
        live = live_values(client, prefix, name, view)
        lake, expired = _unexpired(view, lake_values(view, query(silver)), live)
        report.expired += expired
        report.compared[name] = [view.kind]
        report.checked[name] = len(lake.keys() | live.keys())
        for key in sorted(lake.keys() | live.keys()):
            if lake.get(key) != live.get(key):
                report.differences.append(Difference(name, view.kind, key, _json(live.get(key)),
                                                     _json(lake.get(key)), 0.0, "drift"))
        progress(f"reconcile: {prefix}:{name}: {report.checked[name]} keys, "
                 f"{sum(item.view == name for item in report.differences)} differences")
    if report.drifts:
        keys = ", ".join(f"{item.view}:{item.key}" for item in report.drifts[:10])
        raise ViewsDrift(f"pipeline {spec.name}: {len(report.drifts)} view key(s) under {prefix} differ from "
                         f"the lake ({keys}); rebuild the views (`kappa pipelines reprocess`) or find the "
                         "writer that changed them", report)
    return report


def _json(value: int | None) -> str | None:
    return None if value is None else json.dumps(value)

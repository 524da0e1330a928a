"""The task layer of the batch DAGs (``batch_gold``, ``batch_ops``): what `kappa batch run` calls.

A scheduled run (``@daily`` data intervals, or Airflow's backfill of a date range) recomputes
the dates of its data interval. A run triggered by a load's Asset event recomputes the dates
that load changed: every load (``kafka_to_delta``; ``replay`` and ``backfill`` with the delta
sink) publishes one event per table it changed, with the dates in its ``extra`` (``dates``, from
:func:`load_extras`), so late data loaded today re-runs the old date it belongs to.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import date, datetime
from typing import Any

logger = logging.getLogger(__name__)

ASSET_TRIGGERED = "asset_triggered"


def _say(line: str) -> None:
    logger.info("%s", line)


def event_dates(extras: Iterable[Mapping[str, Any]]) -> list[date]:
    """The dates named by Asset events' ``extra["dates"]`` (events without them name none)."""
    found = {date.fromisoformat(str(day)) for extra in extras for day in (extra or {}).get("dates", [])}
    return sorted(found)


def dates_of_run(run_type: object, start: datetime | None, end: datetime | None,
                 extras: Iterable[Mapping[str, Any]]) -> list[date]:
    """What a DAG run recomputes: the changed dates of its Asset events, else its data interval.

    ``run_type``: ``dag_run.run_type`` as Airflow passes it (the enum; its value or ``str()`` too).
    """
    from jobs.batch.run import interval_dates
    from jobs.orchestration.dagkit import run_kind

    kind = run_kind(run_type)
    if kind == ASSET_TRIGGERED:
        return event_dates(extras)
    if start is None or end is None:
        from jobs.errors import ConfigError

        raise ConfigError(f"a {kind} run has no data interval: trigger it for a date (logical date) "
                          "or let Airflow's backfill create the runs")
    return interval_dates(start, end)


def recompute(job: str, run_type: object, start: datetime | None, end: datetime | None,
              extras: Iterable[Mapping[str, Any]] = (), *, pipeline: str | None = None) -> dict[str, Any]:
    """One batch job of ``pipeline`` over the run's dates (:func:`dates_of_run`); its report.

    ``pipeline``: default ``pipelines.default``, or the only one.
    """
    from jobs.batch.attach import run_batch
    from jobs.config.load import load_config

    dates = dates_of_run(run_type, start, end, list(extras))
    if not dates:
        _say(f"{job}: the asset events name no changed dates; nothing to recompute")
        return {"job": job, "dates": [], "partitions_replaced": 0}
    cfg = load_config()
    return run_batch(cfg, job, dates, _say, pipeline=pipeline).as_dict()


def load_extras(results: Iterable[Mapping[str, Any]], cfg: Any = None) -> dict[str, dict[str, Any]]:
    """Per loaded table: the date partitions its commits changed and the versions committed.

    ``results`` are ``kafka_to_delta``'s load results (``table``, ``outcome``,
    ``delta_version``); the dates come from each commit's added and removed files. ``cfg``:
    the run's config (default: loaded from the environment, as the load task did).
    """
    from jobs.batch.lake import changed_partitions
    from jobs.config.load import load_config
    from jobs.lake.delta import table_uri
    from jobs.lake.storage import storage_options
    from jobs.loader.tables import specs

    cfg = cfg or load_config()
    known = specs(cfg)
    extras: dict[str, dict[str, Any]] = {}
    for result in results:
        table, version = result["table"], result.get("delta_version")
        extra = extras.setdefault(table, {"dates": [], "versions": []})
        column = known[table].date_column if table in known else None
        if result.get("outcome") != "committed" or version is None:
            continue
        extra["versions"].append(version)
        if column:
            changed = changed_partitions(table_uri(cfg.lake.root, table), version, column,
                                         storage_options(cfg.lake))
            extra["dates"] = sorted(set(extra["dates"]) | set(changed))
    return extras


def publish_load_events(results: Iterable[Mapping[str, Any]], outlet_events: Any) -> list[dict[str, Any]]:
    """One Asset event per table the load changed (a committed version), none for the others.

    Published through the loads' alias (:func:`jobs.orchestration.dagkit.loads_alias`, the
    task's outlet), each event's ``extra`` names the date partitions the commits changed and the
    versions committed; a load that committed nothing publishes nothing, so the DAGs scheduled
    on the tables (``batch_gold``, ``batch_ops``, ``data_quality``) wake only for a change.
    Returns what was published (the task's XCom).
    """
    from jobs.orchestration.dagkit import loads_alias

    alias = loads_alias()
    published = []
    for table, extra in sorted(load_extras(list(results)).items()):
        if not extra["versions"]:
            continue
        outlet_events[alias].add(job_asset(table), extra=extra)
        published.append({"table": table, **extra})
    logger.info("published Asset events: %s", published or "none (nothing changed)")
    return published


def asset_extras(triggering_asset_events: Any) -> list[dict[str, Any]]:
    """The ``extra`` of every Asset event that triggered the run (none for a scheduled run)."""
    if not triggering_asset_events:
        return []
    return [dict(event.extra or {}) for events in triggering_asset_events.values() for event in events]


def job_asset(table: str) -> Any:
    """The Airflow Asset a batch table is published as (``delta://kappa/<schema>/<table>``)."""
    from airflow.sdk import Asset

    from jobs.orchestration.dagkit import asset_uri

    return Asset(name=table, uri=asset_uri(table))


def reconcile_views(pipeline: str | None = None) -> dict[str, Any]:
    """The ``reconcile`` DAG: ``kappa batch reconcile``; a drift fails the task once, unretried."""
    from jobs.batch.reconcile import reconcile
    from jobs.batch.report import ViewsDrift
    from jobs.batch.run import batch_spark
    from jobs.config.load import load_config

    cfg = load_config()
    try:
        return reconcile(batch_spark(cfg), cfg, None, _say, pipeline=pipeline).as_dict()
    except ViewsDrift as drift:
        try:
            from airflow.sdk.exceptions import AirflowFailException
        except ImportError:  # outside Airflow: the drift itself
            raise drift from None
        raise AirflowFailException(f"ViewsDrift: {drift}") from drift

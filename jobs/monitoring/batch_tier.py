"""Metrics of the batch tier: per batch table, the partitions its runs replaced and when.

``kappa batch run`` replaces date partitions of a table in one Delta commit whose metadata names
the job and the dates (``kappa.batch.job``, ``kappa.batch.dates``: jobs/batch/run.py). The
exporter reads the last :data:`HISTORY_COMMITS` commits of each batch table (the gold tables of
the configured pipeline's ``pipeline.yaml``) and takes the newest date any of them replaced, and
the newest such commit.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime

from prometheus_client.core import GaugeMetricFamily, Metric

from jobs.config.load import KappaConfig

HISTORY_COMMITS = 50  # commits read back per table (compactions and vacuums come between runs)
JOB_KEY, DATES_KEY = "kappa.batch.job", "kappa.batch.dates"


def batch_tier_metrics(cfg: KappaConfig) -> list[Metric]:
    """Per batch table: the newest date partition replaced, the last run's time and partitions."""
    from jobs.lake.delta import open_delta, table_uri
    from jobs.lake.storage import storage_options
    from jobs.pipelines.registry import find, load_spec

    newest = GaugeMetricFamily("kappa_batch_newest_partition_replaced_timestamp_seconds",
                               "Start (00:00 UTC) of the newest date partition a batch run replaced",
                               labels=["table"])
    last_run = GaugeMetricFamily("kappa_batch_last_run_timestamp_seconds",
                                 "Commit time of the table's last batch run (Unix time)", labels=["table"])
    replaced = GaugeMetricFamily("kappa_batch_last_run_partitions", "Date partitions the table's last "
                                 "batch run replaced", labels=["table"])
    spec = load_spec(find(None, cfg.pipelines.default)).spec
    tables = sorted(name for name, decl in (spec.tables if spec else {}).items() if decl.gold)
    for name in tables:
        table = open_delta(table_uri(cfg.lake.root, name), storage_options(cfg.lake))
        if table is None:
            continue
        runs = [commit for commit in table.history(HISTORY_COMMITS) if JOB_KEY in commit]
        if not runs:
            continue
        latest = max(runs, key=lambda commit: int(commit["timestamp"]))
        last_run.add_metric([name], int(latest["timestamp"]) / 1000)
        replaced.add_metric([name], len(json.loads(latest.get(DATES_KEY) or "[]")))
        days = [date.fromisoformat(day)
                for commit in runs for day in json.loads(commit.get(DATES_KEY) or "[]")]
        if days:
            start = datetime.combine(max(days), datetime.min.time(), tzinfo=UTC)
            newest.add_metric([name], start.timestamp())
    return [newest, last_run, replaced]

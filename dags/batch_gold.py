"""# batch_gold

Recomputes the gold BI tables of pipeline `{name}`, {tables} (`kappa batch run --pipeline {name}`;
its gold transforms, docs/tables.md), by whole {partitions} partitions, each replaced in one Delta
commit that records the source versions it read.

* **Daily** (`@daily` data intervals): a run recomputes the date of its interval; Airflow's own
  backfill (UI, `airflow backfill create`, REST) of a date range recomputes those dates, and a
  re-run replaces the same partitions with the same rows.
* **On the loads' Assets** ({sources}, published by `kafka_to_delta`, and by `replay`/`backfill`
  with the `delta` sink, only when a load changed the table): a run recomputes the dates the loads
  changed (the events' `extra.dates`), so late data re-runs its old date.

Publishes each table as an Asset. Runbook: docs/runbooks/airflow.md; drift: docs/runbooks/views-drift.md.
"""

from __future__ import annotations

from jobs.orchestration.dagkit import batch_dag, stream_pipeline

if (PIPELINE := stream_pipeline()) is not None:
    batch_dag(PIPELINE, "gold", ("bronze", "silver"), __doc__)

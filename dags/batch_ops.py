"""# batch_ops

Recomputes the ops tables of pipeline `{name}`, {tables} (`kappa batch run --pipeline {name}`;
its gold transforms, docs/tables.md), by whole {partitions} partitions, one Delta commit per table
and run recording the source versions it read: daily (`@daily` data intervals, so Airflow's
backfill recomputes date ranges) and whenever a load changed {sources} (`kafka_to_delta`; the
dates the load changed, from the Asset event's `extra.dates`). Publishes each table as an Asset.
Runbook: docs/runbooks/dlq-growing.md.
"""

from __future__ import annotations

from jobs.orchestration.dagkit import batch_dag, stream_pipeline

if (PIPELINE := stream_pipeline()) is not None:
    batch_dag(PIPELINE, "ops", ("ops",), __doc__)

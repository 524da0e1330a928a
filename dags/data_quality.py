"""# data_quality

Runs whenever `kafka_to_delta` publishes one of the Delta table Assets: summarises the latest
data-quality validations of every table (`kappa quality report`) and fails (alerting) when a
table's last validation failed a blocking expectation. Runbook: docs/runbooks/data-quality.md.
"""

from __future__ import annotations

from airflow.sdk import AssetAny, dag, task

from jobs.orchestration import tasks
from jobs.orchestration.dagkit import DEFAULT_ARGS, START, delta_assets, stream_pipeline


@dag(
    dag_id="data_quality",
    schedule=AssetAny(*delta_assets(stream_pipeline())),
    start_date=START,
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    doc_md=__doc__,
    tags=["kappa", "quality", "delta"],
)
def data_quality():
    @task
    def quality_report() -> list[dict]:
        return tasks.quality_report()

    quality_report()


data_quality()

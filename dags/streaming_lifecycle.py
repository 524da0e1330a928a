"""# streaming_lifecycle

Keeps the live streaming job of pipeline `{name}` (`kappa stream run --mode live`, query `{query}`:
`{source}` to its views and {outputs}) running, checks its health from its own metrics, and stops
it gracefully for maintenance.

* **ensure_running**: starts the job if no process holds its checkpoint lock (idempotent; the
  job's lock means never two copies). A dead job (crash, kill -9) is started again; a failed
  start is retried with exponential backoff.
* **check_health**: age of the running job's last batch and offsets behind latest, from
  `<redis prefix>:metrics:{query}` in Redis; metrics emitted before the job started are an
  earlier job's and do not count (until its first batch, the job's age stands for the batch age).
  Fails (and alerts) beyond the params' limits; a dead job (no process holds the lock) fails
  at once, without retries, so the next run starts it without waiting behind this one.
* **stop**: trigger with `{{"action": "stop"}}`: SIGTERM, the job finishes its batch and exits.

Runbook: docs/runbooks/airflow.md, docs/runbooks/streaming-down.md.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import dag

from jobs.orchestration import tasks
from jobs.orchestration.dagkit import (
    DEFAULT_ARGS,
    START,
    lifecycle_params,
    lifecycle_tasks,
    listed,
    stream_pipeline,
)


def streaming_lifecycle_dag(spec: Any) -> Any:
    """Ensure the pipeline's live job, check its health; or stop it."""
    outputs = [decl.topic for decl in (spec.outputs.analyzed, spec.outputs.dlq, spec.outputs.summaries)
               if decl is not None]
    doc = __doc__.format(name=spec.name, query=spec.streaming.query_name, source=spec.source.topic,
                         outputs=listed(outputs))

    @dag(
        dag_id="streaming_lifecycle",
        schedule=timedelta(minutes=5),
        start_date=START,
        catchup=False,
        max_active_runs=1,
        default_args=DEFAULT_ARGS,
        doc_md=doc,
        tags=["kappa", "streaming", "lifecycle", "pipeline", spec.name],
        params=lifecycle_params(),
    )
    def streaming_lifecycle():
        lifecycle_tasks(tasks.ensure_streaming, tasks.streaming_health, tasks.stop_streaming)

    return streaming_lifecycle()


if (PIPELINE := stream_pipeline()) is not None:
    streaming_lifecycle_dag(PIPELINE)

"""# checkpoint_recovery

Manual, `dry_run` true by default. Inspects the streaming query's checkpoint (last committed
batch and its offsets) against Kafka's earliest/latest offsets and the offsets the sinks
recorded (the Redis fence), prints exactly what the chosen action will do, then (only with
`dry_run` false) does it. The same actions as `kappa stream checkpoint inspect | rebuild | reset`:

* `inspect` / `resume`: report only (resume = start the job again with `streaming_lifecycle`);
* `rebuild`: a new checkpoint starting at the offsets the sinks recorded (no gap, no duplicate);
* `reset`: a new checkpoint starting at `timestamp` (ISO 8601 with zone).

Stop the job first (`streaming_lifecycle` with action stop). Runbook: docs/runbooks/airflow.md.
"""

from __future__ import annotations

from airflow.sdk import Param, dag, task

from jobs.orchestration import tasks
from jobs.orchestration.dagkit import DEFAULT_ARGS, START


@dag(
    dag_id="checkpoint_recovery",
    schedule=None,
    start_date=START,
    catchup=False,
    max_active_runs=1,
    default_args={**DEFAULT_ARGS, "retries": 1},
    doc_md=__doc__,
    tags=["kappa", "streaming", "recovery"],
    params={
        "action": Param("inspect", enum=["inspect", "resume", "rebuild", "reset"]),
        "dry_run": Param(True, type="boolean"),
        "timestamp": Param("", type="string", description="reset only: ISO 8601 with zone"),
        "query": Param("", type="string", description="default streaming.query_name"),
    },
)
def checkpoint_recovery():
    @task
    def recover(params=None) -> dict:
        return tasks.checkpoint_recovery(params["action"], params["dry_run"],
                                         params["timestamp"] or None, params["query"] or None)

    recover()


checkpoint_recovery()

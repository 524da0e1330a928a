"""# replay

**Backfill a date range with Airflow's own backfill** (UI "Backfill", `airflow backfill create`,
`POST /api/v2/backfills`). Each run covers one hour: its data interval (start → end, UTC) is
mapped to Kafka offsets by record timestamp, and exactly that range is replayed into the sinks
named in `params.sinks`:

* `kafka` / `redis`: the streaming job in replay mode (same transforms; Redis increments are
  fenced, so a second run of the same range changes nothing);
* `delta`: the loader up to the interval's end offsets (offsets committed with the data).

Pre-flight fails closed when the range is no longer retained in Kafka (naming the earliest
offset and time), when a sink is unreachable, or when another replay runs. `dry_run` prints the
resolved offsets and what would be written.

**Unpausing writes nothing**: the scheduler's own hourly runs are skipped; only backfills and
manual runs replay. A backfill's runs start only while the DAG is unpaused (Airflow leaves a
paused DAG's backfill queued): `kappa airflow backfill replay --from ... --to ...` refuses a
paused DAG and says so (`--unpause` unpauses it first). Runbook: docs/runbooks/airflow.md.
"""

from __future__ import annotations

from airflow.sdk import CronDataIntervalTimetable, Param, dag, task

from jobs.orchestration import tasks
from jobs.orchestration.dagkit import DEFAULT_ARGS, START


@dag(
    dag_id="replay",
    schedule=CronDataIntervalTimetable("@hourly", timezone="UTC"),
    start_date=START,
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    doc_md=__doc__,
    tags=["kappa", "replay", "backfill"],
    params={
        "sinks": Param(["delta"], type="array", items={"enum": ["delta", "redis", "kafka"]},
                       description="where the interval is replayed"),
        "dry_run": Param(False, type="boolean", description="print the offsets, write nothing"),
    },
)
def replay():
    @task
    def replay_interval(data_interval_start=None, data_interval_end=None, params=None, dag_run=None) -> dict:
        return tasks.replay_interval(data_interval_start, data_interval_end, params["sinks"],
                                     params["dry_run"], run_type=getattr(dag_run, "run_type", None))

    replay_interval()


replay()

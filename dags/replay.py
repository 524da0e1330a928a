"""# replay

**Backfill a date range with Airflow's own backfill** (UI "Backfill", `airflow backfill create`,
`POST /api/v2/backfills`). Each run covers one hour: its data interval (start → end, UTC) is
mapped to Kafka offsets by record timestamp, and exactly that range is replayed into the sinks
named in `params.sinks`:

* `kafka` / `redis`: the streaming job in replay mode (same transforms; Redis increments are
  fenced, so a second run of the same range changes nothing);
* `delta`: the loader up to the interval's end offsets (offsets committed with the data); the
  tables the load changed are published as Assets, as `kafka_to_delta` does, so `batch_gold`
  and `batch_ops` recompute the dates it changed.

Pre-flight fails closed, at once and without retries, when the source topic does not exist or
the range is no longer retained in Kafka (naming the earliest offset and time); when a sink is
unreachable or another replay runs, the task retries. `dry_run` prints the resolved offsets and
what would be written.

**The scheduler makes no run of it** (`BackfillIntervals`: hourly intervals that only a
backfill or a trigger runs), so unpausing writes nothing and every hour of a backfill gets a
run, whatever its reprocess behaviour. A backfill's runs start only while the DAG is unpaused
(Airflow leaves a paused DAG's backfill queued): `kappa airflow backfill replay --from ... --to
...` refuses a paused DAG and says so (`--unpause` unpauses it first). Runbook:
docs/runbooks/airflow.md.
"""

from __future__ import annotations

from airflow.sdk import Param, dag, task

from jobs.batch import tasks as batch_tasks
from jobs.orchestration import tasks
from jobs.orchestration.dagkit import DEFAULT_ARGS, START, loads_alias
from jobs.orchestration.timetables import BackfillIntervals


@dag(
    dag_id="replay",
    schedule=BackfillIntervals("@hourly", timezone="UTC"),
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
    @task(outlets=[loads_alias()], max_active_tis_per_dag=1)  # one hour at a time, whatever the backfill
    def replay_interval(data_interval_start=None, data_interval_end=None, params=None,
                        outlet_events=None) -> dict:
        report = tasks.replay_interval(data_interval_start, data_interval_end, params["sinks"],
                                       params["dry_run"])
        report["published"] = batch_tasks.publish_load_events(report.get("delta") or [], outlet_events)
        return report

    replay_interval()


replay()

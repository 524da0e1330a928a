"""# backfill

Manual replay of an **explicit offset range** of `rsvps.raw`: `starting_offsets` and
`ending_offsets` are JSON `{"<partition>": <offset>}` (ending exclusive), every partition in
both. Same pre-flight, sinks, report and published Assets (the tables a `delta` load changed)
as `replay`; `dry_run` (default true) prints the range and what would be written. For a time
range use `replay` with Airflow's backfill instead.
"""

from __future__ import annotations

from airflow.sdk import Param, dag, task

from jobs.batch import tasks as batch_tasks
from jobs.orchestration import tasks
from jobs.orchestration.dagkit import DEFAULT_ARGS, START, loads_alias


@dag(
    dag_id="backfill",
    schedule=None,
    start_date=START,
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    doc_md=__doc__,
    tags=["kappa", "replay", "backfill"],
    params={
        "starting_offsets": Param('{"0": 0, "1": 0, "2": 0}', type="string"),
        "ending_offsets": Param('{"0": 0, "1": 0, "2": 0}', type="string"),
        "sinks": Param(["delta"], type="array", items={"enum": ["delta", "redis", "kafka"]}),
        "dry_run": Param(True, type="boolean"),
    },
)
def backfill():
    @task(outlets=[loads_alias()])
    def replay_offsets(params=None, outlet_events=None) -> dict:
        report = tasks.backfill_offsets(params["starting_offsets"], params["ending_offsets"],
                                        params["sinks"], params["dry_run"])
        report["published"] = batch_tasks.publish_load_events(report.get("delta") or [], outlet_events)
        return report

    replay_offsets()


backfill()

"""# backfill

Manual replay of an **explicit offset range** of `{source}`, the source topic of pipeline `{name}`:
`starting_offsets` and `ending_offsets` are JSON `{{"<partition>": <offset>}}` (ending exclusive),
every partition in both. Same pre-flight, sinks, report and published Assets (the tables a `delta`
load changed) as `replay`; `dry_run` (default true) prints the range and what would be written. For
a time range use `replay` with Airflow's backfill instead.
"""

from __future__ import annotations

import json
from typing import Any

from airflow.sdk import Param, dag, task

from jobs.batch import tasks as batch_tasks
from jobs.orchestration import tasks
from jobs.orchestration.dagkit import DEFAULT_ARGS, START, loads_alias, stream_pipeline


def backfill_dag(spec: Any) -> Any:
    """The manual replay of an offset range of the pipeline's source topic."""
    offsets = json.dumps({str(partition): 0 for partition in range(spec.source.partitions)})

    @dag(
        dag_id="backfill",
        schedule=None,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        default_args=DEFAULT_ARGS,
        doc_md=__doc__.format(name=spec.name, source=spec.source.topic),
        tags=["kappa", "replay", "backfill", "pipeline", spec.name],
        params={
            "starting_offsets": Param(offsets, type="string"),
            "ending_offsets": Param(offsets, type="string"),
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

    return backfill()


if (PIPELINE := stream_pipeline()) is not None:
    backfill_dag(PIPELINE)

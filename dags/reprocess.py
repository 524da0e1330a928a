"""# reprocess

Manual. Rebuilds the views from the log into view version `version` beside the current one,
compares them, and after a human approval switches every reader to it
(`kappa reprocess start | status | diff | promote | retire`, the same functions):

* **start**: version N's topics and its live job from the earliest retained offset (idempotent);
* **wait_caught_up**: a sensor in reschedule mode (no worker slot held between pokes) until
  N's job is at most `max_behind` records behind (empty, the default: no further behind than
  the current version's live job, so it catches up under live traffic); fails if N's job does
  not run;
* **diff**: N against the current version key by key; the JSON report under
  `<stack.data_dir>/reprocess/`, the counts as XCom and in the approval's text;
* **approve**: human in the loop (Browse -> Required Actions, or the task's page). Reject skips
  the rest: N keeps running beside the current version until you retire it;
* **promote**: N becomes current, the previous version's live job stops;
* **grace**: `grace_minutes` after the promote (reschedule mode), for a promote back;
* **retire_previous**: the previous version's Redis keys, topics, tables and checkpoint.

Runbook: docs/runbooks/reprocess.md.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import Param, dag, task

from jobs.orchestration import reprocess
from jobs.orchestration.dagkit import DEFAULT_ARGS, START

POKE_S = 30
CATCH_UP_TIMEOUT = timedelta(hours=24)
GRACE_TIMEOUT = timedelta(days=8)
APPROVAL_BODY = """\
{% set d = ti.xcom_pull(task_ids='diff') %}
View version **{{ params.version }}** against the current version **{{ d.current }}**:
{{ d.keys_equal }} keys equal, **{{ d.keys_changed }} changed**, {{ d.only_in_current }} only in
v{{ d.current }}, {{ d.only_in_version }} only in v{{ params.version }}.

Report: `{{ d.report }}` (the largest changes and both versions' totals; also in the diff task's
log). Approve to make v{{ params.version }} current; v{{ d.current }} is retired
{{ params.grace_minutes }} minutes later.
"""


@dag(
    dag_id="reprocess",
    schedule=None,
    start_date=START,
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    doc_md=__doc__,
    tags=["kappa", "reprocess", "views"],
    params={
        "version": Param(type="integer", minimum=2, description="the new view version (2, 3, ...)"),
        "max_behind": Param(None, type=["null", "integer"], minimum=0,
                            description="caught up: at most this many records behind (empty: no "
                                        "further behind than the current version's live job)"),
        "grace_minutes": Param(60, type="number", minimum=0, maximum=10_080,
                               description="wait after promote before retiring the previous version"),
    },
)
def reprocess_dag():
    @task
    def start(params=None) -> dict:
        return reprocess.start_version(params["version"])

    @task.sensor(mode="reschedule", poke_interval=POKE_S, timeout=CATCH_UP_TIMEOUT.total_seconds())
    def wait_caught_up(params=None) -> bool:
        return reprocess.version_caught_up(params["version"], params["max_behind"])

    @task
    def diff(params=None) -> dict:
        return reprocess.diff_report(params["version"])

    approve = ApprovalOperator(
        task_id="approve",
        subject="Promote view version {{ params.version }}?",
        body=APPROVAL_BODY,
    )

    @task
    def promote(params=None) -> dict:
        return reprocess.promote_version(params["version"], params["max_behind"])

    @task.sensor(mode="reschedule", poke_interval=POKE_S, timeout=GRACE_TIMEOUT.total_seconds())
    def grace(promoted: dict, params=None) -> bool:
        return reprocess.grace_over(promoted["promoted_ms"], params["grace_minutes"])

    @task
    def retire_previous(promoted: dict) -> dict:
        return reprocess.retire_version(promoted["previous"])

    promoted = promote()
    start() >> wait_caught_up() >> diff() >> approve >> promoted
    grace(promoted) >> retire_previous(promoted)


reprocess_dag()

"""The replay tasks' pre-flight against the session's broker: what no retry can fix fails at once.

Airflow retries a task that raises (``retries`` with exponential backoff) unless it raises
``AirflowFailException``: a missing source topic stays missing, so the task must fail on its
first try with the operator's next step.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from airflow.sdk.exceptions import AirflowFailException

from tests.dags.conftest import patched_environ

MISSING = "does not exist; run `kappa topics apply`"


@pytest.fixture()
def missing_source(stack, kappa_env, tmp_path):
    """The task layer's config pointed at a source topic that does not exist."""
    topic = f"raw.missing-{uuid.uuid4().hex[:8]}"
    with patched_environ({**kappa_env, "KAPPA_STREAMING__SOURCE_TOPIC": topic,
                          "KAPPA_LAKE__CHECKPOINT_ROOT": str(tmp_path / "checkpoints")}):
        yield topic


def test_a_missing_source_topic_fails_the_replay_tasks_at_once_without_retries(missing_source):
    from jobs.orchestration import tasks

    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=2)
    began = time.monotonic()
    with pytest.raises(AirflowFailException) as interval:
        tasks.replay_interval(hour, hour + timedelta(hours=1), ["delta"], dry_run=True)
    with pytest.raises(AirflowFailException) as offsets:
        tasks.backfill_offsets('{"0": 0}', '{"0": 10}', ["delta"], dry_run=True)
    for failure in (interval, offsets):
        assert f"TopicMissing: topic {missing_source} {MISSING}" in str(failure.value), failure.value
    assert time.monotonic() - began < 30

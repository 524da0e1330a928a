"""`kappa stream run` refuses a range it cannot read before Spark starts: one `error:` line, exit 2."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from tests.integration.streaming.conftest import produce


@pytest.fixture()
def source(stack, topic_factory) -> str:
    """A three-partition topic holding six records written now."""
    topic = topic_factory(3, "raw")
    produce(stack, topic, [b"{}"] * 6)
    return topic


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _refused(run_kappa, source: str, *args: str) -> str:
    result = run_kappa("stream", "run", "--mode", "replay", *args, "--sinks", "kafka",
                       env={"KAPPA_STREAMING__SOURCE_TOPIC": source}, timeout=60)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr and "query " not in result.stderr  # Spark never started
    return lines[0]


def test_reversed_future_partial_and_empty_ranges_are_one_error_line(run_kappa, source):
    now = datetime.now(UTC)
    reversed_ = _refused(run_kappa, source, "--from", _iso(now - timedelta(minutes=5)),
                         "--to", _iso(now - timedelta(minutes=10)))
    assert reversed_.endswith("is after --to " + (now - timedelta(minutes=10)).strftime(
        "%Y-%m-%dT%H:%M:%S+00:00") + "; swap them")

    future = _refused(run_kappa, source, "--from", _iso(now + timedelta(days=1)))
    assert f"starts after the latest record of {source}" in future and "nothing to replay" in future

    partial = _refused(run_kappa, source, "--from", json.dumps({source: {"0": 1}}))
    assert f"must list every partition of {source} (missing 1, 2, unknown none)" in partial

    beyond = _refused(run_kappa, source, "--from", json.dumps({source: {"0": 0, "1": 0, "2": 9}}))
    assert f"offset 9 of {source}-2 is outside its log (offsets 0..2" in beyond

    before = _refused(run_kappa, source, "--from", _iso(now - timedelta(days=2)),
                      "--to", _iso(now - timedelta(days=1)))
    assert f"ends before the earliest record of {source} ({now:%Y-%m-%d}" in before

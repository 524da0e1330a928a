"""`kappa generate --pipeline NAME`: each pipeline's own records; a bad name is one error line."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.conftest import KAPPA, REPO

pytestmark = pytest.mark.unit

START_MS = 1_793_491_200_000
RSVP_KEYS = {"visibility", "response", "guests", "member", "rsvp_id", "mtime", "event", "group"}
CARD_KEYS = {"txn_id", "card_id", "merchant_id", "country", "lat", "lon", "amount", "currency",
             "event_time_ms"}


def _kappa(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([*KAPPA, *args], env=env, capture_output=True, text=True, timeout=120, cwd=REPO,
                          check=False)


def _records(*args: str) -> list[dict]:
    result = _kappa("generate", "-n", "40", "--seed", "3", "--start-ms", str(START_MS), *args)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_each_pipeline_generates_its_own_records():
    rsvps, cards = _records("--pipeline", "rsvp"), _records("--pipeline", "cards")
    assert len(rsvps) == len(cards) == 40
    assert all(RSVP_KEYS <= set(record) for record in rsvps)
    assert [record["mtime"] for record in rsvps][:2] == [START_MS, START_MS + 20]  # 50 events/s
    assert all(set(record) == CARD_KEYS for record in cards)
    assert min(record["event_time_ms"] for record in cards) >= START_MS
    assert len({record["card_id"] for record in cards}) > 1


def test_the_default_pipeline_is_the_configured_one():
    assert _records() == _records("--pipeline", "rsvp")  # conf/base.yaml: pipelines.default: rsvp


@pytest.mark.parametrize(("args", "says"), [
    (("--pipeline", "nope"), "no pipeline 'nope'; the pipelines are: "),
    (("--pipeline", "cards", "--late", "0.1"), "the cards generator makes no late records"),
    (("--pipeline", "cards", "--malformed", "0.1", "--malformed-kinds", "oversize"), "unknown"),
])
def test_a_bad_pipeline_or_option_exits_2_with_one_line(args, says):
    result = _kappa("generate", "-n", "5", *args)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0]
    assert result.stdout == ""


def test_help_names_the_pipeline_option():
    result = _kappa("generate", "--help")
    assert result.returncode == 0 and "--pipeline" in result.stdout

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


TINY_SPEC = """\
name: tiny
generator: gen.py
collect: check.py
source: {topic: tiny.raw, key: id}
outputs:
  analyzed: {topic: tiny.out}
  dlq: {topic: tiny.dlq, partitions: 1}
streaming: {query_name: tiny-live, redis_prefix: tiny}
"""
TINY_GENERATOR = """\
from dataclasses import dataclass

@dataclass(frozen=True)
class Line:
    line: bytes
    key: bytes

def lines(options):
    if options.late:
        raise ValueError("tiny records are never late")
    return (Line(b'{"id": %d, "at": %d}' % (i, options.start_ms), b"%d" % i)
            for i in range(options.seed, options.seed + options.count))
"""
TINY_CHECK = """\
from jobs.pipelines.structure import StructureCheck

def check(record):
    if not isinstance(record, dict) or "id" not in record:
        return StructureCheck(None, "missing_field: id")
    return StructureCheck(b"tiny-%d" % record["id"], None)
"""


def test_a_pipeline_outside_the_project_brings_its_own_generator_and_check(tmp_path, monkeypatch):
    folder = tmp_path / "tiny"
    folder.mkdir()
    for name, text in (("pipeline.yaml", TINY_SPEC), ("gen.py", TINY_GENERATOR), ("check.py", TINY_CHECK)):
        (folder / name).write_text(text)
    monkeypatch.setenv("KAPPA_PIPELINES_PATH", str(tmp_path))
    assert _records("--pipeline", "tiny") == [{"id": 3 + i, "at": START_MS} for i in range(40)]
    refused = _kappa("generate", "--pipeline", "tiny", "--late", "0.5")
    assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
        "error: invalid fault options: tiny records are never late"]

    from jobs.collector.run import pipeline_settings
    from jobs.config.load import load_config
    from jobs.pipelines.structure import check_structure

    settings = pipeline_settings(load_config(), "tiny")
    assert (settings.topic, settings.dlq_topic, settings.post_path) == ("tiny.raw", "tiny.dlq", "/tiny")
    assert check_structure(b'{"id": 7}', 100, settings.record_check).key == b"tiny-7"
    assert check_structure(b'{"other": 7}', 100, settings.record_check).reason == "missing_field: id"
    assert check_structure(b"[1]", 100, settings.record_check).code == "missing_field"

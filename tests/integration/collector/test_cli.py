"""Operator errors of `kappa collect` / `kappa generate`: one readable line and the right exit code."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from pipelines.rsvp.generator import RsvpGenerator
from tests.integration.collector.support import read_topic, silent_port


@pytest.mark.parametrize(("args", "says"), [
    (("collect",), "nothing to collect"),
    (("collect", "--url", "ftp://example.com/rsvps"), "--url must be a ws://"),
    (("collect", "--file", "/nonexistent/rsvps.jsonl"), "does not exist"),
    (("collect", "--file", "x", "--stdin"), "choose one stream source"),
    (("collect", "--http", "--port", "70000"), "--port must be between 0 and 65535"),
    (("generate", "--late", "1.5"), "late must be a fraction"),
    (("generate", "--malformed-kinds", "gibberish", "--malformed", "0.1"), "unknown"),
    (("generate", "-o", "x.jsonl", "--to-topic", "t"), "choose one destination"),
    (("collect", "failed", "redrive"), "choose either --all"),
])
def test_bad_arguments_exit_2_with_one_line(run_kappa, args, says):
    result = run_kappa(*args)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0]


def test_status_and_failed_list_without_a_collector_say_so(run_kappa, tmp_path):
    with silent_port() as port:
        env = {"KAPPA_COLLECTOR__LOG_PATH": str(tmp_path / "none" / "log.sqlite"),
               "KAPPA_COLLECTOR__PORT": str(port)}
        status = run_kappa("collect", "status", env=env)
    assert status.returncode == 1
    assert status.stderr.startswith("error: the collector is not running")
    assert "Traceback" not in status.stderr
    listed = run_kappa("collect", "failed", "list", env=env)
    assert listed.returncode == 1 and "no collector log at" in listed.stderr


def test_second_collector_on_the_same_log_or_port_is_refused(start_collector, topics, run_kappa, tmp_path):
    first = start_collector(*topics)
    second = run_kappa("collect", "--http", "--port", "0", env=first.env)
    assert second.returncode == 1
    assert f"another collector (pid {first.proc.pid})" in second.stderr
    port = first.url.rsplit(":", 1)[1]
    third = run_kappa("collect", "--http", "--port", port,
                      env={"KAPPA_COLLECTOR__LOG_PATH": str(tmp_path / "other.sqlite")})
    assert third.returncode == 1 and third.stderr.startswith(f"error: cannot serve HTTP on 127.0.0.1:{port}")


def test_generate_to_topic_and_to_collector(run_kappa, start_collector, topics, topic_factory, kafka_props):
    direct = topic_factory(3, prefix="gen")
    result = run_kappa("generate", "-n", "300", "--seed", "41", "--to-topic", direct)
    assert result.returncode == 0, result.stderr
    expected = Counter(str(item.rsvp_id).encode() for item in RsvpGenerator(seed=41).generate(300))
    assert Counter(m.key for m in read_topic(kafka_props, direct)) == expected

    collector = start_collector(*topics)
    sent = run_kappa("generate", "-n", "1000", "--seed", "42", "--malformed", "0.05",
                     "--to-collector", f"{collector.url}/rsvps")
    assert sent.returncode == 0, sent.stderr
    metrics = collector.wait_drained()
    assert metrics["accepted_total"] + metrics["rejected_total"] == 1000 and metrics["rejected_total"] > 0
    assert f"accepted {int(metrics['accepted_total'])}" in sent.stderr


def test_generate_cards_to_topic_keys_each_transaction_by_its_card(run_kappa, topic_factory, kafka_props):
    direct = topic_factory(3, prefix="gen-cards")
    result = run_kappa("generate", "--pipeline", "cards", "-n", "200", "--seed", "5", "--malformed", "0.05",
                       "--to-topic", direct)
    assert result.returncode == 0, result.stderr
    messages = read_topic(kafka_props, direct)
    assert len(messages) == 200 and all(m.key is not None and m.key.startswith(b"card-") for m in messages)
    parsed = [_object(m.value) for m in messages]
    keyed = [(m.key, record["card_id"].encode()) for m, record in zip(messages, parsed, strict=True)
             if record.get("card_id") is not None]
    assert len(keyed) > 150 and all(key == card for key, card in keyed)
    assert len({m.key for m in messages}) > 10


def _object(value: bytes) -> dict:
    try:
        record = json.loads(value)
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}

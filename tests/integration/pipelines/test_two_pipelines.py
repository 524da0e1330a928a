"""Two pipelines live at once on one stack: killing or reprocessing one leaves the other alone.

One of them is a tiny pipeline written into the test's folder (tests/integration/pipelines/tiny.py:
a schema, one counter view, one table): it runs live and replays (its reprocess is a replay of
the whole log into version 2, equal to the live version key by key) with no change outside its
own files.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
import redis
from confluent_kafka import Producer

from jobs.engine.reads import read_view, snapshot
from jobs.engine.run import ensure_topics
from jobs.pipelines.registry import load
from pipelines.cards.generator import generate
from tests.conftest import KAPPA, REPO
from tests.integration.pipelines.cards_support import copy_cards, expected, family
from tests.integration.pipelines.tiny import write_tiny

pytestmark = [pytest.mark.integration, pytest.mark.slow]
CARDS, TINY = 2400, 3000


def _applied(client: redis.Redis, prefix: str, topic: str) -> int:
    fence = client.hgetall(f"{prefix}:fence")
    return sum(int(v) for k, v in fence.items() if k.decode().rpartition(":")[0] == topic)


def _until(check, what: str, procs: dict[str, subprocess.Popen], logs: Path,
           timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        for name, proc in procs.items():
            assert proc.poll() is None, f"{name} exited: {(logs / name).read_text()[-2000:]}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def test_two_pipelines_live_at_once(stack, tmp_path, kafka_props, kappa_env) -> None:
    cards_folder, cards = copy_cards(tmp_path)
    tiny_folder, tiny, tiny_source = write_tiny(tmp_path)
    cards_spec, tiny_spec = load(cards_folder).spec, load(tiny_folder).spec
    items = list(generate(CARDS, seed=3, cards=100, travel_rate=0.05, malformed_rate=0.01))
    colours = [("red", "green", "blue")[i % 3 if i % 5 else 0] for i in range(TINY)]
    for spec in (cards_spec, tiny_spec):
        ensure_topics(stack, spec)
    producer = Producer(kafka_props)
    for item in items:
        producer.produce(cards_spec.source.topic, item.value.encode(),
                         item.key.encode() if item.key else None)
    for i, colour in enumerate(colours):
        value = {"id": i, "colour": colour, "t": 1_700_000_000_000 + i}
        producer.produce(tiny_source, json.dumps(value).encode(), str(i).encode())
    assert producer.flush(30) == 0

    env = {**os.environ, **kappa_env, "KAPPA_PIPELINES_PATH": str(tmp_path)}
    logs = tmp_path / "logs"
    logs.mkdir()

    def start(name: str) -> subprocess.Popen:
        with (logs / name).open("a") as out:
            command = [*KAPPA, "pipelines", "run", name, "--max-offsets-per-trigger", "300"]
            return subprocess.Popen(command, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)

    client = redis.Redis(**stack.redis.client_kwargs())
    procs = {cards: start(cards), tiny: start(tiny)}
    try:
        cards_at = lambda: _applied(client, cards, cards_spec.source.topic)  # noqa: E731
        _until(lambda: cards_at() >= CARDS // 3, "cards a third", procs, logs)
        procs[cards].send_signal(signal.SIGKILL)
        assert procs[cards].wait(60) == -signal.SIGKILL
        alive = {tiny: procs[tiny]}
        moved_from = _applied(client, tiny, tiny_source)
        _until(lambda: _applied(client, tiny, tiny_source) == TINY, "tiny to its end", alive, logs)
        assert _applied(client, tiny, tiny_source) > moved_from, "tiny stopped with the killed one"
        procs[cards] = start(cards)
        _until(lambda: cards_at() == CARDS, "cards to its end", procs, logs)

        cards_before = snapshot(client, cards, cards_spec.views)
        done = subprocess.run([*KAPPA, "pipelines", "reprocess", tiny, "--version", "2", "--json"],
                              env=env, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        diff = subprocess.run([*KAPPA, "pipelines", "diff", tiny, "--version", "2", "--json"],
                              env=env, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
        assert diff.returncode == 0, diff.stderr[-3000:]
        report = json.loads(diff.stdout)
        assert (report["keys_changed"], report["only_in_current"], report["only_in_version"]) == (0, [], [])
        assert procs[cards].poll() is None and snapshot(client, cards, cards_spec.views) == cards_before
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for name, proc in procs.items():
            assert proc.wait(90) == 0, (logs / name).read_text()[-2000:]

    counted = read_view(client, tiny, "colours", tiny_spec.views["colours"])["top"]
    assert dict(counted) == dict(Counter(colours))
    want = expected(items)
    assert family(snapshot(client, cards, cards_spec.views), "amount_by_currency") == {
        cur: {"amount": str(want.amount_cents[cur]), "transactions": str(want.transactions[cur])}
        for cur in want.transactions}
    tiny_keys = [key.decode() for key in client.scan_iter(match=f"{tiny}:*")]
    assert not [key for key in tiny_keys if key.startswith(f"{tiny}:last_use")]
    metrics = {prefix: set(client.hkeys(f"{prefix}:metrics")) for prefix in (cards, tiny)}
    assert metrics == {cards: {f"{cards}-live".encode()}, tiny: {f"{tiny}-live".encode()}}

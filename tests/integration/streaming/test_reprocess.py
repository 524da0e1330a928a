"""Reprocessing into view versions, end to end with the real CLI on the embedded stack.

Version 1 runs live over a topic of generated events. Version 2 (the same code) is built beside
it from the earliest offset: its diff with version 1 is empty. Version 3 runs a changed
transform (city names starting with S in upper case, tests/.../city_variant): its diff names
exactly the city windows holding such a city, computed here from the generator's records. After
``promote`` the REST answers, ``kappa summaries`` and ``kappa sql`` read version 3, and an SSE
client connected across the switch is told and goes on with version 3's records; after ``retire``
nothing of version 1 is left (Redis keys, topics, tables).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import redis
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from websockets.sync.client import connect as ws_connect

from jobs.config.load import load_config
from jobs.serve.server import ServerThread
from jobs.streaming.state import checkpoint_path, lock_holder
from pipelines.rsvp.generator import RsvpGenerator
from tests.conftest import KAPPA, REPO
from tests.integration.serve.support import SseReader
from tests.integration.streaming.conftest import produce
from tests.integration.streaming.expected import city_name, compute
from tests.integration.streaming.test_end_to_end import generate
from tests.integration.streaming.test_kill_restart import _env

EVENTS = 3_000
VARIANT = str(Path(__file__).parent / "city_variant")


def _kappa(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    done = subprocess.run([*KAPPA, *args], env=env, cwd=REPO, text=True, capture_output=True,
                          timeout=timeout, check=False)
    assert done.returncode == 0, f"kappa {' '.join(args)}: {done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


def _json(env: dict[str, str], *args: str, timeout: float = 300) -> Any:
    return json.loads(_kappa(env, *args, "--json", timeout=timeout).stdout.strip().splitlines()[-1])


def _wait(condition, what: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(1)


class SteadyProducer:
    """Generated RSVPs to the source topic at about 50/s until stopped; the positions it wrote."""

    def __init__(self, props: dict[str, str], topic: str) -> None:
        self.props, self.topic = props, topic
        self.sent: list[tuple[int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        producer = Producer(self.props)
        items = [g for g in RsvpGenerator(seed=77).generate(20_000) if not g.kind.startswith("malformed")]

        def delivered(err, msg) -> None:
            if err is None:
                self.sent.append((msg.partition(), msg.offset()))

        for index, item in enumerate(items):
            if self._stop.is_set():
                break
            producer.produce(self.topic, item.line, key=str(index).encode(), partition=index % 3,
                             on_delivery=delivered)
            if index % 5 == 4:
                producer.flush(10)
                time.sleep(0.1)
        producer.flush(30)

    def stop(self) -> set[tuple[int, int]]:
        self._stop.set()
        self._thread.join(timeout=60)
        return set(self.sent)


class WsReader:
    """A WebSocket client on a thread: the source positions of the analyzed events it received."""

    def __init__(self, url: str) -> None:
        self.url, self.events = url, []
        self.connected, self._stop = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with ws_connect(self.url) as ws:
            self.connected.set()
            while not self._stop.is_set():
                try:
                    message = json.loads(ws.recv(timeout=0.5))
                except TimeoutError:
                    continue
                if message.get("type") == "event":
                    self.events.append(message["data"])

    def positions(self) -> list[tuple[int, int]]:
        return [(d["source_partition"], d["source_offset"]) for d in list(self.events)]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def _sse_positions(reader: SseReader) -> list[tuple[int, int]]:
    return [(e.data["source_partition"], e.data["source_offset"]) for e in reader.of("rsvp")]


def _changed_windows(sent) -> set[str]:
    """The city-window keys whose content the variant changes: a window with an on-time S city."""
    expected = compute(sent)
    return {f"cities:{start}" for start, counts in expected.cities.items()
            if any(city.startswith("S") and city.upper() != city for city in counts)}


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_reprocess_builds_beside_diffs_promotes_and_retires(
        stream_cfg, kappa_env, kafka_props, topic_factory, tmp_path) -> None:
    s = stream_cfg.streaming
    sent = generate(EVENTS, seed=41)
    produce(stream_cfg, s.source_topic, (item.line for item in sent))
    env = {**_env(stream_cfg, kappa_env), "KAPPA_STREAMING__VIEWS_TOPIC": topic_factory(1, "views"),
           "KAPPA_LOADER__TABLES__SILVER.RSVPS__TOPIC": s.analyzed_topic,
           "KAPPA_LOADER__TABLES__GOLD.RSVP_SUMMARIES__TOPIC": s.summaries_topic,
           "KAPPA_LOADER__TABLES__OPS.DLQ__TOPIC": s.dlq_topic,
           "KAPPA_LOADER__TABLES__BRONZE.RSVPS_RAW__TOPIC": s.source_topic,
           "KAPPA_STREAMING__REPROCESS_NICE": "3"}
    client = redis.Redis(host=stream_cfg.redis.host, port=stream_cfg.redis.port, decode_responses=True)
    prefix = s.redis_prefix
    log = (tmp_path / "v1.log").open("ab")
    v1 = subprocess.Popen([*KAPPA, "stream", "run", "--mode", "live"], env=env, cwd=REPO, stdout=log,
                          stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait(lambda: int(client.hget(f"{prefix}:totals", "input") or 0) == EVENTS, "version 1")

        # version 2, the same code: nothing differs once it has caught up
        started = _json(env, "reprocess", "start", "--version", "2")
        assert started["redis_prefix"] == f"{prefix}-v2"
        # at streaming.reprocess_nice (set for this test), below the live job's priority
        assert psutil.Process(started["pid"]).nice() == 3
        _wait(lambda: int(client.hget(f"{prefix}-v2:totals", "input") or 0) == EVENTS, "version 2")
        same = _json(env, "reprocess", "diff", "--version", "2")
        assert (same["keys_changed"], same["only_in_current"], same["only_in_version"]) == (0, [], [])
        assert same["keys_equal"] > 100
        _kappa(env, "reprocess", "retire", "--version", "2")
        assert not list(client.scan_iter(f"{prefix}-v2:*"))

        # version 3, a changed transform: exactly the windows with an S city change
        variant_env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [VARIANT, env.get("PYTHONPATH")]))}
        _json(variant_env, "reprocess", "start", "--version", "3")
        _wait(lambda: int(client.hget(f"{prefix}-v3:totals", "input") or 0) == EVENTS, "version 3")
        changed = _json(env, "reprocess", "diff", "--version", "3", "--out", str(tmp_path / "diff.json"))
        assert set(changed["changed_keys"]) == _changed_windows(sent) != set()
        assert (changed["only_in_current"], changed["only_in_version"]) == ([], [])
        assert json.loads((tmp_path / "diff.json").read_text())["keys_changed"] == changed["keys_changed"]
        rows = {row["version"]: row for row in _json(env, "reprocess", "status")}
        assert rows[1]["state"] == "current" and rows[3]["state"] == "building"
        assert rows[3]["offsets_behind_latest"] == 0 and rows[3]["running_pid"]

        server = ServerThread(load_config("test", overrides={"serve.port": 0}, environ=env), None).start()
        readers = [SseReader(f"{server.url}/api/v1/stream?stream=analyzed") for _ in range(3)]
        reader = readers[0]
        ws = WsReader(server.url.replace("http://", "ws://") + "/api/v1/ws?stream=analyzed")
        producer = SteadyProducer(kafka_props, s.source_topic)
        try:
            for each in readers:
                each.wait_for(lambda r: r.status_code == 200)
            ws.connected.wait(15)
            producer.start()   # a steady producer through the switch: every record reaches every client once
            time.sleep(3)
            promoted = _json(env, "reprocess", "promote", "--version", "3", "--timeout", "300")
            assert (promoted["current"], promoted["previous"], promoted["previous_job_stopped"]) == (
                3, 1, True)
            assert v1.wait(timeout=60) == 0
            reader.wait_for(lambda r: any(e.data.get("status") == "view_switched" for e in r.of("status")),
                            timeout=30)
            switched = next(e for e in reader.of("status") if e.data.get("status") == "view_switched")
            assert (switched.data["version"], switched.data["previous"]) == (3, 1)
            window = next(iter(sorted(_changed_windows(sent))))
            start_ms = int(window.split(":")[1])
            rest = httpx.get(f"{server.url}/api/v1/cities", params={"window_start_ms": start_ms}, timeout=10)
            assert rest.status_code == 200, rest.text
            assert any(c["city"].startswith("S") and c["city"] == c["city"].upper()
                       for w in rest.json()["windows"] for c in w["cities"]), rest.json()
            # the job of version 3 writes on: records produced now reach the clients with v3 ids
            time.sleep(5)
            sent = producer.stop()
            assert len(sent) > 100
            got = {f"sse{i}": partial(_sse_positions, each) for i, each in enumerate(readers)}
            got["ws"] = ws.positions
            _wait(lambda: all(sent <= set(positions()) for positions in got.values()), "every record")
            for name, positions in got.items():
                counts = Counter(positions())
                assert not [p for p in sent if counts[p] != 1], name   # 0 missing, 0 duplicated
            assert any((e.id or "").startswith("v3/") for e in reader.of("rsvp"))
        finally:
            producer.stop()
            ws.stop()
            for each in readers:
                each.stop()
            server.stop()
        # operator commands follow the current version: status shows v3's live query, topics its topics
        rows = _json(env, "stream", "status")
        [v3_row] = [row for row in rows if row["query"] == f"{s.query_name}-v3"]
        assert (v3_row["view_version"], v3_row["current"], v3_row["running"]) == (3, True, True), rows
        listed = {topic["name"] for topic in json.loads(_kappa(env, "topics", "list", "--json").stdout)}
        assert {f"{s.analyzed_topic}.v3", f"{s.summaries_topic}.v3"} <= listed, listed
        cities = _json(env, "summaries", "cities", "--windows", "10000")
        shown = {c["city"] for w in cities for c in w["cities"] if w["window_start_ms"] == start_ms}
        assert shown and any(c.startswith("S") and c == c.upper() for c in shown), cities

        _kappa(env, "load", timeout=900)
        sql = _kappa(env, "sql", "--format", "json",
                     "SELECT DISTINCT city FROM silver.rsvps WHERE city LIKE 'S%' ORDER BY city")
        found = {row["city"] for row in json.loads(sql.stdout)}
        assert found and all(city == city.upper() for city in found), found
        assert {city_name(c).upper() for c in found} == found

        retired = _json(env, "reprocess", "retire", "--version", "1")
        assert retired["redis_keys_deleted"] > 0
        assert not [k for k in client.scan_iter(f"{prefix}:*")]
        admin = AdminClient(kafka_props)
        present = set(admin.list_topics(timeout=15).topics)
        assert {s.analyzed_topic, s.summaries_topic}.isdisjoint(present)
        assert not (Path(stream_cfg.lake.root) / "silver" / "rsvps").exists()
        assert (Path(stream_cfg.lake.root) / "silver" / "rsvps_v3").exists()
        root = Path(stream_cfg.lake.checkpoint_root)
        assert not [p.name for p in root.iterdir() if p.name == s.query_name
                    or p.name.startswith((f"{s.query_name}.", f"{s.query_name}-replay-"))]

        stopped = _kappa(env, "stream", "stop", "--grace", "120")
        assert "streaming-v3: stopping pid" in stopped.stderr + stopped.stdout, stopped
        assert lock_holder(checkpoint_path(str(root), f"{s.query_name}-v3")) is None
    finally:
        if v1.poll() is None:
            v1.send_signal(signal.SIGTERM)
            v1.wait(timeout=120)
        for version in (2, 3):  # the jobs `reprocess start` left running
            root = stream_cfg.lake.checkpoint_root
            holder = lock_holder(checkpoint_path(root, f"{s.query_name}-v{version}"))
            if holder:
                os.kill(holder, signal.SIGTERM)
        client.close()

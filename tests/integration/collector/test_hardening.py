"""Issue 18, collector items: hostile input, restart, refused bodies, HTTP limits, bounded drain."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest

from pipelines.rsvp.generator import RsvpGenerator
from tests.integration.collector.support import read_topic

NDJSON = {"content-type": "application/x-ndjson"}
TOO_DEEP = "too_deep: arrays and objects nested deeper than 32 levels"
TOKEN = "s3cret-token"
LIMITS = {"KAPPA_COLLECTOR__HEADER_TIMEOUT_S": "1", "KAPPA_COLLECTOR__BODY_TIMEOUT_S": "1",
          "KAPPA_COLLECTOR__MAX_CONNECTIONS": "4", "KAPPA_COLLECTOR__MAX_BODY_BYTES": str(1 << 20),
          "KAPPA_COLLECTOR_TOKEN": TOKEN}
AUTH = {"authorization": f"Bearer {TOKEN}"}


def _lines(seed: int, count: int) -> list[bytes]:
    return [item.line for item in RsvpGenerator(seed=seed).generate(count)]


def _keys(lines: list[bytes]) -> list[bytes]:
    return sorted(str(json.loads(line)["rsvp_id"]).encode() for line in lines)


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=5)


def _read_answer(sock: socket.socket, within_s: float) -> bytes:
    """Whatever the server sends until it closes the connection (or ``within_s`` passes)."""
    data, deadline = b"", time.monotonic() + within_s
    sock.settimeout(0.2)
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    return data


def test_deep_nesting_is_dead_lettered_and_the_rest_of_the_batch_logged(
        run_kappa, start_collector, topics, kafka_props, tmp_path):
    raw, dlq = topics
    good = _lines(51, 4)
    deep = b"[" * 5000 + b"]" * 5000
    path = tmp_path / "deep.jsonl"
    path.write_bytes(good[0] + b"\n" + deep + b"\n" + good[1] + b"\n")
    pulled = run_kappa("collect", "--file", str(path), "--topic", raw, "--dlq-topic", dlq,
                       env={"KAPPA_COLLECTOR__LOG_PATH": str(tmp_path / "pull" / "log.sqlite")}, timeout=90)
    assert pulled.returncode == 0, pulled.stderr
    assert "pulled 3 lines: 2 accepted, 1 rejected" in pulled.stderr

    collector = start_collector(raw, dlq)
    answer = collector.post_lines([good[2], deep, good[3]])
    assert answer.status_code == 207
    assert [r.get("error") for r in answer.json()["results"]] == [None, TOO_DEEP, None]
    collector.wait_drained()
    assert sorted(m.key for m in read_topic(kafka_props, raw)) == _keys(good)
    dead = read_topic(kafka_props, dlq)
    assert [(m.value, m.headers["kappa.reason"], m.headers["kappa.source"]) for m in dead] == [
        (deep, TOO_DEEP.encode(), b"file"), (deep, TOO_DEEP.encode(), b"http")]


def test_a_restarted_collector_binds_its_port_at_once(start_collector, topics):
    first = start_collector(*topics)
    port = int(first.url.rsplit(":", 1)[1])
    clients = [httpx.Client(), httpx.Client()]
    for client in clients:  # keep-alive connections the server closes on shutdown: TIME-WAIT
        assert client.get(f"{first.url}/healthz").status_code == 200
    code, _ = first.stop()
    assert code == 0
    second = start_collector(*topics, port=port)
    assert second.url == first.url
    assert httpx.get(f"{second.url}/healthz").status_code == 200
    for client in clients:
        client.close()


def test_token_body_cap_timeouts_and_connection_limit(start_collector, topics, kafka_props):
    raw, dlq = topics
    collector = start_collector(raw, dlq, env=LIMITS)
    url = f"{collector.url}/rsvps"
    line = _lines(52, 1)[0]

    assert httpx.post(url, content=line).status_code == 401
    wrong = httpx.post(url, content=line, headers={"authorization": "Bearer nope"})
    assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == "Bearer"
    assert "KAPPA_COLLECTOR_TOKEN" in wrong.json()["error"]
    assert httpx.get(f"{collector.url}/healthz").status_code == 200  # probes need no token
    assert httpx.post(url, content=line, headers=AUTH).status_code == 200

    declared = httpx.post(url, content=b"x" * (2 << 20), headers=AUTH)
    assert declared.status_code == 413
    chunked = httpx.post(url, content=iter([b" " * (256 << 10)] * 12), headers=AUTH)  # 3 MiB, no length
    assert chunked.status_code == 413
    assert chunked.json() == {"error": f"request body larger than max_body_bytes {1 << 20}: split the batch"}

    slow_headers = _connect(collector.url)
    started = time.monotonic()
    for byte in b"POST /rsvps HTTP/1.1\r\n":  # one byte every 0.3 s: never complete within 1 s
        try:
            slow_headers.send(bytes([byte]))
        except OSError:
            break
        time.sleep(0.3)
    answer = _read_answer(slow_headers, 3)
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert time.monotonic() - started < 5

    slow_body = _connect(collector.url)
    slow_body.send(b"POST /rsvps HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\nauthorization: Bearer "
                   + TOKEN.encode() + b"\r\n\r\n" + b"{" * 10)
    assert _read_answer(slow_body, 4).startswith(b"HTTP/1.1 408 ")

    idle = [_connect(collector.url) for _ in range(4)]
    refused = _connect(collector.url)
    assert _read_answer(refused, 2).startswith(b"HTTP/1.1 503 ")
    for sock in [slow_headers, slow_body, refused, *idle]:
        sock.close()
    time.sleep(0.3)
    assert httpx.post(url, content=_lines(53, 1)[0], headers=AUTH).status_code == 200
    assert collector.wait_drained()["accepted_total"] == 2
    assert len(read_topic(kafka_props, raw)) == 2 and read_topic(kafka_props, dlq) == []


@pytest.mark.slow
def test_a_file_pull_with_the_broker_down_gives_up_then_the_next_start_produces(
        run_kappa, topics, kafka_props, tmp_path):
    raw, dlq = topics
    lines = _lines(54, 50)
    path = tmp_path / "rsvps.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    log = {"KAPPA_COLLECTOR__LOG_PATH": str(tmp_path / "log" / "log.sqlite")}
    with socket.socket() as closed:  # a bound, never listening port: nobody answers there
        closed.bind(("127.0.0.1", 0))
        down = {**log, "KAPPA_KAFKA__BOOTSTRAP_SERVERS": f"127.0.0.1:{closed.getsockname()[1]}"}
        started = time.monotonic()
        stuck = run_kappa("collect", "--file", str(path), "--topic", raw, "--dlq-topic", dlq,
                          "--drain-timeout", "2", env=down, timeout=60)
    assert stuck.returncode == 1, stuck.stderr
    assert time.monotonic() - started < 30
    assert ("error: the broker acknowledged nothing for 2s; 50 record(s) stay in the log"
            in stuck.stderr.replace("\n", " "))
    empty = path.with_name("empty.jsonl")
    empty.write_bytes(b"")
    resumed = run_kappa("collect", "--file", str(empty), "--topic", raw, "--dlq-topic", dlq, env=log)
    assert resumed.returncode == 0, resumed.stderr
    assert "log drained" in resumed.stderr
    assert sorted(m.key for m in read_topic(kafka_props, raw)) == _keys(lines)

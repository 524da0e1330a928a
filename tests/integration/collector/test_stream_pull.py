"""Stream pull: a 100k JSON-lines file, stdin (the shipped sample), HTTP-chunked and WebSocket URLs."""

from __future__ import annotations

import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import count

import pytest
from websockets.sync.server import serve

from pipelines.rsvp.generator import FaultMix, RsvpGenerator
from tests.conftest import REPO
from tests.integration.collector.support import assert_reason, read_topic, silent_port, wait_for_records

SAMPLE = REPO / "data" / "sample" / "rsvps.jsonl"
SAMPLE_FAULTS = FaultMix(late=0.02, out_of_order=0.02, duplicates=0.005, malformed=0.004,
                         malformed_kinds=("invalid_json", "missing_field", "wrong_type"))


def _assert_delivered(kafka_props, raw: str, dlq: str, items) -> None:
    valid = [item for item in items if not item.malformed]
    malformed = [item for item in items if item.malformed]
    in_kafka = read_topic(kafka_props, raw)
    assert Counter(m.key for m in in_kafka) == Counter(str(item.rsvp_id).encode() for item in valid)
    assert Counter(m.value for m in in_kafka) == Counter(item.line for item in valid)
    dead = read_topic(kafka_props, dlq)
    assert Counter(m.value for m in dead) == Counter(item.line for item in malformed)
    kind_of = {item.line: item.kind for item in malformed}
    for message in dead:
        assert_reason(kind_of[message.value], message.value, message.headers["kappa.reason"].decode())


@pytest.mark.slow
def test_100k_file_pull_delivers_every_valid_line_and_rejects_the_rest(
        run_kappa, topics, kafka_props, tmp_path):
    raw, dlq = topics
    faults = FaultMix(late=0.01, out_of_order=0.01, duplicates=0.005, malformed=0.01)
    items = list(RsvpGenerator(seed=21, faults=faults).generate(100_000))
    path = tmp_path / "rsvps.jsonl"
    path.write_bytes(b"".join(item.line + b"\n" for item in items))
    env = {"KAPPA_COLLECTOR__LOG_PATH": str(tmp_path / "log" / "log.sqlite")}

    result = run_kappa("collect", "--file", str(path), "--topic", raw, "--dlq-topic", dlq, env=env)
    assert result.returncode == 0, result.stderr
    malformed = sum(1 for item in items if item.malformed)
    assert (f"pulled 100000 lines: {100_000 - malformed} accepted, {malformed} rejected"
            in result.stderr.replace("\n", " "))
    assert "log drained" in result.stderr
    _assert_delivered(kafka_props, raw, dlq, items)

    with silent_port() as port:
        status = run_kappa("collect", "status", "--json", "--url", f"http://127.0.0.1:{port}", env=env)
    assert status.returncode == 0, status.stderr
    report = json.loads(status.stdout)
    assert report["source"].startswith("log file") and "collector not running" in report["source"]
    assert report["totals"]["accepted"] == 100_000 - malformed
    assert report["totals"]["rejected"] == malformed
    assert report["gauges"]["pending"] == 0


def test_shipped_sample_pulled_from_stdin(run_kappa, topics, kafka_props, tmp_path):
    raw, dlq = topics
    items = list(RsvpGenerator(seed=42, faults=SAMPLE_FAULTS, start_ms=1_767_225_600_000).generate(2000))
    assert SAMPLE.read_bytes() == b"".join(item.line + b"\n" for item in items), "regenerate the sample"
    assert sum(1 for item in items if item.malformed) == 4
    env = {"KAPPA_COLLECTOR__LOG_PATH": str(tmp_path / "log.sqlite")}
    result = run_kappa("collect", "--stdin", "--topic", raw, "--dlq-topic", dlq, env=env,
                       input=SAMPLE.read_text())
    assert result.returncode == 0, result.stderr
    _assert_delivered(kafka_props, raw, dlq, items)


def _halves(lines: list[bytes]) -> tuple[bytes, bytes]:
    middle = len(lines) // 2
    return (b"".join(line + b"\n" for line in lines[:middle]),
            b"".join(line + b"\n" for line in lines[middle:]))


@pytest.fixture()
def chunked_server():
    """An HTTP server streaming JSON lines: the 1st connection breaks mid-stream, the 2nd
    sends the rest and stays open, later ones stay open sending nothing."""
    state = {"first": b"", "second": b"", "stop": threading.Event()}
    connections = count()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            number = next(connections)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-ndjson")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            data = state["first"] if number == 0 else state["second"] if number == 1 else b""
            for start in range(0, len(data), 4096):  # chunks split lines on purpose
                piece = data[start:start + 4096]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.flush()
            if number == 0:
                self.close_connection = True
                return
            state["stop"].wait(30)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/stream", state, connections
    state["stop"].set()
    server.shutdown()


def test_http_chunked_url_reconnects_after_a_broken_stream(
        chunked_server, start_collector, topics, kafka_props):
    url, state, connections = chunked_server
    raw, dlq = topics
    items = list(RsvpGenerator(seed=22).generate(2000))
    state["first"], state["second"] = _halves([item.line for item in items])
    collector = start_collector(raw, dlq, args=("--url", url))
    messages = wait_for_records(kafka_props, raw, len(items), timeout_s=30)
    assert Counter(m.key for m in messages) == Counter(str(item.rsvp_id).encode() for item in items)
    assert next(connections) >= 2
    code, output = collector.stop()
    assert code == 0 and "reconnecting in" in output and "log drained" in output


def test_websocket_url_reconnects_after_the_server_closes(start_collector, topics, kafka_props):
    raw, dlq = topics
    items = list(RsvpGenerator(seed=23).generate(1000))
    halves = ([item.line for item in items[:500]], [item.line for item in items[500:]])
    stop, connections = threading.Event(), count()

    def handler(socket) -> None:
        number = next(connections)
        for line in halves[number] if number < 2 else []:
            socket.send(line.decode())
        if number == 0:
            return  # returning closes the connection
        stop.wait(30)

    with serve(handler, "127.0.0.1", 0) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"ws://127.0.0.1:{server.socket.getsockname()[1]}/rsvps"
        collector = start_collector(raw, dlq, args=("--url", url))
        messages = wait_for_records(kafka_props, raw, len(items), timeout_s=30)
        code, output = collector.stop()
        stop.set()
        server.shutdown()
    assert Counter(m.key for m in messages) == Counter(str(item.rsvp_id).encode() for item in items)
    assert code == 0 and "reconnecting in" in output

"""Collector ingest rate (HTTP batches, stream pull) against a raw confluent-kafka produce.

All three runs send the same generated records to their own topic on a private embedded broker
(free port, temporary folder) and count as done only when the broker has acknowledged every
record; each run is checked by summing the topic's high watermarks. The raw baseline uses the
collector's own producer settings (idempotent, acks=all, lz4, linger 20 ms) with no log, no
validation and no HTTP, so the ratio is the price of "log durably before producing".

    .venv/bin/python bench/collector.py [--records 100000] [--batch 1000] [--clients 4]

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from jobs.collector import pull  # noqa: E402
from jobs.collector.producer import producer_config  # noqa: E402
from jobs.collector.service import Collector, Settings  # noqa: E402
from jobs.config.load import load_config  # noqa: E402
from jobs.stack.embedded import EmbeddedStack  # noqa: E402
from pipelines.rsvp.generator import RsvpGenerator  # noqa: E402
from pipelines.rsvp.schema import check_record  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1_000, help="records per HTTP POST")
    parser.add_argument("--clients", type=int, default=4, help="concurrent HTTP clients")
    args = parser.parse_args()
    lines = [item.line for item in RsvpGenerator(seed=1).generate(args.records)]
    with tempfile.TemporaryDirectory(prefix="kappa-bench-") as folder:
        root = Path(folder)
        cfg = load_config("test", environ={}, overrides={
            "kafka.bootstrap_servers": f"127.0.0.1:{free_port()}", "stack.data_dir": str(root / "stack"),
            "redis.embedded": False, "redis.port": free_port()})
        stack = EmbeddedStack(cfg)
        try:
            stack.up(progress=lambda message: None)
            props = cfg.kafka.client_config()
            admin = AdminClient({**props, "log_level": "0"})
            topics = [NewTopic(name, 3, 1) for name in ("b.raw", "b.http", "b.pull")]
            for future in admin.create_topics(topics).values():
                future.result(timeout=15)
            results = {
                "raw_produce": _raw_produce(props, "b.raw", lines),
                "collector_http": _http(cfg, root, "b.http", lines, args.batch, args.clients),
                "collector_pull_file": _pull(props, root, "b.pull", lines),
            }
            for name, topic in (("raw_produce", "b.raw"), ("collector_http", "b.http"),
                                ("collector_pull_file", "b.pull")):
                results[name]["records_in_topic"] = _count(props, topic)
        finally:
            stack.down(progress=lambda message: None)
    raw_rate = results["raw_produce"]["records_per_s"]
    print(json.dumps({
        "benchmark": "collector", "records": len(lines),
        "avg_record_bytes": round(sum(map(len, lines)) / len(lines)),
        "http_batch": args.batch, "http_clients": args.clients,
        **results,
        "http_vs_raw": round(results["collector_http"]["records_per_s"] / raw_rate, 3),
        "pull_vs_raw": round(results["collector_pull_file"]["records_per_s"] / raw_rate, 3),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "broker": "noida-db 0.2.3 (embedded)", "load_avg_1m": os.getloadavg()[0]},
    }, indent=2))


def _raw_produce(props: dict[str, str], topic: str, lines: list[bytes]) -> dict[str, float]:
    config = {k: v for k, v in producer_config(props).items() if k != "logger"}
    producer = Producer(config)
    failed: list[str] = []

    def delivered(error, message) -> None:
        if error is not None:
            failed.append(error.str())

    started = time.perf_counter()
    for index, line in enumerate(lines):
        while True:
            try:
                producer.produce(topic, line, str(index).encode(), on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    left = producer.flush(120)
    elapsed = time.perf_counter() - started
    assert not left and not failed, (left, failed[:3])
    return _rate(len(lines), elapsed)


def _http(cfg, root: Path, topic: str, lines: list[bytes], batch: int, clients: int) -> dict[str, float]:
    port = free_port()
    env = {**os.environ, "KAPPA_ENV": "test", "KAPPA_KAFKA__BOOTSTRAP_SERVERS": cfg.kafka.bootstrap_servers,
           "KAPPA_COLLECTOR__LOG_PATH": str(root / "http" / "log.sqlite"),
           "KAPPA_STACK__DATA_DIR": str(root / "stack")}
    command = [sys.executable, "-m", "jobs.cli", "collect", "--http", "--port", str(port), "--topic", topic]
    process = subprocess.Popen(command, env=env, cwd=REPO, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait(lambda: _get(f"{url}/healthz") == 200, 30)
        batches = [lines[i:i + batch] for i in range(0, len(lines), batch)]
        started = time.perf_counter()
        workers = [threading.Thread(target=_post_all, args=(url, batches[n::clients]))
                   for n in range(clients)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        accepted_at = time.perf_counter() - started
        _wait(lambda: "kappa_collector_pending 0\n" in httpx.get(f"{url}/metrics").text, 120, 0.01)
        elapsed = time.perf_counter() - started
    finally:
        process.terminate()
        process.wait(timeout=60)
    return {**_rate(len(lines), elapsed), "all_answered_s": round(accepted_at, 3)}


def _post_all(url: str, batches: list[list[bytes]]) -> None:
    with httpx.Client(timeout=60) as client:
        for lines in batches:
            response = client.post(f"{url}/rsvps", content=b"\n".join(lines),
                                   headers={"content-type": "application/x-ndjson"})
            assert response.status_code == 200, response.text[:200]


def _pull(props: dict[str, str], root: Path, topic: str, lines: list[bytes]) -> dict[str, float]:
    path = root / "rsvps.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    settings = Settings(topic=topic, dlq_topic="b.dlq", log_path=root / "pull" / "log.sqlite",
                        buffer_limit=200_000, max_record_bytes=65_536, max_retries=5,
                        host="127.0.0.1", port=0, record_check=check_record)
    collector = Collector(settings, props).start()
    try:
        started = time.perf_counter()
        pull.pull(collector, pull.file_chunks(path), "file", threading.Event())
        assert collector.wait_drained(120)
        elapsed = time.perf_counter() - started
    finally:
        collector.stop()
    return _rate(len(lines), elapsed)


def _count(props: dict[str, str], topic: str) -> int:
    consumer = Consumer({**props, "group.id": "bench", "receive.message.max.bytes": 1_000_000_000})
    try:
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(3))
    finally:
        consumer.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _rate(records: int, elapsed: float) -> dict[str, float]:
    return {"seconds": round(elapsed, 3), "records_per_s": round(records / elapsed)}


def _get(url: str) -> int:
    try:
        return httpx.get(url, timeout=1).status_code
    except httpx.HTTPError:
        return 0


def _wait(condition, timeout_s: float, interval_s: float = 0.1) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark step timed out")
        time.sleep(interval_s)


if __name__ == "__main__":
    main()

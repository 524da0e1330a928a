"""Benchmark of the access tier: N concurrent SSE clients on loopback; prints JSON.

A private embedded stack and `kappa serve` (a subprocess) are started; records are produced to
the analyzed topic at --rate per second for --seconds, each with its Kafka timestamp (CreateTime)
also written in the JSON; every client counts the events it receives and the delivery latency
(arrival wall clock minus the Kafka timestamp). Clients run on asyncio in this process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from jobs.config.load import load_config  # noqa: E402
from jobs.stack.embedded import EmbeddedStack  # noqa: E402

MARK = b'"kafka_timestamp_ms": '


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def client(port: int, stop: asyncio.Event, latencies: list[float], counts: list[int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /api/v1/stream?stream=analyzed HTTP/1.1\r\nHost: bench\r\n\r\n")
    await writer.drain()
    received = 0
    while not stop.is_set():
        try:
            line = await asyncio.wait_for(reader.readline(), 1.0)
        except TimeoutError:
            continue
        if not line:
            break
        at = line.find(MARK)
        if line.startswith(b"data: ") and at > 0:
            end = line.find(b",", at)
            latencies.append(time.time() * 1000 - int(line[at + len(MARK):end]))
            received += 1
    counts.append(received)
    writer.close()


def produce(props: dict, topic: str, rate: int, seconds: float) -> int:
    producer = Producer({**props, "linger.ms": 5})
    sent, began = 0, time.monotonic()
    while time.monotonic() - began < seconds:
        due = int((time.monotonic() - began) * rate)
        while sent < due:
            now = int(time.time() * 1000)
            body = {"schema_version": 1, "rsvp_id": sent, "kafka_timestamp_ms": now, "city": "Oslo",
                    "topics": ["Salsa", "Jazz"], "event_id": f"e{sent % 50}", "pad": "x" * 400}
            producer.produce(topic, json.dumps(body).encode(), timestamp=now, partition=sent % 3)
            sent += 1
        producer.poll(0)
        time.sleep(0.005)
    producer.flush(15)
    return sent


async def run_round(port: int, props: dict, topic: str, clients: int, rate: int, seconds: float) -> dict:
    stop = asyncio.Event()
    latencies: list[float] = []
    counts: list[int] = []
    tasks = [asyncio.create_task(client(port, stop, latencies, counts)) for _ in range(clients)]
    await asyncio.sleep(2 + clients / 200)  # connect
    began = time.monotonic()
    sent = await asyncio.to_thread(produce, props, topic, rate, seconds)
    await asyncio.sleep(2)  # drain
    elapsed = time.monotonic() - began
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    lat = sorted(latencies)
    return {"clients": clients, "produced": sent, "rate_per_s": rate, "delivered": len(lat),
            "expected": sent * clients, "events_per_s": round(len(lat) / elapsed),
            "latency_ms_p50": round(statistics.median(lat), 1) if lat else None,
            "latency_ms_p99": round(lat[int(len(lat) * 0.99) - 1], 1) if lat else None,
            "min_client_events": min(counts) if counts else 0}


@contextlib.contextmanager
def platform(max_clients: int = 1000) -> Iterator[tuple[int, dict, subprocess.Popen, int, dict]]:
    """A private embedded stack (topics b.analyzed, b.summaries) and `kappa serve` on it.

    Yields the service's port, the Kafka client properties, the serve process, the pid of the
    broker's process group and the KAPPA_* variables that point a `kappa` command at the stack.
    """
    with tempfile.TemporaryDirectory(prefix="kappa-bench-") as folder:
        root = Path(folder)
        env = {"KAPPA_KAFKA__BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}",
               "KAPPA_REDIS__PORT": str(free_port()), "KAPPA_STACK__DATA_DIR": str(root / "stack")}
        cfg = load_config("test", environ=env)
        stack = EmbeddedStack(cfg)
        server = None
        try:
            stack.up(progress=lambda message: None)
            props = cfg.kafka.client_config()
            admin = AdminClient({**props, "log_level": "0"})
            new = [NewTopic(t, 3, 1) for t in ("b.analyzed", "b.summaries")]
            for future in admin.create_topics(new).values():
                future.result(timeout=15)
            port = free_port()
            server = subprocess.Popen(
                [sys.executable, "-m", "jobs.cli", "serve", "--port", str(port)], cwd=REPO,
                env={**os.environ, **env, "KAPPA_ENV": "test", "KAPPA_SERVE__ANALYZED_TOPIC": "b.analyzed",
                     "KAPPA_SERVE__SUMMARIES_TOPIC": "b.summaries",
                     "KAPPA_SERVE__MAX_CLIENTS": str(max_clients)},
                stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 30
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            broker = int((stack.data_dir / "kafka.pid").read_text().split()[0])
            yield port, props, server, broker, {**env, "KAPPA_ENV": "test",
                                                 "KAPPA_COLLECTOR__LOG_PATH": str(root / "collector.sqlite")}
        finally:
            if server is not None:
                server.terminate()
                server.wait(15)
            stack.down(progress=lambda message: None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="10,100,500")
    parser.add_argument("--rate", type=int, default=200, help="records produced per second")
    parser.add_argument("--seconds", type=float, default=8)
    args = parser.parse_args()
    with platform() as (port, props, _, _, _):
        rounds = [asyncio.run(run_round(port, props, "b.analyzed", int(n), args.rate, args.seconds))
                  for n in args.clients.split(",")]
        print(json.dumps({"bench": "serve_sse", "cpu_cores": os.cpu_count(), "record_bytes": 520,
                          "seconds": args.seconds, "rounds": rounds}, indent=1))


if __name__ == "__main__":
    main()

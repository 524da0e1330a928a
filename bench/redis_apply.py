"""The fenced Redis apply at high key cardinality: per-batch time, the longest script, reader stalls.

A batch of ``--events`` distinct events (every RSVP its own event, as on a real event site; cities
and topics skewed as the generator makes them) is summed into increments as the job's tasks do and
applied through ``RedisSummarySink`` to a redis-server this script starts on a free loopback port,
``--batches`` times, once per chunk size (``--chunks``; 0 = one script call per batch, the
unchunked baseline). Meanwhile a reader thread sends ``HGETALL`` of one city window every 2 ms and
records its latency: what a ``kappa serve`` REST client waits when its read lands behind a script.
Redis' own ``SLOWLOG`` gives the longest command. Redis persists as ``kappa stack up`` runs it (an
append-only file, fsync every second; ``--persistence none`` for none). Prints JSON.

    .venv/bin/python bench/redis_apply.py --events 100000 --batches 3 --chunks 0,20000,5000
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import redis
from streaming_support import exit_on_sigterm

from jobs.config.load import load_config
from jobs.stack.embedded import REDIS_PERSISTENCE, redis_server_binary
from jobs.streaming.aggregates import increments_table
from jobs.streaming.redis_script import FencedApply
from jobs.streaming.redis_sink import RedisSummarySink
from pipelines.rsvp.aggregates import windows_from
from pipelines.rsvp.generator import RsvpGenerator
from pipelines.rsvp.records import Increments, analyzed
from pipelines.rsvp.validate import Rules, parse

RAW = "bench.raw"
SLOWLOG_US = 1000
PERSISTENCE = {"aof": list(REDIS_PERSISTENCE), "none": ["--appendonly", "no"]}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def increments(events: int, seed: int, windows) -> pa.Table:
    """The summed increments of one batch whose every record is its own event, as a table (the
    job's driver gets them so from its tasks: jobs/streaming/task_output.py)."""
    rules, inc = Rules(min_event_ms=0, future_skew_ms=10**12, max_record_bytes=1 << 20), Increments(windows)
    for i, item in enumerate(RsvpGenerator(seed=seed).generate(events)):
        record = json.loads(item.line)
        record["event"]["event_id"] = f"ev{seed}-{i}"
        rsvp, reason = parse(json.dumps(record).encode(), None, rules)
        if reason is None:
            inc.add(analyzed(rsvp, RAW, 0, i, None, late=False))
    inc.take_members()  # the tasks add members themselves (PFADD, outside the fence)
    return increments_table(inc.rows())


def read_loop(port: int, key: str, stop, out) -> None:
    """HGETALL of one key every 2 ms until ``stop``; the latencies (ms) and refusals to ``out``.

    A process of its own: a thread of this one would wait for the apply's Python work (the GIL)
    and measure that instead of Redis.
    """
    client, latencies, refused = redis.Redis(port=port), [], 0
    while not stop.is_set():
        began = time.perf_counter()
        try:
            client.hgetall(key)
        except redis.ResponseError:  # BUSY: a script ran longer than Redis' lua-time-limit
            refused += 1
        latencies.append((time.perf_counter() - began) * 1000)
        time.sleep(0.002)
    out.put((latencies, refused))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2) if ordered else 0.0


def run_chunk_size(cfg, port: int, batches: list[pa.Table], chunk_args: int) -> dict[str, Any]:
    prefix = f"bench{chunk_args}"
    s = cfg.streaming.model_copy(update={"redis_prefix": prefix})
    sink = RedisSummarySink(cfg.model_copy(update={"redis": cfg.redis.model_copy(update={"port": port}),
                                                   "streaming": s}))
    sink._apply = FencedApply(sink.client, sink.keys.fence, chunk_args or 10**12)
    admin = redis.Redis(port=port)
    admin.config_set("slowlog-log-slower-than", SLOWLOG_US)  # 0 would log every command inside the
    admin.config_set("slowlog-max-len", 100_000)            # scripts too, and slow Redis down with it
    admin.slowlog_reset()
    admin.config_resetstat()
    stop, out = multiprocessing.Event(), multiprocessing.Queue()
    reader = multiprocessing.Process(target=read_loop, args=(port, f"{prefix}:totals", stop, out))
    reader.start()
    times, fence, ops = [], {}, 0
    for batch_id, rows in enumerate(batches):
        new = {(RAW, 0): (batch_id + 1) * 1000}
        began = time.perf_counter()
        sink.apply(rows, fence, new, {"batch_id": batch_id, "query": "bench", "totals": {"input": len(rows)}})
        times.append(round(time.perf_counter() - began, 3))
        fence = new
        ops += rows.num_rows
    stop.set()
    latencies, refused = out.get(timeout=60)
    reader.join()
    slow = admin.slowlog_get(-1)
    longest = max((entry["duration"] for entry in slow), default=0) / 1000
    stats = admin.info("commandstats")
    calls = stats.get("cmdstat_evalsha", {}).get("calls", 0)
    script_s = stats.get("cmdstat_evalsha", {}).get("usec", 0) / 1e6
    sink.close()
    return {"chunk_args": chunk_args or "one call per batch", "apply_s": times,
            "increments_per_s": round(ops / sum(times)), "increment_rows_per_batch": ops // len(batches),
            "script_calls": calls, "script_s_in_redis": round(script_s, 3),
            "longest_command_ms": round(longest, 1) if slow else f"< {SLOWLOG_US / 1000}",
            "commands_over_1ms": len(slow),
            "reader_ms": {"p50": percentile(latencies, 0.5), "p99": percentile(latencies, 0.99),
                          "max": round(max(latencies, default=0), 1), "reads": len(latencies),
                          "refused_busy": refused}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--chunks", default="0,20000,5000", help="chunk sizes in arguments; 0 = unchunked")
    parser.add_argument("--persistence", choices=sorted(PERSISTENCE), default="aof",
                        help="aof: as the stack's Redis (default); none: no append-only file")
    args = parser.parse_args()
    exit_on_sigterm()
    cfg = load_config()
    windows = windows_from(cfg)
    batches = [increments(args.events, seed, windows) for seed in range(args.batches)]
    port = free_port()
    folder = tempfile.mkdtemp(prefix="bench-redis-")
    server = subprocess.Popen([redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1",
                               "--save", "", *PERSISTENCE[args.persistence], "--dir", folder],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis(port=port).ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        results = [run_chunk_size(cfg, port, batches, int(size)) for size in args.chunks.split(",")]
    finally:
        server.terminate()
        server.wait(timeout=10)
        shutil.rmtree(folder, ignore_errors=True)
    print(json.dumps({"benchmark": "redis_apply", "events_per_batch": args.events, "batches": args.batches,
                      "persistence": args.persistence,
                      "redis": str(Path(redis_server_binary()).name), "results": results}, indent=2))


if __name__ == "__main__":
    main()

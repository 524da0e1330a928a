"""A reprocess beside a live job: how fast version 2 is rebuilt, and what it costs version 1.

As an operator runs it (docs/runbooks/reprocess.md), on the configured stack (``kappa stack up``
first; ``KAPPA_*`` and conf/ as every command), in a namespace of its own (source and output
topics, Redis prefix, query name, views topic):

1. ``--records`` generated RSVPs (the end-to-end tests' fault mix; ``--high-cardinality``: every
   RSVP its own event) go to a fresh source topic, and version 1's live job
   (``kappa stream run --mode live``) reads them all: the history a platform holds.
2. A paced producer sends ``--rate`` RSVPs/s to the same topic from then on, and a poller reads
   version 1's Redis fence every 10 ms: per event, the time from its send to the first poll that
   shows it applied (its summaries visible in Redis). ``--baseline`` seconds of that come first:
   the live job's latency alone, the baseline of the run.
3. ``kappa reprocess start --version 2`` (process start to exit timed), then version 2's metrics
   are polled until it is within ``--max-behind`` offsets of the log's end: the reprocess time
   and rate (records of the source at its start / seconds from the command to caught up), and
   version 1's latency during it.

Both jobs are stopped at the end (SIGTERM, by pid). Prints JSON.

    kappa stack up && SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python bench/reprocess.py --records 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))

from streaming_cpu import settle
from streaming_latency import _paced, _visible, fence_offsets
from streaming_support import PARTITIONS, exit_on_sigterm, new_topic, percentiles, produce

from jobs.config.load import PROJECT_ROOT, load_config
from jobs.reprocess.core import job_pid, version_status
from jobs.views.versions import version_config


class FencePoller(threading.Thread):
    """Version 1's fence every 10 ms: (time, next offset per partition of the source)."""

    def __init__(self, client: Any, fence_key: str, source: str) -> None:
        super().__init__(daemon=True)
        self.client, self.fence_key, self.source = client, fence_key, source
        self.samples: list[tuple[float, dict[int, int]]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            raw = self.client.hgetall(self.fence_key)
            now = time.time()
            self.samples.append((now, fence_offsets(raw, self.source)))
            time.sleep(0.01)


def wait_caught_up(cfg, version: int, max_behind: int, timeout: float) -> float:
    """Seconds until the version's last batch leaves it at most ``max_behind`` behind the log."""
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        row = version_status(cfg, version, "building")
        if row["offsets_behind_latest"] is not None and row["offsets_behind_latest"] <= max_behind \
                and row["last_batch"] is not None and row["last_batch"] > 0:
            return time.monotonic() - began
        time.sleep(0.5)
    raise TimeoutError(f"version {version} did not catch up in {timeout} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rate", type=float, default=1000.0, help="live RSVPs/s during the run")
    parser.add_argument("--baseline", type=float, default=30.0, help="seconds of live latency alone")
    parser.add_argument("--max-behind", type=int, default=5000, help="offsets behind = caught up")
    parser.add_argument("--high-cardinality", action="store_true")
    args = parser.parse_args()
    exit_on_sigterm()
    base = load_config()
    props = base.kafka.client_config()
    name = uuid.uuid4().hex[:8]
    source = new_topic(props, PARTITIONS)
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
           "KAPPA_STREAMING__SOURCE_TOPIC": source,
           "KAPPA_STREAMING__ANALYZED_TOPIC": f"bench.{name}.analyzed",
           "KAPPA_STREAMING__SUMMARIES_TOPIC": f"bench.{name}.summaries",
           "KAPPA_STREAMING__DLQ_TOPIC": f"bench.{name}.dlq",
           "KAPPA_STREAMING__VIEWS_TOPIC": new_topic(props, 1),
           "KAPPA_STREAMING__REDIS_PREFIX": f"bench{name}", "KAPPA_STREAMING__QUERY_NAME": f"bench-{name}"}
    cfg = load_config(environ=env)
    out: dict[str, Any] = {"benchmark": "reprocess", "records": args.records, "rate_per_s": args.rate,
                           "cores": os.cpu_count(), "spark_master": cfg.spark.master,
                           "high_cardinality": args.high_cardinality}
    out["produce_s"] = round(produce(props, source, args.records, seed=11,
                                     distinct_events=args.high_cardinality), 1)
    settle()
    log = (Path(cfg.lake.checkpoint_root).parent / f"bench-reprocess-{name}.log").open("ab")
    live = subprocess.Popen([sys.executable, "-m", "jobs.cli", "stream", "run", "--mode", "live"], env=env,
                            cwd=PROJECT_ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    pids: list[int] = [live.pid]
    client = redis.Redis(**cfg.redis.client_kwargs(), decode_responses=True)
    try:
        out["v1_history_s"] = round(wait_caught_up(cfg, 1, args.max_behind, 1800), 1)
        poller = FencePoller(client, f"{cfg.streaming.redis_prefix}:fence:summaries", source)
        poller.start()
        sent: list[tuple[int, int, float]] = []
        paced_stop = threading.Event()
        rates = threading.Thread(target=_paced, daemon=True,
                                 args=(props, source, args.rate, float("inf"), paced_stop, sent))
        rates.start()
        time.sleep(args.baseline)
        began = time.time()
        started = subprocess.run([sys.executable, "-m", "jobs.cli", "reprocess", "start", "--version", "2",
                                  "--json"], env=env, cwd=PROJECT_ROOT, capture_output=True, text=True,
                                 check=True)
        out["reprocess_start_command_s"] = round(time.time() - began, 1)
        v2 = version_config(cfg, 2)
        pids.append(json.loads(started.stdout.strip().splitlines()[-1])["pid"])
        caught = wait_caught_up(cfg, 2, args.max_behind, 3600)
        ended = time.time()
        reprocess_s = ended - began
        paced_stop.set()
        rates.join(60)
        time.sleep(5)
        poller.stop.set()
        poller.join()
        first = min(t for _, _, t in sent) + 5
        before = [(p, o, t) for p, o, t in sent if first <= t < began]
        during = [(p, o, t) for p, o, t in sent if began <= t < ended]
        out["reprocess"] = {"seconds": round(reprocess_s, 1), "caught_up_wait_s": round(caught, 1),
                            "records_per_s": round(args.records / reprocess_s),
                            "v2_status": version_status(cfg, 2, "building")}
        out["v1_latency_before"] = percentiles(_visible(before, poller.samples))
        out["v1_latency_during"] = percentiles(_visible(during, poller.samples))
        out["v2_redis_prefix"] = v2.streaming.redis_prefix
    finally:
        for pid in [*pids, job_pid(version_config(cfg, 2)) or 0]:
            if pid:
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        live.wait(120)
        client.close()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

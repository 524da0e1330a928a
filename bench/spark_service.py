"""Benchmark: a replay as users run it, with the Spark service up (attached) and cold.

Starts a private embedded Kafka and Redis in a temporary folder, creates the topics of conf/,
produces ``--records`` generated RSVPs to rsvps.raw, starts the Spark service (``kappa spark
up``, timed), then measures per round, alternating which goes first, each from process start
to process exit (a new Python process every time, as a user or an Airflow task runs it):

* ``cli_cold`` / ``cli_service``: ``kappa stream run --mode replay --from earliest --to latest
  --fresh`` (Kafka and Redis sinks), with ``KAPPA_SPARK_SERVICE=off`` (a cold local Spark in the
  process) and attached to the service;
* ``task_cold`` / ``task_service``: the function the ``backfill`` DAG's task calls
  (``jobs.orchestration.tasks.backfill_offsets``) over the whole topic, Kafka and Redis sinks.

Every run has its own Redis prefix and checkpoint root, so none is a no-op after another.
``outlived_s``: how long any process of the run's process group (the JVM, Python daemons)
was still alive after the run's process exited. Prints one JSON object. Never run as a test.

    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python bench/spark_service.py --records 10000 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from statistics import median
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the bench's sibling modules

from streaming_cpu import load_avg
from streaming_support import produce

from jobs.config.load import PROJECT_ROOT, load_config
from jobs.host.processes import session_alive

KAPPA = [sys.executable, "-m", "jobs.cli"]
TASK = ("import json, logging, sys; from jobs.orchestration.tasks import backfill_offsets; "
        "logging.basicConfig(level=logging.INFO, format='%(asctime)s %(name)s %(message)s'); "
        "end = json.loads(sys.argv[1]); "
        "backfill_offsets({p: 0 for p in end}, end, ['kafka', 'redis'], False)")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its JSON result."""
    args = _parse(argv)
    with tempfile.TemporaryDirectory(prefix="kappa-bench-spark-") as folder:
        env = _env(Path(folder))
        result = _run(args, env, Path(folder))
    print(json.dumps(result, indent=2))
    return 0


def _run(args: argparse.Namespace, env: dict[str, str], folder: Path) -> dict[str, Any]:
    from jobs.kafka.topics import apply_topics, list_topics
    from jobs.stack.embedded import EmbeddedStack

    cfg = load_config(environ=env)
    stack = EmbeddedStack(cfg)
    stack.up(progress=lambda message: None)
    try:
        apply_topics(cfg.kafka, cfg.topics, False)
        source = cfg.streaming.source_topic
        produce(cfg.kafka.client_config(), source, args.records, seed=1)
        [info] = list_topics(cfg.kafka, [source])
        end = {str(p.partition): p.latest for p in info.partitions}
        started = time.monotonic()
        _check(subprocess.run([*KAPPA, "spark", "up"], env=env, cwd=PROJECT_ROOT, capture_output=True,
                              text=True, check=False))
        service_start_s = time.monotonic() - started
        runs: dict[str, list[dict[str, float]]] = {}
        for round_ in range(args.rounds):
            for kind in _order(round_):
                runs.setdefault(kind, []).append(_measure(kind, env, folder, end))
                print(f"round {round_} {kind}: {runs[kind][-1]}", file=sys.stderr)
        subprocess.run([*KAPPA, "spark", "down"], env=env, cwd=PROJECT_ROOT, capture_output=True,
                       check=False)
    finally:
        stack.down(progress=lambda message: None)
    return {"records": args.records, "rounds": args.rounds, "service_start_s": round(service_start_s, 2),
            "load_avg_end": load_avg(), "cpus": os.cpu_count(),
            "median_wall_s": {kind: median(r["wall_s"] for r in items) for kind, items in runs.items()},
            "events_per_s": {kind: round(args.records / median(r["wall_s"] for r in items))
                             for kind, items in runs.items()},
            "runs": runs}


def _order(round_: int) -> list[str]:
    kinds = ["cli_cold", "cli_service", "task_cold", "task_service"]
    return kinds if round_ % 2 == 0 else [kinds[1], kinds[0], kinds[3], kinds[2]]


def _measure(kind: str, env: dict[str, str], folder: Path, end: dict[str, int]) -> dict[str, float]:
    tag = uuid.uuid4().hex[:8]
    run_env = {**env, "KAPPA_STREAMING__REDIS_PREFIX": f"b{tag}",
               "KAPPA_LAKE__CHECKPOINT_ROOT": str(folder / f"checkpoints-{tag}")}
    if kind.endswith("_cold"):
        run_env["KAPPA_SPARK_SERVICE"] = "off"
    if kind.startswith("cli"):
        command = [*KAPPA, "stream", "run", "--mode", "replay", "--from", "earliest", "--to", "latest",
                   "--fresh", "--json"]
    else:
        command = [sys.executable, "-c", TASK, json.dumps(end)]
    out_path, err_path = folder / f"{tag}.out", folder / f"{tag}.err"
    started = time.monotonic()
    with out_path.open("w") as stdout, err_path.open("w") as stderr:  # files: a JVM holding an
        # inherited pipe open would make the wait for the pipe's end a wait for the JVM
        proc = subprocess.Popen(command, env=run_env, cwd=PROJECT_ROOT, stdout=stdout, stderr=stderr,
                                start_new_session=True)
        code = proc.wait(timeout=1200)
    wall = time.monotonic() - started
    err = err_path.read_text()
    _check(subprocess.CompletedProcess(command, code, out_path.read_text(), err))
    while session_alive(proc.pid) and time.monotonic() - started - wall < 60:
        time.sleep(0.02)
    attached = "attached to the Spark service" in err
    if attached != kind.endswith("_service"):
        raise RuntimeError(f"{kind}: attached={attached}; stderr: {err[-2000:]}")
    return {"wall_s": round(wall, 2), "outlived_s": round(time.monotonic() - started - wall, 2)}



def _check(result: subprocess.CompletedProcess) -> None:
    if result.returncode != 0:
        raise RuntimeError(f"{result.args} exited {result.returncode}: {result.stderr[-3000:]}")


def _env(folder: Path) -> dict[str, str]:
    def free_port() -> int:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]

    base = {key: value for key, value in os.environ.items() if not key.startswith("KAPPA_")}
    return base | {"KAPPA_ENV": "local", "KAPPA_KAFKA__BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}",
                   "KAPPA_REDIS__PORT": str(free_port()), "KAPPA_STACK__DATA_DIR": str(folder / "stack"),
                   "KAPPA_LAKE__ROOT": str(folder / "lake"),
                   "KAPPA_COLLECTOR__LOG_PATH": str(folder / "collector" / "log.sqlite"),
                   "KAPPA_SPARK__UI_ENABLED": "false", "SPARK_LOCAL_IP": "127.0.0.1",
                   "PYTHONPATH": str(PROJECT_ROOT)}


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())

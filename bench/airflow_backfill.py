"""An Airflow backfill as a data engineer submits it: the replay DAG, one task per hour, timed.

The configured stack (``kappa stack up``) and, for the warm figure, ``kappa spark up``. The
benchmark produces ``--per-hour`` generated RSVPs per hour for ``--hours`` hours ending an hour
ago (record timestamps spread over each hour) to a topic of its own, starts a local Airflow
(``kappa airflow up``) whose tasks read that topic and write outputs of their own (topics, Redis
prefix, and a lake of their own whose ``bronze.rsvps_raw`` the ``delta`` sink loads), and submits
``kappa airflow backfill replay --from ... --to ... --conf '{"sinks": [...]}' --unpause --wait``
over those hours. Per run: the task's duration as Airflow records it (start to end of
``replay_interval``, sinks included), the wait before it started, what the task itself timed
(the replay, the stream sinks, the delta load), the records it replayed and loaded (checked
against what was produced in its hour). ``--cold`` starts Airflow with
``KAPPA_SPARK_SERVICE=off``: every task starts its own Spark. Airflow is stopped, the topics,
Redis keys and lake are deleted at the end. Prints JSON.

    kappa stack up && kappa spark up && .venv/bin/python bench/airflow_backfill.py --per-hour 10000
    ... bench/airflow_backfill.py --per-hour 10000 --sinks delta          # the loader alone
    ... bench/airflow_backfill.py --per-hour 10000 --sinks kafka,redis,delta
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from confluent_kafka import Producer
from replay_cli import forget
from streaming_support import FAULTS, PARTITIONS, exit_on_sigterm, new_topic

from jobs.collector.producer import producer_config
from jobs.config.load import PROJECT_ROOT, load_config
from pipelines.rsvp.generator import RsvpGenerator


def kappa(env: dict[str, str], *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "jobs.cli", *args], env=env, capture_output=True,
                            text=True, timeout=timeout, cwd=PROJECT_ROOT, check=False)
    if result.returncode:
        raise RuntimeError(f"kappa {' '.join(args)} exited {result.returncode}: {result.stderr[-2000:]}")
    return result


def produce_hours(props: dict[str, str], topic: str, start: datetime, hours: int, per_hour: int) -> list[int]:
    """``per_hour`` RSVPs in each hour from ``start``, timestamps and event times spread over it."""
    producer = Producer({**producer_config(props), "queue.buffering.max.messages": 1_000_000})
    start_ms, step_ms = int(start.timestamp() * 1000), 3_600_000 / per_hour
    lines = RsvpGenerator(seed=23, faults=FAULTS, start_ms=start_ms,  # event times over the hour too
                          events_per_second=per_hour / 3600).generate(hours * per_hour)
    for index, item in enumerate(lines):
        producer.produce(topic, item.line, str(index).encode(), index % PARTITIONS,
                         timestamp=start_ms + int(index * step_ms))
        if index % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("could not flush the input in 120 s")
    return [per_hour] * hours


def api_client(status: dict[str, Any]) -> httpx.Client:
    token = httpx.post(f"{status['url']}/auth/token", timeout=30,
                       json={"username": status["user"], "password": status["password"]})
    token.raise_for_status()
    return httpx.Client(base_url=status["url"], timeout=30,
                        headers={"Authorization": f"Bearer {token.json()['access_token']}"})


def wait_for_dag(api: httpx.Client, dag_id: str, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if api.get(f"/api/v2/dags/{dag_id}").status_code == 200:
            return
        time.sleep(2)
    raise RuntimeError(f"DAG {dag_id} not listed after {timeout_s:.0f} s")


def runs_of(api: httpx.Client, backfill: dict[str, Any]) -> list[dict[str, Any]]:
    """Each run of this backfill: its task's own times in Airflow, and the replay report it returned."""
    ids = {run["run_id"] for run in backfill["runs"]}  # the instance keeps earlier backfills' runs
    runs = api.get("/api/v2/dags/replay/dagRuns", params={"run_type": "backfill", "limit": 1000}).json()
    out = []
    ours = [run for run in runs["dag_runs"] if run["dag_run_id"] in ids]
    for run in sorted(ours, key=lambda r: r["logical_date"]):
        path = f"/api/v2/dags/replay/dagRuns/{run['dag_run_id']}/taskInstances/replay_interval"
        ti = api.get(path).json()
        xcom = api.get(f"{path}/xcomEntries/return_value").json().get("value") or {}
        report = xcom if isinstance(xcom, dict) else json.loads(xcom)
        stream, loads = report.get("stream") or {}, report.get("delta") or []
        started, ended = (datetime.fromisoformat(ti[k]) for k in ("start_date", "end_date"))
        queued = datetime.fromisoformat(ti["queued_when"]) if ti.get("queued_when") else started
        out.append({"logical_date": run["logical_date"], "state": ti["state"],
                    "task_s": round((ended - started).total_seconds(), 2),
                    "queued_s": round((started - queued).total_seconds(), 2),
                    "replay_s": report.get("duration_s"),  # the task's own work, after pre-flight
                    "records_read": stream.get("records_read"), "stream_s": stream.get("duration_s"),
                    "rows_loaded": (sum(load["rows"] + load["quarantined"] for load in loads)
                                    if loads else None),
                    "load_s": round(sum(load["duration_s"] for load in loads), 2) if loads else None,
                    "write_path": sorted({load.get("write_path") for load in loads}) or None,
                    "published": report.get("published"), "backfill_id": backfill["backfill_id"]})
    return out


def check(runs: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """Every run succeeded, replayed its hour and loaded it (the first one the backlog too)."""
    sinks = set(args.sinks.split(","))
    assert len(runs) == args.hours, runs
    for index, run in enumerate(runs):
        loads = args.per_hour * (1 + args.backlog_hours * (index == 0))
        assert run["state"] == "success", run
        assert sinks <= {"delta"} or run["records_read"] == args.per_hour, run
        assert "delta" not in sinks or run["rows_loaded"] == loads, (run, loads)  # loaded or quarantined


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-hour", type=int, default=10_000)
    parser.add_argument("--hours", type=int, default=2)
    parser.add_argument("--sinks", default="kafka,redis", help="the replay DAG's sinks param")
    parser.add_argument("--cold", action="store_true", help="Airflow's tasks start their own Spark")
    parser.add_argument("--backlog-hours", type=int, default=0,
                        help="hours of input before the backfilled ones, not in the lake yet: the "
                             "first task's delta load loads them too")
    args = parser.parse_args()
    exit_on_sigterm()
    cfg = load_config()
    props = cfg.kafka.client_config()
    name = uuid.uuid4().hex[:8]
    source = new_topic(props, PARTITIONS)
    outputs = [new_topic(props, PARTITIONS), new_topic(props, PARTITIONS), new_topic(props, 1)]
    lake = tempfile.mkdtemp(prefix="kappa-bench-lake-")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "KAPPA_AIRFLOW__PORT": "0",
           "KAPPA_AIRFLOW__START_TIMEOUT_S": "300", "KAPPA_STREAMING__SOURCE_TOPIC": source,
           "KAPPA_STREAMING__ANALYZED_TOPIC": outputs[0], "KAPPA_STREAMING__SUMMARIES_TOPIC": outputs[1],
           "KAPPA_STREAMING__DLQ_TOPIC": outputs[2], "KAPPA_STREAMING__REDIS_PREFIX": f"bench{name}",
           "KAPPA_STREAMING__QUERY_NAME": f"bench-{name}", "KAPPA_LAKE__ROOT": lake,
           "KAPPA_LOADER__TABLES": json.dumps({"bronze.rsvps_raw": {"topic": source,
                                                                    "quality_policy": "quarantine"}})}
    if args.cold:
        env["KAPPA_SPARK_SERVICE"] = "off"
    now_hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    start = now_hour - timedelta(hours=args.hours + 1)
    produce_hours(props, source, start - timedelta(hours=args.backlog_hours),
                  args.backlog_hours + args.hours, args.per_hour)
    began = time.monotonic()
    kappa(env, "airflow", "up")
    airflow_up_s = round(time.monotonic() - began, 1)
    try:
        status = json.loads(kappa(env, "airflow", "status", "--json").stdout)
        api = api_client(status)
        wait_for_dag(api, "replay")
        last = start + timedelta(hours=args.hours - 1)  # a run's logical date is its interval's start
        conf = json.dumps({"sinks": args.sinks.split(","), "dry_run": False})
        began = time.monotonic()
        submitted = json.loads(kappa(env, "airflow", "backfill", "replay", "--from", start.isoformat(),
                                     "--to", last.isoformat(), "--conf", conf, "--unpause", "--wait",
                                     "--json").stdout)
        backfill_s = round(time.monotonic() - began, 1)
        runs = runs_of(api, submitted)
        api.close()
    finally:
        kappa(env, "airflow", "down", timeout=300)
        forget(props, [source, *outputs], f"bench{name}")
        shutil.rmtree(lake, ignore_errors=True)
    check(runs, args)
    print(json.dumps({"benchmark": "airflow_backfill", "per_hour": args.per_hour, "hours": args.hours,
                      "backlog_hours": args.backlog_hours, "sinks": args.sinks,
                      "spark": "cold (own Spark per task)" if args.cold else "the Spark service",
                      "airflow_up_s": airflow_up_s,
                      "backfill_submit_to_done_s": backfill_s, "runs": runs,
                      "task_s_max": max(run["task_s"] for run in runs)}, indent=2))


if __name__ == "__main__":
    main()

"""Benchmark: ``kappa load``'s driver and executor write paths end to end, at several sizes.

Starts an embedded broker, produces the largest size of rsvps.raw-shaped records (~260 bytes of
JSON) once to a 3-partition topic, then for each size and path loads ``bronze.rsvps_raw`` (policy
quarantine, the whole suite) from offset 0 up to that many records into a fresh lake with
``run_load``, in a fresh process each (clean peak memory): ``loader.write_path`` forced, and
``loader.driver_path_max_rows`` = the size and no byte budget, so the driver path takes the batch
in one piece.
Per run: seconds, rows/s, the driver's peak RSS (its Python process and its JVM: in
``local[2]`` the JVM also hosts the executors' tasks) and the executors' Python workers' peak,
and the load average before and after. Reached through ``bench/loader.py --paths``.

``--table silver.rsvps`` measures the merge instead: rsvps.analyzed-shaped records (~560 bytes)
where record ``i`` with ``i % 10 == 5`` re-sends the rsvp id of record ``i // 2`` with a later
event time (:func:`analyzed_ids`), so any prefix of the topic has 10 % updates; each run loads
the first half of its size (into an empty table), then the second half (a merge in which 10 % of
the rows replace stored ones), and reports both loads' seconds and the table's row count.
"""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PARTITIONS = 3
PATHS = ("driver", "executors")
RUN_TIMEOUT_S = 600
UNBOUNDED_BYTES = 1 << 50  # loader.driver_path_max_bytes: the size alone decides the batch


def main(sizes: str | None, child: str | None, table: str = "bronze.rsvps_raw") -> int:
    """``--paths``: run every size and path and print the JSON; ``--child``: one run."""
    if child:
        print(json.dumps(_one_run(json.loads(child))))
        return 0
    counts = sorted(int(size) for size in (sizes or "").split(",") if size.strip())
    with tempfile.TemporaryDirectory(prefix="kappa-bench-paths-") as folder:
        result = _compare(counts, Path(folder), table)
    extra = "" if table == "bronze.rsvps_raw" else f" --table {table}"
    result["command"] = f"SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python bench/loader.py --paths {sizes}{extra}"
    print(json.dumps(result, indent=2))
    return 0


def _compare(sizes: list[int], folder: Path, table: str) -> dict[str, Any]:
    from jobs.config.load import load_config
    from jobs.stack.embedded import EmbeddedStack

    overrides: dict[str, Any] = {
        "redis.embedded": False, "spark.ui_enabled": False, "spark.master": "local[2]",
        "stack.data_dir": str(folder / "stack"), "kafka.bootstrap_servers": f"127.0.0.1:{_free_port()}"}
    cfg = load_config("test", overrides=overrides, environ={})
    stack = EmbeddedStack(cfg)
    runs: list[dict[str, Any]] = []
    load_before = os.getloadavg()
    try:
        stack.up(progress=lambda message: None)
        props = cfg.kafka.client_config()
        produce = _produce if table == "bronze.rsvps_raw" else _produce_analyzed
        topic, produce_s = produce(props, max(sizes))
        for size in sizes:
            for path in PATHS:
                lake = folder / f"lake-{path}-{size}"
                spec = {"overrides": overrides | _loader(lake, topic, path, size, table),
                        "topic": topic, "records": size, "path": path, "table": table}
                runs.append(_launch(spec))
                print(f"records={size} path={path} {runs[-1]}", file=sys.stderr, flush=True)
    finally:
        stack.down(progress=lambda message: None)
    return {"benchmark": "loader_paths", "table": table, "records_in_topic": max(sizes),
            "produce_s": round(produce_s, 1),
            "spark_master": "local[2]", "driver_memory": "default (1g)", "runs": runs,
            "loadavg_start": [round(x, 2) for x in load_before],
            "loadavg_end": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count()}


def _loader(lake: Path, topic: str, path: str, size: int, table: str) -> dict[str, Any]:
    return {"lake.root": str(lake), "loader.write_path": path, "loader.driver_path_max_rows": size,
            "loader.driver_path_max_bytes": UNBOUNDED_BYTES,
            "loader.tables": {table: {"topic": topic, "quality_policy": "quarantine"}}}


def _launch(spec: dict[str, Any]) -> dict[str, Any]:
    command = [sys.executable, str(REPO / "bench" / "loader.py"), "--child", json.dumps(spec)]
    began = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=REPO,
                              check=False, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
    except subprocess.TimeoutExpired:
        return {"records": spec["records"], "path": spec["path"], "error": f"timeout {RUN_TIMEOUT_S}s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        logged = done.stderr.splitlines()
        tail = ([line for line in logged if "OutOfMemoryError" in line][:1]
                or [line for line in logged if "Error" in line or "error" in line][-3:])
        return {"records": spec["records"], "path": spec["path"], "exit_code": done.returncode,
                "wall_s": round(time.monotonic() - began, 1), "error": " | ".join(tail)[:600]}
    return json.loads(lines[-1])


def _one_run(spec: dict[str, Any]) -> dict[str, Any]:
    """In a fresh process: build Spark, load ``records`` offsets, report time and memory."""
    from jobs.config.load import load_config
    from jobs.loader.load import run_load
    from jobs.loader.offsets import parse_until
    from jobs.loader.scale import loader_spark
    from jobs.loader.tables import targets

    cfg = load_config("test", overrides=spec["overrides"], environ={})
    spark = loader_spark(cfg, app_name=f"bench-loader-{spec['path']}")
    jvm = spark.sparkContext._gateway.proc.pid  # type: ignore[union-attr]
    records = spec["records"]
    merge = spec.get("table", "bronze.rsvps_raw") != "bronze.rsvps_raw"
    before = {"loadavg": [round(x, 2) for x in os.getloadavg()],
              "py_rss_mb": _status_mb(os.getpid(), "VmRSS"), "jvm_rss_mb": _status_mb(jvm, "VmRSS")}
    began, error, results, steps = time.perf_counter(), None, [], []
    try:
        for bound in ([records // 2, records] if merge else [records]):
            ends = {str(p): bound // PARTITIONS + (p < bound % PARTITIONS) for p in range(PARTITIONS)}
            step = time.perf_counter()
            results += run_load(spark, cfg, targets(cfg), parse_until(json.dumps({spec["topic"]: ends})))
            steps.append(round(time.perf_counter() - step, 2))
    except Exception as exc:  # an OOM is a result of this benchmark
        error = str(exc).splitlines()[0][:400]
    seconds = time.perf_counter() - began
    rows = sum(result.rows + result.quarantined for result in results)
    out = {
        "records": records, "path": spec["path"], "seconds": round(seconds, 2), "load_seconds": steps,
        "rows_per_s": round(rows / seconds) if rows else 0, "rows": rows,
        "outcomes": [(r.outcome, r.write_path, r.rows, r.error and r.error[:300]) for r in results],
        "error": error, "before": before,
        "driver_python_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "driver_jvm_peak_rss_mb": _status_mb(jvm, "VmHWM"),
        "executor_python_worker_peak_rss_mb": max((_status_mb(pid, "VmHWM") for pid in _python_children(jvm)),
                                                  default=None),
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
    }
    if merge and not error:  # the merge's answer: one row per distinct rsvp id
        from deltalake import DeltaTable

        from jobs.lake.delta import table_uri

        out["table_rows"] = DeltaTable(table_uri(cfg.lake.root, spec["table"])).count()
        out["expected_table_rows"] = len(set(analyzed_ids(records)))
    spark.stop()
    return out


def _status_mb(pid: int, field: str) -> int | None:
    """A ``/proc/<pid>/status`` memory field (VmRSS now, VmHWM the peak) in MB."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    line = next((line for line in text.splitlines() if line.startswith(f"{field}:")), None)
    return round(int(line.split()[1]) / 1024) if line else None


def _python_children(pid: int) -> list[int]:
    import psutil

    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []
    return [child.pid for child in children if "python" in child.name()]


def _produce(props: dict[str, str], records: int) -> tuple[str, float]:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from bench.kafka_source import produce_one

    topic = f"bench.{uuid.uuid4().hex[:10]}"
    admin = AdminClient(props)  # kept referenced until the topic exists
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    producer = Producer({**props, "linger.ms": 20, "queue.buffering.max.messages": 1_000_000})
    now_ms = int(time.time() * 1000)
    began = time.monotonic()
    for index in range(records):
        value = json.dumps({"rsvp_id": index + 1, "mtime": now_ms - records + index, "response": "yes",
                            "guests": index % 3, "member": {"member_id": index, "member_name": "m" * 20},
                            "event": {"event_id": f"ev{index % 977}", "event_name": "e" * 60},
                            "group": {"group_city": "Barcelona", "group_country": "es"}})
        produce_one(producer, topic, value.encode(), str(index + 1).encode(), index % PARTITIONS, index)
    if producer.flush(300):
        raise RuntimeError("producer could not flush within 300 s")
    return topic, time.monotonic() - began


def _produce_analyzed(props: dict[str, str], records: int) -> tuple[str, float]:
    """rsvps.analyzed records; one in ten re-sends an earlier record's id, later."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from bench.kafka_source import produce_one

    topic = f"bench.{uuid.uuid4().hex[:10]}"
    admin = AdminClient(props)
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    producer = Producer({**props, "linger.ms": 20, "queue.buffering.max.messages": 1_000_000})
    now_ms, ids = int(time.time() * 1000), analyzed_ids(records)
    began = time.monotonic()
    for index, rsvp_id in enumerate(ids):
        event_ms = now_ms - 86_400_000 * (rsvp_id % 3) - records + index  # an update is newer
        value = json.dumps({
            "schema_version": 1, "rsvp_id": rsvp_id, "event_time_ms": event_ms,
            "event_id": f"ev{index % 977}", "event_name": "e" * 60, "group_id": index % 501,
            "group_name": "g" * 30, "member_id": index, "response": "no" if index % 7 else "yes",
            "guests": index % 3, "topics": ["Salsa", "Jazz"][: 1 + index % 2], "city": "Barcelona",
            "country": "ES", "state": None, "lat": 41.38, "lon": 2.17, "venue_id": index % 313,
            "source_topic": "rsvps.raw", "source_partition": index % PARTITIONS, "source_offset": index,
            "kafka_timestamp_ms": event_ms + 100, "ingest_lag_ms": 100, "late": False})
        produce_one(producer, topic, value.encode(), str(rsvp_id).encode(), index % PARTITIONS, index)
    if producer.flush(300):
        raise RuntimeError("producer could not flush within 300 s")
    return topic, time.monotonic() - began


def analyzed_ids(records: int) -> list[int]:
    """The rsvp id of each record: ``i + 1``, or, when ``i % 10 == 5``, record ``i // 2``'s id."""
    ids: list[int] = []
    for index in range(records):
        ids.append(ids[index // 2] if index % 10 == 5 else index + 1)
    return ids


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]

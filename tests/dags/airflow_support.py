"""Helpers of the tests on the real Airflow of `kappa airflow up`: its REST API, topics, data."""

from __future__ import annotations

import json
import time
from datetime import UTC, date, datetime
from datetime import time as clock
from typing import Any

FINAL = ("success", "failed")


def ensure_topics(cfg, topics: dict[str, int]) -> None:
    """Create each of ``topics`` ({name: partitions}) that does not exist yet."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(cfg.kafka.client_config())
    present = set(admin.list_topics(timeout=15).topics)
    wanted = [NewTopic(name, partitions, 1) for name, partitions in topics.items() if name not in present]
    for future in (admin.create_topics(wanted).values() if wanted else []):
        future.result(timeout=30)


def wait_for(what: str, get, timeout_s: float = 600, poll_s: float = 3) -> Any:
    """``get()`` until it returns something true; its value."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = get()
        if found:
            return found
        time.sleep(poll_s)
    raise AssertionError(f"{what} not reached within {timeout_s:.0f}s")


def runs(api, dag_id: str, **params: Any) -> list[dict]:
    """The DAG's runs, oldest first."""
    listed = api.get(f"/api/v2/dags/{dag_id}/dagRuns", params={"limit": 100, "order_by": "id", **params})
    assert listed.status_code == 200, listed.text
    return listed.json()["dag_runs"]


def trigger(api, dag_id: str) -> str:
    """A manual run of ``dag_id`` (no logical date, as the UI's trigger button); its run id."""
    created = api.post(f"/api/v2/dags/{dag_id}/dagRuns", json={"logical_date": None})
    assert created.status_code in (200, 201), created.text
    return created.json()["dag_run_id"]


def finished(api, dag_id: str, run_id: str, timeout_s: float = 600) -> dict:
    """The run once it ended."""
    def check() -> dict | None:
        run = api.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}").json()
        return run if run["state"] in FINAL else None

    return wait_for(f"{dag_id} {run_id} ended", check, timeout_s)


def settled(api, dag_id: str, after: set[str], run_type: str | None = None,
            timeout_s: float = 600) -> list[dict]:
    """Wait for a run of ``dag_id`` not in ``after`` (of ``run_type``, if given) and for every
    run to end; the new runs."""
    def check() -> list[dict] | None:
        listed = runs(api, dag_id)
        new = [run for run in listed if run["dag_run_id"] not in after]
        wanted = [run for run in new if run_type in (None, run["run_type"])]
        return new if wanted and all(run["state"] in FINAL for run in listed) else None

    return wait_for(f"a new {run_type or ''} run of {dag_id}, every run ended", check, timeout_s)


def ended_ids(api, *dag_ids: str) -> dict[str, set[str]]:
    """The ids of each DAG's runs that have ended: a run still going (the scheduler's own, made
    at a quarter hour) counts as new, so what it loads is not missed."""
    return {dag_id: {run["dag_run_id"] for run in runs(api, dag_id) if run["state"] in FINAL}
            for dag_id in dag_ids}


def run_ids(api, *dag_ids: str) -> dict[str, set[str]]:
    """The run ids of each DAG now."""
    return {dag_id: {run["dag_run_id"] for run in runs(api, dag_id)} for dag_id in dag_ids}


def task_instances(api, dag_id: str, run_id: str) -> list[dict]:
    """The run's task instances."""
    listed = api.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
    assert listed.status_code == 200, listed.text
    return listed.json()["task_instances"]


def xcom(api, dag_id: str, run_id: str, task_id: str) -> Any:
    """The task's return value."""
    entry = api.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/"
                    "return_value").json()
    value = entry.get("value")
    return json.loads(value) if isinstance(value, str) else value


def analyzed_record(rsvp_id: int, day: date, city: str, *, guests: int = 0, response: str = "yes",
                    source_topic: str = "rsvps.raw") -> dict:
    """One ``rsvps.analyzed`` record as the streaming job writes it, for an RSVP at noon of ``day``."""
    ms = int(datetime.combine(day, clock(12), UTC).timestamp() * 1000) + rsvp_id
    return {"schema_version": 1, "rsvp_id": rsvp_id, "event_time_ms": ms,
            "event_time": datetime.fromtimestamp(ms / 1000, UTC).isoformat(), "event_id": f"e{rsvp_id}",
            "event_name": "Salsa night", "group_id": 7, "group_name": "Salsa", "member_id": 100 + rsvp_id,
            "response": response, "guests": guests, "topics": ["Salsa"], "city": city, "country": "es",
            "state": None, "lat": 41.4, "lon": 2.17, "venue_id": 5, "source_topic": source_topic,
            "source_partition": 0, "source_offset": rsvp_id, "kafka_timestamp_ms": ms,
            "ingest_lag_ms": 0, "late": False}


def produce_records(cfg, topic: str, records: list[dict]) -> None:
    """``records`` as JSON, keyed by ``rsvp_id``, stamped now (as the streaming job writes them)."""
    from confluent_kafka import Producer

    producer = Producer(cfg.kafka.client_config())
    for record in records:
        producer.produce(topic, json.dumps(record).encode(), key=str(record["rsvp_id"]).encode())
    assert producer.flush(30) == 0


def gold_rows(root: str, table: str, columns: tuple[str, ...]) -> dict[str, list[tuple]]:
    """{event_date: sorted rows of ``columns``} of a gold table (empty when it does not exist)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    from jobs.lake.delta import table_uri

    try:
        rows = DeltaTable(table_uri(root, table)).to_pyarrow_table().to_pylist()
    except TableNotFoundError:
        return {}
    found: dict[str, list[tuple]] = {}
    for row in rows:
        found.setdefault(str(row["event_date"]), []).append(tuple(row[c] for c in columns))
    return {day: sorted(values) for day, values in found.items()}


def produce_in_hours(cfg, start: datetime, per_hour: int) -> None:
    """Two hours of ``per_hour`` generated RSVPs each from ``start`` into the source topic."""
    from confluent_kafka import Producer

    from pipelines.rsvp.generator import RsvpGenerator

    producer = Producer(cfg.kafka.client_config())
    lines = RsvpGenerator(seed=16, start_ms=int(start.timestamp() * 1000)).generate(2 * per_hour)
    step_ms = 3_600_000 // per_hour
    for index, item in enumerate(lines):
        stamp = int(start.timestamp() * 1000) + index * step_ms
        producer.produce(cfg.streaming.source_topic, item.line, key=str(item.rsvp_id).encode(),
                         timestamp=stamp)
    assert producer.flush(30) == 0


def kafka_count(cfg, start: datetime, end: datetime) -> int:
    """Records of the source topic whose timestamp is in [start, end): read straight from Kafka."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**cfg.kafka.client_config(), "group.id": "dag-test-count",
                         "enable.auto.commit": False})
    topic = cfg.streaming.source_topic
    count, lo, hi = 0, start.timestamp() * 1000, end.timestamp() * 1000
    try:
        for partition in consumer.list_topics(topic, timeout=10).topics[topic].partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            consumer.assign([TopicPartition(topic, partition, low)])
            position = low
            while position < high:
                message = consumer.poll(10)
                assert message is not None and not message.error()
                position = message.offset() + 1
                count += lo <= message.timestamp()[1] < hi
    finally:
        consumer.close()
    return count


def bronze_rows(cfg) -> int:
    """Rows of ``bronze.rsvps_raw`` (0 when the table does not exist)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    from jobs.lake.delta import table_uri

    try:
        return DeltaTable(table_uri(cfg.lake.root, "bronze.rsvps_raw")).to_pyarrow_table().num_rows
    except TableNotFoundError:
        return 0
